"""Write a results directory by hand, through the results contract's own types, so that a
test knows every figure in it and the directory is one the engine could have written: every
cell planned in ``campaign_started``, every finished attempt backed by its part file."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from specbench_tui.errors import InputError
from specbench_tui.plan.estimate import recorded_estimate
from specbench_tui.plan.loader import load_plan
from specbench_tui.results.cells import Cell, ServiceGroup
from specbench_tui.results.events import (
    Aborted,
    CampaignFinished,
    CampaignStarted,
    CellFailed,
    CellFinished,
    CellQueued,
    CellSkipped,
    CellStarted,
    CheckVerdict,
    Event,
    GroupFinished,
    GroupStarted,
    ServiceReady,
)
from specbench_tui.results.files import event_line
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.records import REQUEST_COLUMNS
from specbench_tui.results.schema import REQUEST_SCHEMA, TELEMETRY_SCHEMA

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def request_row(**kw: Any) -> dict[str, Any]:
    """A request row with plausible defaults; ``kw`` overrides any column."""
    row: dict[str, Any] = dict.fromkeys(REQUEST_COLUMNS)
    row.update(
        campaign="syn",
        attempt=1,
        host="sim",
        tp=1,
        workload="single",
        kind="single",
        prompt_set="chat",
        max_tokens=64,
        started_at=1000.0,
        ttft_s=0.05,
        e2e_s=1.0,
        tpot_s=0.01,
        itl_s=[0.01, 0.01],
        output_tokens=64,
        prompt_tokens=100,
        cached_tokens=0,
        chunks=10,
        output_tok_s=64.0,
        finish_reason="length",
    )
    row.update(kw)
    return row


@dataclass
class ResultsBuilder:
    root: Path
    campaign: str = "syn"
    title: str = ""
    simulated: bool = True
    groups: dict[str, ServiceGroup] = field(default_factory=dict)
    cells: dict[str, Cell] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    _t: float = T0

    @property
    def layout(self) -> ResultsLayout:
        return ResultsLayout(self.root)

    def group(self, config: str, tp: int, *, host: str = "sim", label: str = "") -> ServiceGroup:
        gid = f"{host}.{config}.tp{tp}"
        if gid not in self.groups:
            self.groups[gid] = ServiceGroup(
                id=gid,
                host=host,
                host_kind="sim",
                config=config,
                label=label or config,
                tp=tp,
                gpu_ids=tuple(range(8 - tp, 8)),
                port=30000,
                command=("python", "-m", "sglang.launch_server", "--tp-size", str(tp)),
                env=(),
                api="sglang",
                ready_timeout_s=900.0,
                speculative=config != "ar",
            )
        return self.groups[gid]

    def cell(self, cid: str, config: str, tp: int, workload: str, kind: str, **kw: Any) -> Cell:
        g = self.group(config, tp, host=kw.pop("host", "sim"), label=kw.pop("label", ""))
        fields: dict[str, Any] = dict(
            id=cid,
            name=f"{g.id}/{workload}/{cid}",
            group=g.id,
            host=g.host,
            config=config,
            tp=tp,
            workload=workload,
            kind=kind,
            prompt_set="chat" if kind == "single" else None,
            max_tokens=64,
            concurrency=None,
            prompts=("chat",),
        )
        fields.update(kw)
        self.cells[cid] = Cell(**fields)
        return self.cells[cid]

    def _tick(self) -> float:
        self._t += 10.0
        return self._t

    def _part(self, cid: str, attempt: int, rows: list[dict[str, Any]]) -> None:
        c = self.cells[cid]
        full = [
            request_row(
                **{
                    "cell_id": cid,
                    "attempt": attempt,
                    "group": c.group,
                    "host": c.host,
                    "config": c.config,
                    "tp": c.tp,
                    "workload": c.workload,
                    "kind": c.kind,
                    "prompt_set": c.prompt_set,
                    "max_tokens": c.max_tokens,
                    "concurrency": c.concurrency,
                    **r,
                }
            )
            for r in rows
        ]
        self.rows.extend(full)
        self.layout.parts.mkdir(parents=True, exist_ok=True)
        df = (
            pl.DataFrame(full, schema=REQUEST_SCHEMA, orient="row")
            if full
            else pl.DataFrame(schema=REQUEST_SCHEMA)
        )
        df.write_parquet(self.layout.part_path(cid, attempt))

    def started(self, cid: str, attempt: int = 1) -> None:
        c = self.cells[cid]
        self.events.append(
            CellStarted(cell_id=cid, group=c.group, cell=c.name, attempt=attempt, ts=self._tick())
        )

    def finished(
        self,
        cid: str,
        rows: list[dict[str, Any]],
        *,
        attempt: int = 1,
        figures: dict[str, Any] | None = None,
        texts: dict[str, str] | None = None,
        window_s: float = 10.0,
    ) -> None:
        """The cell started, its rows written, and finished ``window_s`` after it started."""
        c = self.cells[cid]
        self.started(cid, attempt)
        self._t += window_s - 10.0  # the next tick is its end
        self._part(cid, attempt, rows)
        if texts is not None:
            import json

            self.layout.texts_path(cid, attempt).write_text(json.dumps(texts))
        self.events.append(
            CellFinished(
                cell_id=cid,
                group=c.group,
                cell=c.name,
                attempt=attempt,
                requests=len(rows),
                errors=sum(1 for r in rows if r.get("error")),
                wall_s=1.0,
                figures=dict(figures or {}),
                ts=self._tick(),
            )
        )

    def failed(
        self, cid: str, reason: str, *, attempt: int = 1, rows: list[dict[str, Any]] | None = None
    ) -> None:
        c = self.cells[cid]
        self.started(cid, attempt)
        if rows is not None:
            self._part(cid, attempt, rows)
        self.events.append(
            CellFailed(
                cell_id=cid,
                group=c.group,
                cell=c.name,
                attempt=attempt,
                reason=reason,
                ts=self._tick(),
            )
        )

    def queued(self, cid: str, attempt: int) -> None:
        c = self.cells[cid]
        self.events.append(
            CellQueued(cell_id=cid, group=c.group, cell=c.name, attempt=attempt, ts=self._tick())
        )

    def skipped(self, cid: str, reason: str) -> None:
        c = self.cells[cid]
        self.events.append(
            CellSkipped(cell_id=cid, group=c.group, cell=c.name, reason=reason, ts=self._tick())
        )

    def ready(self, gid: str, startup_s: float = 5.0) -> float:
        """The group's server started and became ready; returns the ready time."""
        g = self.groups[gid]
        self.events.append(
            GroupStarted(group=gid, host=g.host, config=g.config, tp=g.tp, ts=self._tick())
        )
        ts = self._tick()
        self.events.append(ServiceReady(group=gid, startup_s=startup_s, ts=ts))
        return ts

    def group_done(self, gid: str) -> float:
        ts = self._tick()
        self.events.append(GroupFinished(group=gid, ts=ts))
        return ts

    def verdict(
        self,
        config: str,
        tp: int,
        status: str,
        text: str,
        host: str = "sim",
        *,
        check: str = "greedy",
        detail: dict[str, Any] | None = None,
    ) -> None:
        self.events.append(
            CheckVerdict(
                check=check,
                config=config,
                host=host,
                tp=tp,
                status=status,
                text=text,
                detail=dict(detail or {}),
                ts=self._tick(),
            )
        )

    def aborted(self, reason: str = "by operator") -> None:
        self.events.append(Aborted(by="operator", reason=reason, ts=self._tick()))

    def now(self) -> float:
        """The time of the last event written so far."""
        return self._t

    def telemetry(self, rows: dict[str, list[Any]]) -> None:
        self.layout.telemetry_parts.mkdir(parents=True, exist_ok=True)
        schema = {k: TELEMETRY_SCHEMA[k] for k in rows}  # the columns given (older files lack some)
        pl.DataFrame(rows, schema=schema).write_parquet(
            self.layout.telemetry_parts / "000001.parquet"
        )

    def _estimate(self) -> list[Event]:
        """What a run records when it starts: the estimate of the plan as run, if there is
        one that loads."""
        if not self.layout.plan.exists():
            return []
        try:
            plan = load_plan(self.layout.plan)
            ev = recorded_estimate(
                plan.spec,
                plan.prompts,
                list(self.groups.values()),
                list(self.cells.values()),
                sim=self.simulated,
            )
        except (InputError, KeyError, ValueError):
            return []
        ev.ts = T0
        return [ev]

    def write(
        self,
        *,
        finished: bool = True,
        torn_tail: bool = False,
        plan: str = "",
        wall_s: float = 0.0,
    ) -> Path:
        """Write events.jsonl (campaign_started first), requests.parquet and the plan."""
        self.root.mkdir(parents=True, exist_ok=True)
        if plan:
            self.layout.plan.write_text(plan)
        start = CampaignStarted(
            campaign=self.campaign,
            title=self.title,
            plan_hash="abc123",
            results_dir=str(self.root),
            hosts=sorted({g.host for g in self.groups.values()}),
            groups=list(self.groups.values()),
            cells=list(self.cells.values()),
            selected=list(self.cells),
            simulated=self.simulated,
            ts=T0,
        )
        events: list[Event] = [start, *self._estimate(), *self.events]
        if finished:
            events.append(CampaignFinished(campaign=self.campaign, wall_s=wall_s, ts=self._tick()))
        text = "".join(event_line(e) for e in events)
        self.layout.events.write_text(text + ('{"torn line' if torn_tail else ""))
        df = (
            pl.DataFrame(self.rows, schema=REQUEST_SCHEMA, orient="row")
            if self.rows
            else pl.DataFrame(schema=REQUEST_SCHEMA)
        )
        df.write_parquet(self.layout.requests)
        return self.root

"""The state of a campaign as an observer sees it, rebuilt from events alone.

``CampaignProgress`` is a pure reducer: ``apply(event)`` is the only way in, and it never reads
the scheduler. The console, the headless printer and a detached console can all hold one and
agree on what "done", "running" or "ETA" means, because they all compute it here from the
same stream (replay then live). It deliberately has no textual import and no clock of its
own: time-dependent answers (elapsed, ETA, uptime) take ``now`` so that tests and snapshots
are deterministic.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from specbench_tui.results.events import (
    Aborted,
    CampaignFinished,
    CampaignStarted,
    CellFailed,
    CellFinished,
    CellQueued,
    CellSkipped,
    CellStarted,
    Event,
    GpuSample,
    GroupFinished,
    GroupStarted,
    LogLine,
    Notice,
    Paused,
    RequestDone,
    Resumed,
    ServiceFailed,
    ServiceReady,
)

CellStatus = Literal["pending", "running", "done", "failed", "skipped"]
ServerState = Literal["pending", "starting", "ready", "failed", "stopped"]
CELL_STATUSES: tuple[str, ...] = ("pending", "running", "done", "failed", "skipped")

#: Lines of server log kept per group: enough for a failure's context, bounded for hours-long runs.
LOG_TAIL_LINES = 40


@dataclass
class CellState:
    """One cell: its plan identity (from ``CampaignStarted``) and what happened to it so far."""

    id: str
    name: str
    group: str
    host: str = ""
    config: str = ""
    tp: int = 0
    workload: str = ""
    kind: str = "single"
    spec: dict[str, Any] = field(default_factory=dict)  # Cell.to_json(), for the detail view
    status: CellStatus = "pending"
    attempt: int = 0  # attempts started so far; a queued rerun shows the next one
    started_at: float | None = None
    ended_at: float | None = None
    duration_s: float | None = None  # measured: started -> finished, for the ETA
    requests_done: int = 0
    requests_total: int = 0
    request_errors: int = 0
    figures: dict[str, float | int | None] = field(default_factory=dict)
    reason: str = ""
    log_tail: list[str] = field(default_factory=list)
    resumed: bool = False  # finished in an earlier run of the same plan


@dataclass
class GroupState:
    """One service group (one server start) and the state of its server."""

    id: str
    host: str = ""
    config: str = ""
    label: str = ""
    tp: int = 0
    gpu_ids: list[int] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    speculative: bool = False
    cells: list[str] = field(default_factory=list)  # cell ids in plan order
    server: ServerState = "pending"
    attempt: int = 0
    started_at: float | None = None  # server start requested
    ready_at: float | None = None
    startup_s: float | None = None
    status: str = "pending"  # pending | running | done | failed | skipped
    reason: str = ""
    log_tail: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_TAIL_LINES))
    last_stats: dict[str, float] = field(default_factory=dict)

    def uptime_s(self, now: float) -> float | None:
        """Seconds the server has been healthy, or None when it is not up."""
        if self.server != "ready" or self.ready_at is None:
            return None
        return max(0.0, now - self.ready_at)


@dataclass
class GpuState:
    """The latest telemetry sample of one GPU."""

    host: str
    gpu: int
    util_pct: float = 0.0
    mem_used_mib: float = 0.0
    mem_total_mib: float = 0.0
    power_w: float = 0.0
    temp_c: float = 0.0
    processes: list[str] = field(default_factory=list)
    ts: float = 0.0


@dataclass(frozen=True)
class Counts:
    """Cells by status; ``total`` is every cell of the plan, resumed ones included."""

    done: int = 0
    failed: int = 0
    skipped: int = 0
    running: int = 0
    pending: int = 0

    @property
    def total(self) -> int:
        return self.done + self.failed + self.skipped + self.running + self.pending

    @property
    def settled(self) -> int:
        """Cells that need nothing more: what a progress bar fills with."""
        return self.done + self.failed + self.skipped


class CampaignProgress:
    """Reduce a campaign's event stream to the state every observer needs."""

    def __init__(self) -> None:
        self.campaign: str = ""
        self.title: str = ""
        self.hosts: list[str] = []
        self.results_dir: str = ""
        self.simulated: bool = False
        self.groups: dict[str, GroupState] = {}
        self.cells: dict[str, CellState] = {}
        self.gpus: dict[tuple[str, int], GpuState] = {}
        self.current_group: str | None = None
        self.current_cell: str | None = None
        self.paused: bool = False
        self.paused_by: str = ""
        self.finished: bool = False
        self.aborted: bool = False
        self.abort_reason: str = ""
        self.exit_code: int | None = None
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.last_ts: float | None = None
        self.notices: deque[Notice] = deque(maxlen=50)
        self.events_seen: int = 0
        self._by_name: dict[str, str] = {}  # cell name -> id, for events that only name cells

    # --- reducer ---------------------------------------------------------------------------

    def apply(self, ev: Event) -> None:
        """Fold one event into the state. Unknown events are ignored, never an error, so an
        older console keeps working against a newer engine."""
        self.events_seen += 1
        self.last_ts = ev.ts if self.last_ts is None else max(self.last_ts, ev.ts)
        handler = _HANDLERS.get(type(ev))
        if handler is not None:
            handler(self, ev)

    def apply_all(self, events: list[Event]) -> None:
        for ev in events:
            self.apply(ev)

    def _campaign_started(self, ev: CampaignStarted) -> None:
        self.campaign, self.title = ev.campaign, ev.title
        self.hosts = list(ev.hosts)
        self.results_dir, self.simulated = ev.results_dir, ev.simulated
        self.started_at = ev.ts
        self.finished = self.aborted = self.paused = False
        self.finished_at = self.exit_code = None
        self.groups = {}
        self.cells = {}
        for g in ev.groups:
            gid = str(g.get("id", ""))
            self.groups[gid] = GroupState(
                id=gid,
                host=str(g.get("host", "")),
                config=str(g.get("config", "")),
                label=str(g.get("label", "")),
                tp=int(g.get("tp", 0) or 0),
                gpu_ids=[int(x) for x in g.get("gpu_ids", [])],
                command=[str(x) for x in g.get("command", [])],
                speculative=bool(g.get("speculative", False)),
            )
        done = set(ev.done)
        for c in ev.cells:
            cid = str(c.get("id", ""))
            gid = str(c.get("group", ""))
            cell = CellState(
                id=cid,
                name=str(c.get("name", cid)),
                group=gid,
                host=str(c.get("host", "")),
                config=str(c.get("config", "")),
                tp=int(c.get("tp", 0) or 0),
                workload=str(c.get("workload", "")),
                kind=str(c.get("kind", "single")),
                spec=dict(c),
            )
            cell.attempt = int(c.get("attempt", 0) or 0)
            earlier = c.get("status")
            if cid in done:
                cell.status, cell.resumed = "done", True
            elif earlier in ("failed", "skipped"):  # ended in an earlier run of the plan
                cell.status, cell.resumed = earlier, True
                cell.reason = str(c.get("reason", ""))
            elif earlier == "held":
                cell.status, cell.reason = "skipped", "not selected for this run"
            self.cells[cid] = cell
            self._by_name[cell.name] = cid
            group = self.groups.get(gid)
            if group is None:  # a cell whose group was not announced: keep it visible anyway
                group = self.groups[gid] = GroupState(
                    id=gid, host=cell.host, config=cell.config, tp=cell.tp
                )
            group.cells.append(cid)
        if not self.hosts:
            self.hosts = sorted({g.host for g in self.groups.values() if g.host})

    def _cell(self, cell_id: str, name: str = "", group: str = "") -> CellState:
        """The cell an event speaks of; an unplanned one is added rather than dropped."""
        cell = self.cells.get(cell_id)
        if cell is None and name and name in self._by_name:
            cell = self.cells[self._by_name[name]]
        if cell is None:
            cell = CellState(id=cell_id, name=name or cell_id, group=group)
            self.cells[cell_id] = cell
            if name:
                self._by_name[name] = cell_id
            self._group(group).cells.append(cell_id)
        return cell

    def _group(self, gid: str) -> GroupState:
        group = self.groups.get(gid)
        if group is None:
            group = self.groups[gid] = GroupState(id=gid)
        return group

    def _group_started(self, ev: GroupStarted) -> None:
        g = self._group(ev.group)
        g.host = ev.host or g.host
        g.config = ev.config or g.config
        g.tp = ev.tp or g.tp
        if ev.gpu_ids:
            g.gpu_ids = list(ev.gpu_ids)
        if ev.command:
            g.command = list(ev.command)
        g.server, g.status, g.attempt = "starting", "running", ev.attempt
        g.started_at, g.ready_at, g.reason = ev.ts, None, ""
        g.log_tail.clear()
        self.current_group = ev.group

    def _service_ready(self, ev: ServiceReady) -> None:
        g = self._group(ev.group)
        g.server, g.ready_at = "ready", ev.ts
        g.startup_s = ev.startup_s or (ev.ts - g.started_at if g.started_at else None)

    def _service_failed(self, ev: ServiceFailed) -> None:
        g = self._group(ev.group)
        g.server, g.reason, g.ready_at = "failed", ev.reason, None
        g.log_tail.extend(ev.log_tail)

    def _group_finished(self, ev: GroupFinished) -> None:
        g = self._group(ev.group)
        g.status = ev.status
        if g.server != "failed":
            g.server = "stopped"
        g.ready_at = None
        if self.current_group == ev.group:
            self.current_group = None

    def _cell_started(self, ev: CellStarted) -> None:
        c = self._cell(ev.cell_id, ev.cell, ev.group)
        c.status, c.attempt = "running", ev.attempt
        c.started_at, c.ended_at, c.duration_s = ev.ts, None, None
        c.requests_done, c.requests_total, c.request_errors = 0, ev.requests, 0
        c.reason, c.log_tail, c.figures, c.resumed = "", [], {}, False
        self.current_cell = c.id
        if c.group:
            self.current_group = c.group

    def _ended(self, c: CellState, ts: float) -> None:
        c.ended_at = ts
        if self.current_cell == c.id:
            self.current_cell = None

    def _cell_finished(self, ev: CellFinished) -> None:
        c = self._cell(ev.cell_id, ev.cell, ev.group)
        c.status, c.attempt = "done", ev.attempt
        c.duration_s = ev.ts - c.started_at if c.started_at is not None else ev.wall_s or None
        c.requests_done = max(c.requests_done, ev.requests)
        c.request_errors = ev.errors
        c.figures = {
            "requests": ev.requests,
            "errors": ev.errors,
            "wall_s": ev.wall_s,
            "throughput_tok_s": ev.throughput_tok_s,
            "ttft_p50_s": ev.ttft_p50_s,
            "output_tok_s_p50": ev.output_tok_s_p50,
            "accept_length_mean": ev.accept_length_mean,
            "client_lagged": ev.client_lagged,
            "client_lag_p99_s": ev.client_lag_p99_s,
        }
        self._ended(c, ev.ts)

    def _cell_failed(self, ev: CellFailed) -> None:
        c = self._cell(ev.cell_id, ev.cell, ev.group)
        c.status, c.attempt, c.reason = "failed", ev.attempt, ev.reason
        c.log_tail = list(ev.log_tail)
        self._ended(c, ev.ts)

    def _cell_skipped(self, ev: CellSkipped) -> None:
        c = self._cell(ev.cell_id, ev.cell, ev.group)
        c.status, c.reason = "skipped", ev.reason or (f"skipped by {ev.by}" if ev.by else "")
        c.attempt = max(c.attempt, ev.attempt if c.started_at is not None else 0)
        self._ended(c, ev.ts)

    def _cell_queued(self, ev: CellQueued) -> None:
        c = self._cell(ev.cell_id, ev.cell, ev.group)
        c.status, c.resumed = "pending", False
        c.attempt = max(ev.attempt - 1, 0)
        c.ended_at = None
        if self.finished:  # a rerun after the end brings the campaign back to life
            self.finished = False

    def _request_done(self, ev: RequestDone) -> None:
        c = self.cells.get(ev.cell_id)
        if c is None:
            return
        c.requests_done = max(c.requests_done, ev.done)
        c.requests_total = ev.total or c.requests_total
        if ev.error:
            c.request_errors += 1

    def _log_line(self, ev: LogLine) -> None:
        g = self._group(ev.group)
        g.log_tail.append(ev.line)
        if ev.stats:
            g.last_stats.update(ev.stats)

    def _gpu_sample(self, ev: GpuSample) -> None:
        key = (ev.host, ev.gpu)
        gpu = self.gpus.get(key)
        if gpu is None:
            gpu = self.gpus[key] = GpuState(host=ev.host, gpu=ev.gpu)
        gpu.util_pct, gpu.mem_used_mib, gpu.mem_total_mib = (
            ev.util_pct,
            ev.mem_used_mib,
            ev.mem_total_mib,
        )
        gpu.power_w, gpu.temp_c, gpu.processes, gpu.ts = (
            ev.power_w,
            ev.temp_c,
            list(ev.processes),
            ev.ts,
        )

    def _paused(self, ev: Paused) -> None:
        self.paused, self.paused_by = True, ev.by

    def _resumed(self, ev: Resumed) -> None:
        self.paused, self.paused_by = False, ""

    def _aborted(self, ev: Aborted) -> None:
        self.aborted, self.abort_reason = True, ev.reason or (f"by {ev.by}" if ev.by else "")

    def _notice(self, ev: Notice) -> None:
        self.notices.append(ev)

    def _campaign_finished(self, ev: CampaignFinished) -> None:
        self.finished, self.finished_at, self.exit_code = True, ev.ts, ev.exit_code
        self.paused = False
        self.current_cell = self.current_group = None
        for c in self.cells.values():  # a cell cut short by an abort is no longer running
            if c.status == "running":
                c.status = "skipped"
                c.reason = c.reason or "campaign ended"
        for g in self.groups.values():
            if g.server in ("starting", "ready"):
                g.server = "stopped"

    # --- queries ---------------------------------------------------------------------------

    @property
    def counts(self) -> Counts:
        tally = dict.fromkeys(CELL_STATUSES, 0)
        for c in self.cells.values():
            tally[c.status] += 1
        return Counts(**tally)

    def group_counts(self, gid: str) -> Counts:
        return self.counts_of(self.groups[gid].cells if gid in self.groups else [])

    def counts_of(self, cell_ids: list[str]) -> Counts:
        tally = dict.fromkeys(CELL_STATUSES, 0)
        for cid in cell_ids:
            c = self.cells.get(cid)
            if c is not None:
                tally[c.status] += 1
        return Counts(**tally)

    def elapsed_s(self, now: float) -> float:
        """Wall time of this run of the campaign; frozen once it finished."""
        if self.started_at is None:
            return 0.0
        end = self.finished_at if self.finished_at is not None else now
        return max(0.0, end - self.started_at)

    def mean_durations(self) -> dict[str, float]:
        """Mean measured duration per workload kind, over the cells that finished in this run
        (resumed cells have no duration: they did not run here)."""
        sums: dict[str, list[float]] = {}
        for c in self.cells.values():
            if c.status == "done" and c.duration_s is not None and c.duration_s > 0:
                sums.setdefault(c.kind, []).append(c.duration_s)
        return {k: sum(v) / len(v) for k, v in sums.items()}

    def mean_startup_s(self) -> float | None:
        ups = [g.startup_s for g in self.groups.values() if g.startup_s]
        return sum(ups) / len(ups) if ups else None

    def eta_s(self, now: float) -> float | None:
        """Seconds left: for each cell still to run, the mean measured duration of its kind
        (or of all kinds, before its kind has a measurement), less the time the running cell
        has already had, plus a measured server start-up for each group not yet started.
        None until at least one cell has been measured: a guess from nothing helps nobody."""
        if self.finished:
            return 0.0
        means = self.mean_durations()
        if not means:
            return None
        overall = sum(means.values()) / len(means)
        left = 0.0
        for c in self.cells.values():
            if c.status == "pending":
                left += means.get(c.kind, overall)
            elif c.status == "running":
                expected = means.get(c.kind, overall)
                ran = now - c.started_at if c.started_at is not None else 0.0
                left += max(expected - ran, 0.0)
        startup = self.mean_startup_s()
        if startup:
            for g in self.groups.values():
                if g.server == "pending" and any(
                    self.cells[cid].status == "pending" for cid in g.cells if cid in self.cells
                ):
                    left += startup
        return left

    def cell_by_name(self, name: str) -> CellState | None:
        cid = self._by_name.get(name)
        return self.cells.get(cid) if cid else None

    def failed_cells(self) -> list[CellState]:
        return [c for c in self.cells.values() if c.status == "failed"]

    @property
    def state_word(self) -> str:
        """One word for the campaign's state, as the header and the headless printer say it."""
        if self.finished:
            return "aborted" if self.aborted else "finished"
        if self.aborted:
            return "aborting"
        if self.paused:
            return "paused"
        if self.started_at is None:
            return "waiting"
        return "running"


_HANDLERS: dict[type, Any] = {
    CampaignStarted: CampaignProgress._campaign_started,
    GroupStarted: CampaignProgress._group_started,
    ServiceReady: CampaignProgress._service_ready,
    ServiceFailed: CampaignProgress._service_failed,
    GroupFinished: CampaignProgress._group_finished,
    CellStarted: CampaignProgress._cell_started,
    CellFinished: CampaignProgress._cell_finished,
    CellFailed: CampaignProgress._cell_failed,
    CellSkipped: CampaignProgress._cell_skipped,
    CellQueued: CampaignProgress._cell_queued,
    RequestDone: CampaignProgress._request_done,
    LogLine: CampaignProgress._log_line,
    GpuSample: CampaignProgress._gpu_sample,
    Paused: CampaignProgress._paused,
    Resumed: CampaignProgress._resumed,
    Aborted: CampaignProgress._aborted,
    Notice: CampaignProgress._notice,
    CampaignFinished: CampaignProgress._campaign_finished,
}


def format_clock(seconds: float | None) -> str:
    """``1:02:03`` / ``2:03``: compact and fixed-format so header columns do not jump."""
    if seconds is None:
        return "--:--"
    s = round(max(seconds, 0.0))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"

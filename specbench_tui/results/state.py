"""The one reducer of a campaign's event log: what each cell and group is, and where the
campaign stands.

Every view of a campaign is derived from ``events.jsonl`` through this module and nowhere
else: the engine's resume selection, the console and the headless printer (through
``CampaignProgress``, which adds live state on top), the report, ``cells.parquet`` and the
console's scripted double. So "done", "failed", "held" and "interrupted" mean one thing
everywhere.

The reducer is pure: ``apply(event)`` is the only way in, it reads no clock and no file. The one
fact it cannot see in the log, whether a finished cell's request rows still exist, comes in as
the optional ``rows_exist`` predicate (the store and the report pass one that looks in
``parts/``).

Rules, in the order a log is read:
- ``campaign_started`` names the planned groups and cells of that run (a resumed campaign logs
  one per run). Cells keep the status earlier runs gave them; a cell still ``running`` from an
  earlier run was interrupted (the process died) and is pending again. ``selected`` says which
  cells this run means to run; the other pending ones are *held* (left out by ``--only`` or
  ``--rerun-failed``).
- ``cell_started`` -> running; ``cell_finished`` -> done (pending again when its rows are gone);
  ``cell_failed`` -> failed; ``cell_skipped`` -> skipped; ``cell_queued`` -> pending and selected
  (a rerun), with the attempt it will run as.
- ``campaign_finished`` ends the run; a cell still running then is pending again (interrupted).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from specbench_tui.results.cells import Cell, ServiceGroup
from specbench_tui.results.events import (
    Aborted,
    BatchJobChanged,
    CampaignFinished,
    CampaignStarted,
    CellEnergy,
    CellFailed,
    CellFinished,
    CellQueued,
    CellSkipped,
    CellStarted,
    CheckVerdict,
    EstimateRecorded,
    Event,
    GpusUnverified,
    GpusWaiting,
    GroupFinished,
    GroupStarted,
    HostState,
    Paused,
    Resumed,
    ServerDied,
    ServiceFailed,
    ServiceReady,
    TelemetryChosen,
)

CellStatus = Literal["pending", "running", "done", "failed", "skipped"]
ServerState = Literal["pending", "starting", "ready", "failed", "stopped"]
CELL_STATUSES: tuple[str, ...] = ("pending", "running", "done", "failed", "skipped")
RowsExist = Callable[[str, int], bool]

#: Why a cell's attempt was set aside unfinished (cell_queued's ``by``), kept as its reason.
INTERRUPTIONS = ("interrupted", "aborted", "host unreachable", "server died")

#: Lines of server log kept per group: enough for a failure's context, bounded for hours-long runs.
LOG_TAIL_LINES = 40


@dataclass
class CellState:
    """One cell: its plan identity (from ``campaign_started``) and what happened to it."""

    id: str
    name: str
    group: str
    host: str = ""
    config: str = ""
    tp: int = 0
    workload: str = ""
    kind: str = "single"
    cell: Cell | None = None  # the planned cell, None for one the log names but never planned
    status: CellStatus = "pending"
    attempt: int = 0  # attempts started so far; a queued rerun shows the next one
    selected: bool = True  # this run means to run it (else it is held)
    started_at: float | None = None
    ended_at: float | None = None
    duration_s: float | None = None  # started -> ended in this run, for the ETA
    requests_done: int = 0
    requests_total: int = 0
    request_errors: int = 0
    figures: dict[str, Any] = field(default_factory=dict)  # what its cell_finished said
    reason: str = ""
    log_tail: list[str] = field(default_factory=list)
    resumed: bool = False  # ended in an earlier run of the same plan
    check_failed: str = ""  # why its config failed a correctness check ("" when it did not)

    @property
    def failed_check(self) -> bool:
        """Done, but its config failed a check: its figures must not be taken as a speed-up."""
        return self.status == "done" and bool(self.check_failed)

    @property
    def held(self) -> bool:
        """Pending but left out of this run (``--only``, ``--rerun-failed``)."""
        return self.status == "pending" and not self.selected

    @property
    def spec(self) -> dict[str, Any]:
        """The planned cell as JSON, for views that show every parameter."""
        return self.cell.to_json() if self.cell is not None else {}


@dataclass
class GroupState:
    """One service group (one server start) and the state of its server."""

    id: str
    host: str = ""
    config: str = ""
    label: str = ""
    tp: int = 0
    gpu_ids: list[int] = field(default_factory=list)
    port: int = 0  # the plan's, until group_started says where it listens (packed groups)
    command: list[str] = field(default_factory=list)
    speculative: bool = False
    group: ServiceGroup | None = None
    cells: list[str] = field(default_factory=list)  # cell ids in plan order
    server: ServerState = "pending"
    attempt: int = 0
    started_at: float | None = None  # server start requested
    ready_at: float | None = None
    ended_at: float | None = None  # group_finished of its latest start (None while it runs)
    startup_s: float | None = None
    status: str = "pending"  # pending | running | done | failed | skipped
    reason: str = ""
    log_tail: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_TAIL_LINES))
    last_stats: dict[str, float] = field(default_factory=dict)  # latest parsed log figures
    # Each server start's time up: (ready, stopped; None while still up). Telemetry and log
    # figures of a group are read inside these windows, never over the idle time around them.
    windows: list[tuple[float, float | None]] = field(default_factory=list)
    # What the ready server said about itself, where its service_ready event carries it.
    engine: str = ""
    engine_version: str = ""
    # Its servers that died while it needed them (server_died events, in order), and the
    # attempts of its cells set aside unfinished (a death, the link, a pause or abort, a crash
    # of the tool): their rows are kept, never counted.
    deaths: list[ServerDied] = field(default_factory=list)
    interrupted: int = 0
    # While its server waits for its GPUs to be freed: what holds them (None otherwise).
    gpu_wait: GpusWaiting | None = None

    def uptime_s(self, now: float) -> float | None:
        """Seconds the server has been healthy, or None when it is not up."""
        if self.server != "ready" or self.ready_at is None:
            return None
        return max(0.0, now - self.ready_at)


@dataclass(frozen=True)
class Counts:
    """Cells by status; ``total`` is every planned cell, held and resumed ones included."""

    done: int = 0
    failed: int = 0
    skipped: int = 0
    running: int = 0
    pending: int = 0
    held: int = 0  # of ``pending``: left out of this run

    @property
    def total(self) -> int:
        return self.done + self.failed + self.skipped + self.running + self.pending

    @property
    def settled(self) -> int:
        """Cells that need nothing more: what a progress bar fills with."""
        return self.done + self.failed + self.skipped


class CampaignState:
    """Reduce a campaign's durable events to the status of every cell, group and the run."""

    def __init__(self, rows_exist: RowsExist | None = None) -> None:
        self.rows_exist = rows_exist
        self.campaign: str = ""
        self.title: str = ""
        self.plan_hash: str = ""
        self.hosts: list[str] = []
        self.results_dir: str = ""
        self.simulated: bool = False
        self.groups: dict[str, GroupState] = {}
        self.cells: dict[str, CellState] = {}
        self.runs: int = 0  # campaign_started events seen
        self.first_started_at: float | None = None
        self.started_at: float | None = None  # this (the latest) run
        self.finished_at: float | None = None
        self.finished: bool = False  # the latest run ended with campaign_finished
        self.paused: bool = False
        self.paused_by: str = ""
        self.aborted: bool = False
        self.abort_reason: str = ""
        self.exit_code: int | None = None
        self.current_group: str | None = None
        self.current_cell: str | None = None
        # Every group whose server is up or coming up, in start order: several at once when
        # groups are packed on a host, run on several hosts or as parallel batch jobs, so a
        # view cannot take ``current_group`` (the latest) as the only one.
        self.running_groups: dict[str, None] = {}
        self.last_ts: float | None = None
        self.events_seen: int = 0
        # The latest verdict of each check per (check, host, config, tp).
        self.checks: dict[tuple[str, str, str, int], CheckVerdict] = {}
        # How each host's GPUs are read, and the server starts whose GPUs were not verified.
        self.telemetry: dict[str, TelemetryChosen] = {}
        self.gpus_unverified: list[GpusUnverified] = []
        self.wall_s: float = 0.0  # summed over the runs that ended with campaign_finished
        # The link to each remote host as last reported: the console shows a host that is
        # "reconnecting" or "unreachable" (a host never reported is connected).
        self.host_states: dict[str, HostState] = {}
        # The latest state of each group's batch job on a batch host, by group id.
        self.jobs: dict[str, BatchJobChanged] = {}
        # Every batch job a group ran as, with the last node it was seen on (the report's
        # environment names them: a group requeued or submitted again ran in several).
        self.job_nodes: dict[str, dict[str, str]] = {}
        # The dry-run estimate the latest run started with (None: a log from before it was
        # recorded).
        self.estimate: EstimateRecorded | None = None
        self._by_name: dict[str, str] = {}

    # --- folding --------------------------------------------------------------------------

    def apply(self, ev: Event) -> None:
        """Fold one event in. Unknown events are ignored, never an error."""
        self.events_seen += 1
        self.last_ts = ev.ts if self.last_ts is None else max(self.last_ts, ev.ts)
        handler = self._handlers().get(type(ev))
        if handler is not None:
            handler(self, ev)

    def apply_all(self, events: Iterable[Event]) -> None:
        for ev in events:
            self.apply(ev)

    @classmethod
    def from_events(
        cls, events: Iterable[Event], rows_exist: RowsExist | None = None
    ) -> CampaignState:
        state = cls(rows_exist)
        state.apply_all(events)
        return state

    @classmethod
    def _handlers(cls) -> dict[type, Callable[[Any, Any], None]]:
        return DURABLE_HANDLERS

    def _estimate_recorded(self, ev: EstimateRecorded) -> None:
        self.estimate = ev

    def _campaign_started(self, ev: CampaignStarted) -> None:
        self.runs += 1
        self.campaign, self.title, self.plan_hash = ev.campaign, ev.title, ev.plan_hash
        self.results_dir, self.simulated = ev.results_dir, ev.simulated
        if self.first_started_at is None:
            self.first_started_at = ev.ts
        self.started_at = ev.ts
        self.finished = self.aborted = self.paused = False
        self.finished_at = self.exit_code = None
        self.abort_reason = self.paused_by = ""
        self.current_group = self.current_cell = None
        self.running_groups = {}
        self.host_states = {}
        old_cells, old_groups = self.cells, self.groups
        self.groups = {}
        self.cells = {}
        self._by_name = {}
        for g in ev.groups:
            self.groups[g.id] = GroupState(
                id=g.id,
                host=g.host,
                config=g.config,
                label=g.label,
                tp=g.tp,
                gpu_ids=list(g.gpu_ids),
                port=g.port,
                command=list(g.command),
                speculative=g.speculative,
                group=g,
            )
            before_g = old_groups.get(g.id)
            if before_g is not None:  # what earlier runs saw of this group's servers
                self.groups[g.id].windows = list(before_g.windows)
                self.groups[g.id].engine = before_g.engine
                self.groups[g.id].engine_version = before_g.engine_version
                self.groups[g.id].deaths = list(before_g.deaths)
                self.groups[g.id].interrupted = before_g.interrupted
        selected = set(ev.selected)
        for c in ev.cells:
            before = old_cells.get(c.id)
            cell = CellState(
                id=c.id,
                name=c.name,
                group=c.group,
                host=c.host,
                config=c.config,
                tp=c.tp,
                workload=c.workload,
                kind=c.kind,
                cell=c,
                selected=c.id in selected,
            )
            if before is not None:
                cell.attempt = before.attempt
                cell.reason, cell.figures = before.reason, before.figures
                if before.status == "running":  # the earlier run died mid-cell
                    cell.reason = "interrupted"
                    self._group(c.group).interrupted += 1
                elif before.status != "pending":
                    cell.status, cell.resumed = before.status, True
                    cell.ended_at, cell.log_tail = before.ended_at, before.log_tail
            self.cells[c.id] = cell
            self._by_name[c.name] = c.id
            group = self.groups.get(c.group)
            if group is None:  # a cell whose group was not announced: keep it visible anyway
                group = self.groups[c.group] = GroupState(
                    id=c.group, host=c.host, config=c.config, tp=c.tp
                )
            group.cells.append(c.id)
        self.hosts = list(ev.hosts) or sorted({g.host for g in self.groups.values() if g.host})
        self._mark_checks()

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
        if ev.port:
            g.port = ev.port
        g.server, g.status, g.attempt = "starting", "running", ev.attempt
        g.started_at, g.ready_at, g.ended_at, g.reason = ev.ts, None, None, ""
        g.log_tail.clear()
        self.current_group = ev.group
        self.running_groups.pop(ev.group, None)  # a restart moves it to the end
        self.running_groups[ev.group] = None

    def _service_ready(self, ev: ServiceReady) -> None:
        g = self._group(ev.group)
        g.server, g.ready_at, g.gpu_wait = "ready", ev.ts, None
        g.startup_s = ev.startup_s or (ev.ts - g.started_at if g.started_at else None)
        g.windows.append((ev.ts, None))
        # Fields a newer event may carry (the engine's own report of itself).
        g.engine = str(getattr(ev, "engine", "") or g.engine)
        g.engine_version = str(getattr(ev, "engine_version", "") or g.engine_version)

    def _close_window(self, g: GroupState, ts: float) -> None:
        if g.windows and g.windows[-1][1] is None:
            g.windows[-1] = (g.windows[-1][0], ts)

    def _service_failed(self, ev: ServiceFailed) -> None:
        g = self._group(ev.group)
        g.server, g.reason, g.ready_at, g.gpu_wait = "failed", ev.reason, None, None
        self._close_window(g, ev.ts)
        g.log_tail.extend(ev.log_tail)

    def _server_died(self, ev: ServerDied) -> None:
        self._group(ev.group).deaths.append(ev)

    def _group_finished(self, ev: GroupFinished) -> None:
        g = self._group(ev.group)
        g.status, g.gpu_wait, g.ended_at = ev.status, None, ev.ts
        if g.server != "failed":
            g.server = "stopped"
        g.ready_at = None
        self._close_window(g, ev.ts)
        self.running_groups.pop(ev.group, None)
        if self.current_group == ev.group:  # another one still running stays current
            self.current_group = next(reversed(self.running_groups), None)

    def _cell_started(self, ev: CellStarted) -> None:
        c = self._cell(ev.cell_id, ev.cell, ev.group)
        c.status, c.attempt, c.selected = "running", max(c.attempt, ev.attempt), True
        c.started_at, c.ended_at, c.duration_s = ev.ts, None, None
        c.requests_done, c.requests_total, c.request_errors = 0, ev.requests, 0
        c.reason, c.log_tail, c.figures, c.resumed = "", [], {}, False
        self.current_cell = c.id
        if c.group:
            self.current_group = c.group

    def _ended(self, c: CellState, ts: float) -> None:
        c.ended_at = ts
        if c.started_at is not None:
            c.duration_s = ts - c.started_at
        if self.current_cell == c.id:
            self.current_cell = self._latest_running_cell()

    def _latest_running_cell(self) -> str | None:
        """The running cell started last: with packed groups, what follows a cell that ends
        while others still run."""
        running = [c for c in self.cells.values() if c.status == "running"]
        if not running:
            return None
        return max(running, key=lambda c: c.started_at or 0.0).id

    def _cell_finished(self, ev: CellFinished) -> None:
        c = self._cell(ev.cell_id, ev.cell, ev.group)
        c.attempt = max(c.attempt, ev.attempt)
        if self.rows_exist is not None and not self.rows_exist(ev.cell_id, ev.attempt):
            c.status, c.reason = "pending", "its request rows are missing"
            self._ended(c, ev.ts)
            return
        c.status = "done"
        c.requests_done = max(c.requests_done, ev.requests)
        c.request_errors = ev.errors
        c.figures = {
            "requests": ev.requests,
            "errors": ev.errors,
            "wall_s": ev.wall_s,
            **ev.figures,
        }
        self._ended(c, ev.ts)
        if c.duration_s is None:
            c.duration_s = ev.wall_s or None

    def _cell_energy(self, ev: CellEnergy) -> None:
        """The energy of a finished attempt joins its figures; one for an attempt that is
        no longer the cell's (set aside, run again) is left out."""
        c = self.cells.get(ev.cell_id)
        if c is not None and c.status == "done" and c.attempt == ev.attempt:
            c.figures = {**c.figures, **ev.figures}

    def _cell_failed(self, ev: CellFailed) -> None:
        c = self._cell(ev.cell_id, ev.cell, ev.group)
        c.status, c.attempt, c.reason = "failed", max(c.attempt, ev.attempt), ev.reason
        c.log_tail = list(ev.log_tail)
        self._ended(c, ev.ts)

    def _cell_skipped(self, ev: CellSkipped) -> None:
        c = self._cell(ev.cell_id, ev.cell, ev.group)
        c.status, c.reason = "skipped", ev.reason or (f"skipped by {ev.by}" if ev.by else "")
        c.attempt = max(c.attempt, ev.attempt if c.started_at is not None else 0)
        self._ended(c, ev.ts)

    def _cell_queued(self, ev: CellQueued) -> None:
        c = self._cell(ev.cell_id, ev.cell, ev.group)
        if c.status == "running":  # set aside unfinished, not a rerun asked for afterwards
            self._group(c.group).interrupted += 1
        c.status, c.resumed, c.selected = "pending", False, True
        c.attempt = max(ev.attempt - 1, 0)
        c.ended_at = None
        c.reason = ev.by if ev.by in INTERRUPTIONS else ""
        if self.current_cell == c.id:
            self.current_cell = self._latest_running_cell()
        if self.finished:  # a rerun after the end brings the campaign back to life
            self.finished = False

    def _check_verdict(self, ev: CheckVerdict) -> None:
        self.checks[(ev.check, ev.host, ev.config, ev.tp)] = ev
        self._mark_checks()

    def _mark_checks(self) -> None:
        failing: dict[tuple[str, str, int], str] = {}
        for (_, host, config, tp), v in self.checks.items():
            if v.status == "fail":
                failing.setdefault((host, config, tp), v.text or f"failed the {v.check} check")
        for c in self.cells.values():
            c.check_failed = failing.get((c.host, c.config, c.tp), "")

    def failed_checks(self) -> list[CheckVerdict]:
        return [v for v in self.checks.values() if v.status == "fail"]

    def unchecked(self) -> list[CheckVerdict]:
        """Configs with outputs that no verdict covers (never ranked best)."""
        return [v for v in self.checks.values() if v.status == "unchecked"]

    def add_judged(self, verdicts: Iterable[CheckVerdict]) -> None:
        """Fold in verdicts a reader judged from the stored outputs (not events of the log,
        so the log's clock and counts are left as they are)."""
        for v in verdicts:
            self.checks[(v.check, v.host, v.config, v.tp)] = v
        self._mark_checks()

    def _telemetry_chosen(self, ev: TelemetryChosen) -> None:
        self.telemetry[ev.host] = ev

    def _gpus_unverified(self, ev: GpusUnverified) -> None:
        self.gpus_unverified.append(ev)

    def _gpus_waiting(self, ev: GpusWaiting) -> None:
        if ev.group in self.groups:
            self.groups[ev.group].gpu_wait = ev if ev.held else None

    def _host_state(self, ev: HostState) -> None:
        self.host_states[ev.host] = ev

    def running_on(self, host: str) -> list[GroupState]:
        """The groups running on ``host``, in start order."""
        groups = (self.groups.get(gid) for gid in self.running_groups)
        return [g for g in groups if g is not None and g.host == host]

    def host_away(self, host: str) -> str:
        """Why ``host`` is away ("" when its link is up): for the console's host line."""
        ev = self.host_states.get(host)
        return "" if ev is None or ev.state == "connected" else f"{ev.state}: {ev.reason}"

    def _batch_job(self, ev: BatchJobChanged) -> None:
        self.jobs[ev.group] = ev
        if ev.job_id:
            nodes = self.job_nodes.setdefault(ev.group, {})
            nodes[ev.job_id] = ev.node or nodes.get(ev.job_id, "")

    def _paused(self, ev: Paused) -> None:
        self.paused, self.paused_by = True, ev.by

    def _resumed(self, ev: Resumed) -> None:
        self.paused, self.paused_by = False, ""

    def _aborted(self, ev: Aborted) -> None:
        self.aborted, self.abort_reason = True, ev.reason or (f"by {ev.by}" if ev.by else "")

    def _campaign_finished(self, ev: CampaignFinished) -> None:
        self.finished, self.finished_at, self.exit_code = True, ev.ts, ev.exit_code
        self.wall_s += ev.wall_s or 0.0
        self.paused = False
        self.current_cell = self.current_group = None
        self.running_groups = {}
        for c in self.cells.values():
            if c.status == "running":  # cut short without a word: it runs again on resume
                c.status, c.reason = "pending", "interrupted"
                self._group(c.group).interrupted += 1
        for g in self.groups.values():
            if g.server in ("starting", "ready"):
                g.server = "stopped"
            self._close_window(g, ev.ts)

    # --- questions ------------------------------------------------------------------------

    @property
    def counts(self) -> Counts:
        return self.counts_of(self.cells)

    def group_counts(self, gid: str) -> Counts:
        return self.counts_of(self.groups[gid].cells if gid in self.groups else [])

    def counts_of(self, cell_ids: Iterable[str]) -> Counts:
        tally = dict.fromkeys(CELL_STATUSES, 0)
        held = 0
        for cid in cell_ids:
            c = self.cells.get(cid)
            if c is not None:
                tally[c.status] += 1
                held += c.held
        return Counts(**tally, held=held)

    def failed_cells(self) -> list[CellState]:
        return [c for c in self.cells.values() if c.status == "failed"]

    def run_status(self, live: bool | None = None) -> str:
        """Where the latest run stands: not started, running, paused, aborting, finished,
        aborted, partial (finished with cells held or never run) or interrupted (no end in
        the log and, when ``live`` is given, no process behind it)."""
        if self.runs == 0:
            return "not started"
        if self.finished:
            if self.aborted:
                return "aborted"
            return "partial" if self.counts.pending else "finished"
        if live is False:
            return "interrupted"
        if self.aborted:
            return "aborting"
        return "paused" if self.paused else "running"

    @property
    def state_word(self) -> str:
        """One word for the campaign's state, as a live console says it."""
        if self.finished:
            return "aborted" if self.aborted else "finished"
        if self.aborted:
            return "aborting"
        if self.paused:
            return "paused"
        if self.started_at is None:
            return "waiting"
        return "running"


DURABLE_HANDLERS: dict[type, Callable[[Any, Any], None]] = {
    CampaignStarted: CampaignState._campaign_started,
    GroupStarted: CampaignState._group_started,
    ServiceReady: CampaignState._service_ready,
    ServiceFailed: CampaignState._service_failed,
    ServerDied: CampaignState._server_died,
    GroupFinished: CampaignState._group_finished,
    CellStarted: CampaignState._cell_started,
    CellFinished: CampaignState._cell_finished,
    CellEnergy: CampaignState._cell_energy,
    CellFailed: CampaignState._cell_failed,
    CellSkipped: CampaignState._cell_skipped,
    CellQueued: CampaignState._cell_queued,
    CheckVerdict: CampaignState._check_verdict,
    TelemetryChosen: CampaignState._telemetry_chosen,
    GpusUnverified: CampaignState._gpus_unverified,
    GpusWaiting: CampaignState._gpus_waiting,
    HostState: CampaignState._host_state,
    BatchJobChanged: CampaignState._batch_job,
    Paused: CampaignState._paused,
    Resumed: CampaignState._resumed,
    Aborted: CampaignState._aborted,
    CampaignFinished: CampaignState._campaign_finished,
    EstimateRecorded: CampaignState._estimate_recorded,
}

"""Typed events the engine publishes; the console, the headless printer and the store read them.

Every event serialises to one flat JSON object ``{"ts": ISO-8601 UTC, "event": name, ...}``,
the line format of ``events.jsonl`` and of the control socket. Lifecycle events are durable
(written to ``events.jsonl``); live events (request done, log line, GPU sample) are only
streamed, since their data lands in the parquet files.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, ClassVar

from specbench_tui.results.cells import Cell, ServiceGroup
from specbench_tui.results.gpu_readings import GpuReadings, readings_from
from specbench_tui.results.jsontypes import check_fields

_REGISTRY: dict[str, type[Event]] = {}


def iso_utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


@dataclass(kw_only=True)
class Event:
    name: ClassVar[str] = "event"
    durable: ClassVar[bool] = True
    ts: float = field(default_factory=time.time)

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if "name" in cls.__dict__:
            _REGISTRY[cls.name] = cls

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ts": iso_utc(self.ts), "event": self.name}
        for f in fields(self):
            if f.name != "ts":
                out[f.name] = getattr(self, f.name)
        return out

    @staticmethod
    def from_json(obj: dict[str, Any]) -> Event:
        """Rebuild an event. An unknown name is kept as a generic event, and fields this
        version does not know are dropped, never an error: a log written by another version
        of the tool still replays. A known event whose fields do not have their types (or
        lack a required one, or its time) comes back as an ``InvalidEvent`` saying why, which
        no fold acts on: readers set it aside and say so instead of failing on it later."""
        obj = dict(obj)
        name = obj.pop("event", "event")
        ts = obj.pop("ts", None)
        cls = _REGISTRY.get(name) if isinstance(name, str) else None
        if cls is None:
            if not isinstance(name, str):
                return InvalidEvent(event=repr(name), data=obj, why="its event name is not text")
            ev: Event = UnknownEvent(event=name, data=obj)
        else:
            known = {f.name for f in fields(cls)}
            given = {k: v for k, v in obj.items() if k in known}
            try:
                check_fields(cls, given)
                ev = cls(**cls.decode(given))
            except TypeError as exc:  # a required field is missing
                missing = [f.name for f in fields(cls) if f.name not in given and f.name != "ts"]
                why = f"{missing[0]!r} is missing" if missing else str(exc)
                return InvalidEvent(event=name, data=obj, why=why)
            except (ValueError, KeyError, AttributeError) as exc:
                return InvalidEvent(event=name, data=obj, why=str(exc))
        if isinstance(ts, str):
            try:
                ev.ts = parse_iso(ts)
            except (ValueError, OverflowError):
                if cls is not None:
                    return InvalidEvent(event=name, data=obj, why=f"'ts' is {ts!r}, not a time")
        elif cls is not None:
            return InvalidEvent(event=name, data=obj, why="'ts' is missing or not a time")
        return ev

    @classmethod
    def decode(cls, fields_: dict[str, Any]) -> dict[str, Any]:
        """Turn JSON values into the field types (a subclass with typed fields overrides)."""
        return fields_


@dataclass(kw_only=True)
class UnknownEvent(Event):
    name: ClassVar[str] = "unknown"
    event: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"ts": iso_utc(self.ts), "event": self.event, **self.data}


@dataclass(kw_only=True)
class InvalidEvent(UnknownEvent):
    """A line that names a known event but does not fit it (``why`` says how): read, never
    folded, so one damaged line costs that line and not every open of the campaign."""

    why: str = ""


# --- campaign lifecycle -------------------------------------------------------------------


@dataclass(kw_only=True)
class CampaignStarted(Event):
    name: ClassVar[str] = "campaign_started"
    campaign: str
    title: str = ""
    plan_hash: str = ""
    results_dir: str = ""
    hosts: list[str] = field(default_factory=list)
    groups: list[ServiceGroup] = field(default_factory=list)
    cells: list[Cell] = field(default_factory=list)
    # Ids of the cells this run means to run (resume, --only, --rerun-failed); the others are
    # held: they keep whatever status the log gave them.
    selected: list[str] = field(default_factory=list)
    simulated: bool = False
    pid: int = 0

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["groups"] = [g.to_json() for g in self.groups]
        out["cells"] = [c.to_json() for c in self.cells]
        return out

    @classmethod
    def decode(cls, fields_: dict[str, Any]) -> dict[str, Any]:
        d = dict(fields_)
        d["groups"] = [ServiceGroup.from_json(g) for g in d.get("groups") or []]
        d["cells"] = [Cell.from_json(c) for c in d.get("cells") or []]
        return d


@dataclass(kw_only=True)
class EstimateRecorded(Event):
    """The dry-run estimate of the run that starts (plan/estimate.py), kept so that the
    report holds it against the time the cells took without reading the plan again:
    ``total_s`` the whole plan's wall time, ``startup_s`` every group's server start-up
    together, ``per_cell_s`` each cell's time, ``host_speeds`` how much faster than real
    time each host ran (a simulator; 1.0 on a real host). For the ETA (results/eta.py), where
    the log has them: ``group_startup_s`` each group's start until ready (or until it fails,
    where an earlier run saw it fail), ``group_tail_s`` its time besides start-up and cells
    (gaps between cells, probes, stop), ``group_at_s`` its start in the predicted schedule,
    ``end_s`` the time after the last group, ``spread`` the scatter (sd of log
    measured/modelled) of the measured constants (0: assumed, not measured) and
    ``measured_from`` the results directory they came from."""

    name: ClassVar[str] = "estimate_recorded"
    total_s: float = 0.0
    startup_s: float = 0.0
    per_cell_s: dict[str, float] = field(default_factory=dict)
    host_speeds: dict[str, float] = field(default_factory=dict)
    group_startup_s: dict[str, float] = field(default_factory=dict)
    group_tail_s: dict[str, float] = field(default_factory=dict)
    group_at_s: dict[str, float] = field(default_factory=dict)
    end_s: float = 0.0
    spread: float = 0.0
    measured_from: str = ""


@dataclass(kw_only=True)
class CampaignFinished(Event):
    name: ClassVar[str] = "campaign_finished"
    campaign: str
    finished: int = 0
    failed: int = 0
    skipped: int = 0
    wall_s: float = 0.0
    exit_code: int = 0


@dataclass(kw_only=True)
class Paused(Event):
    name: ClassVar[str] = "paused"
    by: str = ""


@dataclass(kw_only=True)
class Resumed(Event):
    name: ClassVar[str] = "resumed"
    by: str = ""


@dataclass(kw_only=True)
class Aborted(Event):
    name: ClassVar[str] = "aborted"
    by: str = ""
    reason: str = ""


@dataclass(kw_only=True)
class Notice(Event):
    """A message for the operator: a command's answer, a warning, an engine decision."""

    name: ClassVar[str] = "notice"
    level: str = "info"  # info | warning | error
    text: str = ""


# --- service groups -----------------------------------------------------------------------


@dataclass(kw_only=True)
class GroupStarted(Event):
    name: ClassVar[str] = "group_started"
    group: str
    host: str = ""
    config: str = ""
    tp: int = 0
    gpu_ids: list[int] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    attempt: int = 1
    port: int = 0  # where it listens on its host (packed groups get theirs at run time)
    url: str | None = None  # a running server's address: measured, not started


@dataclass(kw_only=True)
class ServiceReady(Event):
    name: ClassVar[str] = "service_ready"
    group: str
    startup_s: float = 0.0
    attempt: int = 1
    # What the ready server reported about itself (engines/inspect.py), for the report.
    engine: str = ""
    engine_version: str | None = None
    served_model: str | None = None
    speculative: bool | None = None  # None: the server did not say
    algorithm: str | None = None
    chat_template: str | None = None  # where the prompts' template came from, and its hash


@dataclass(kw_only=True)
class ServiceFailed(Event):
    name: ClassVar[str] = "service_failed"
    group: str
    reason: str = ""
    log_tail: list[str] = field(default_factory=list)
    attempt: int = 1


@dataclass(kw_only=True)
class ServerDied(Event):
    """A group's server died while the group needed it: its process exited (with any code),
    the engine answered that it is dead, or a request was lost and its health check failed.
    ``cell`` names the cell whose attempt it cut ("" between cells); ``restart`` is the
    restart that follows (1, 2, ...), 0 when the group's restarts are spent."""

    name: ClassVar[str] = "server_died"
    group: str
    host: str = ""
    attempt: int = 1  # the server start that died
    reason: str = ""
    cell_id: str = ""
    cell: str = ""
    exit_code: int | None = None
    restart: int = 0
    log_tail: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class GroupFinished(Event):
    name: ClassVar[str] = "group_finished"
    group: str
    status: str = "done"  # done | failed | skipped


@dataclass(kw_only=True)
class TelemetryChosen(Event):
    """How a host's GPUs are read, decided once per campaign run: ``source`` is ``nvml``,
    ``nvidia-smi``, ``sim`` (the simulator's fake NVML) or ``none`` (no GPU telemetry: GPU
    waits on this host cannot verify that the GPUs are free). ``python`` runs the agent;
    ``detail`` is what the probe found on the way (why NVML was not used, say)."""

    name: ClassVar[str] = "telemetry_chosen"
    host: str
    source: str = "none"
    python: str = ""
    detail: str = ""
    text: str = ""  # the one line to show: "nvidia-smi (through python3, 8 GPUs, driver ...)"
    driver: str = ""  # the GPU driver's version, where the source reports one (the report's)
    gpus: int | None = None  # GPUs the source sees on the host


@dataclass(kw_only=True)
class HostState(Event):
    """The link to a remote host changed: ``reconnecting`` (it dropped; its work waits, the
    transport retries with a backoff), ``connected`` (back; the cell set aside runs again),
    ``unreachable`` (away longer than the host's ``reconnect_timeout``: its remaining cells
    fail). ``reason`` is the one line to show (what dropped it, how long it was away)."""

    name: ClassVar[str] = "host_state"
    host: str
    state: str = "connected"  # reconnecting | connected | unreachable
    reason: str = ""


@dataclass(kw_only=True)
class GpusWaiting(Event):
    """A group waits for its GPUs to be freed before its server starts: what holds each GPU
    (memory used, the holder's pid and name where telemetry knows them). Said a few seconds
    into the wait and again every minute, so a wait on a foreign process is never silent;
    ``held`` empty: the wait is over (``waited_s`` it took)."""

    name: ClassVar[str] = "gpus_waiting"
    host: str
    group: str = ""
    gpu_ids: list[int] = field(default_factory=list)
    held: list[str] = field(default_factory=list)  # "GPU 0: 20480/97887 MiB used, held by ..."
    waited_s: float = 0.0


@dataclass(kw_only=True)
class GpusUnverified(Event):
    """A server is started without knowing that its GPUs are free: the host has no GPU
    telemetry (or it is down), so only the previous server's processes and port were seen to
    be gone. The report lists these; the measurements themselves are kept."""

    name: ClassVar[str] = "gpus_unverified"
    host: str
    group: str = ""
    gpu_ids: list[int] = field(default_factory=list)
    reason: str = ""


@dataclass(kw_only=True)
class BatchJobChanged(Event):
    """A service group's batch job changed state, as the batch system ``system`` said:
    submitted, pending with its reason, running on a node, requeued, or ended, in the
    system's own words for each state. ``submission`` numbers the group's jobs (each has its
    directory ``dir`` on the shared filesystem)."""

    name: ClassVar[str] = "batch_job"
    group: str
    system: str = ""  # the batch system's name, as people write it
    host: str = ""
    job_id: str = ""
    submission: int = 1
    state: str = ""
    node: str = ""
    reason: str = ""
    dir: str = ""


# --- cells --------------------------------------------------------------------------------


@dataclass(kw_only=True)
class CellStarted(Event):
    name: ClassVar[str] = "cell_started"
    cell_id: str
    group: str = ""
    cell: str = ""  # the cell's human-readable name
    attempt: int = 1
    requests: int = 0  # planned measured requests


@dataclass(kw_only=True)
class CellFinished(Event):
    name: ClassVar[str] = "cell_finished"
    cell_id: str
    group: str = ""
    cell: str = ""
    attempt: int = 1
    requests: int = 0
    errors: int = 0
    wall_s: float = 0.0
    # The cell's summary, under the metric columns of cells.parquet (throughput_tok_s,
    # ttft_s_p50, accept_length_mean, ...): the view is rebuilt from these, never re-measured.
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class CellEnergy(Event):
    """A finished cell's GPU board energy (``bench/energy.py``), recorded once the telemetry
    sample after its measured window has come in, so a little after its ``cell_finished``.
    ``figures`` are more columns of the cell's row in cells.parquet (``gpu_energy_j``,
    ``j_per_output_token``, ``energy_valid`` ...), for the attempt it names only."""

    name: ClassVar[str] = "cell_energy"
    cell_id: str
    group: str = ""
    cell: str = ""
    attempt: int = 1
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class CellFailed(Event):
    name: ClassVar[str] = "cell_failed"
    cell_id: str
    group: str = ""
    cell: str = ""
    attempt: int = 1
    reason: str = ""
    log_tail: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class CellSkipped(Event):
    name: ClassVar[str] = "cell_skipped"
    cell_id: str
    group: str = ""
    cell: str = ""
    attempt: int = 1
    reason: str = ""
    by: str = ""


@dataclass(kw_only=True)
class CellQueued(Event):
    """A cell queued again (rerun); its next attempt number is ``attempt``."""

    name: ClassVar[str] = "cell_queued"
    cell_id: str
    group: str = ""
    cell: str = ""
    attempt: int = 1
    by: str = ""


# --- checks -------------------------------------------------------------------------------


@dataclass(kw_only=True)
class CheckVerdict(Event):
    """What a correctness check concluded about one config (on one host, at one TP size).

    ``status``: ``pass``; ``fail`` (the config is broken: it diverged beyond the baseline's
    own noise, or leaked state); ``noise`` (it diverged, but late and within the noise floor
    the baseline shows against itself: numerics, not a bug); ``unchecked`` (a reader's
    judgement, never logged: the config has outputs no verdict covers, so it is never ranked
    best). A ``fail`` marks every cell of the config as failed-check in every view and makes
    the exit status 1.
    """

    name: ClassVar[str] = "check_verdict"
    check: str  # greedy | state_leak | noise_floor (the baseline against itself; never fails)
    config: str
    host: str = ""
    tp: int = 0
    status: str = "pass"  # pass | fail | noise | unchecked
    text: str = ""  # one line for the operator
    # The evidence: first divergence (cell_id, prompt, token index, the two continuations),
    # counts compared/diverged, the noise floor it was judged against.
    detail: dict[str, Any] = field(default_factory=dict)


# --- live, not durable ---------------------------------------------------------------------


@dataclass(kw_only=True)
class RequestDone(Event):
    name: ClassVar[str] = "request_done"
    durable: ClassVar[bool] = False
    cell_id: str
    group: str = ""
    ttft_s: float | None = None
    e2e_s: float | None = None
    output_tokens: int | None = None
    output_tok_s: float | None = None
    accept_length: float | None = None
    error: str | None = None
    done: int = 0  # requests of this cell done so far
    total: int = 0


@dataclass(kw_only=True)
class LogLine(Event):
    name: ClassVar[str] = "log_line"
    durable: ClassVar[bool] = False
    group: str
    line: str
    stats: dict[str, float] | None = None  # an engine's parsed stats or [logs] pattern groups
    matches: list[str] = field(default_factory=list)  # names of the [logs] patterns that hit


@dataclass(kw_only=True)
class GpuSample(GpuReadings, Event):
    """One GPU's sample as the console sees it: its readings (``GpuReadings``, the one
    definition; None where the GPU reports none) and its processes as lines of text."""

    name: ClassVar[str] = "gpu_sample"
    durable: ClassVar[bool] = False
    host: str
    gpu: int
    processes: list[str] = field(default_factory=list)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> GpuSample:
        """A ``telemetry.parquet`` row as the console's sample, at the time it was taken (a
        row without one: now)."""
        t = row.get("time")
        return cls(
            host=str(row.get("host") or ""),
            gpu=int(row.get("gpu") or 0),
            ts=float(t) if t else time.time(),
            **readings_from(row),
        )

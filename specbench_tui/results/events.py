"""Typed events the engine publishes; the console, the headless printer and the store read them.

Every event serialises to one flat JSON object ``{"ts": ISO-8601 UTC, "event": name, ...}``,
the line format of ``events.jsonl`` and of the control socket. Lifecycle events are durable
(written to ``events.jsonl``); live events (request done, log line, GPU sample) are only
streamed, since their data lands in the parquet files.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, ClassVar

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
        """Rebuild an event; an unknown name or field is kept as a generic event, not an error,
        so a newer engine's log still replays in an older console."""
        obj = dict(obj)
        name = obj.pop("event", "event")
        ts = obj.pop("ts", None)
        cls = _REGISTRY.get(name)
        known = {f.name for f in fields(cls)} if cls else set()
        if cls is None or not set(obj) <= known:
            ev: Event = UnknownEvent(event=name, data=obj)
        else:
            ev = cls(**obj)
        if isinstance(ts, str):
            ev.ts = parse_iso(ts)
        return ev


@dataclass(kw_only=True)
class UnknownEvent(Event):
    name: ClassVar[str] = "unknown"
    event: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"ts": iso_utc(self.ts), "event": self.event, **self.data}


# --- campaign lifecycle -------------------------------------------------------------------


@dataclass(kw_only=True)
class CampaignStarted(Event):
    name: ClassVar[str] = "campaign_started"
    campaign: str
    title: str = ""
    plan_hash: str = ""
    results_dir: str = ""
    hosts: list[str] = field(default_factory=list)
    groups: list[dict[str, Any]] = field(default_factory=list)  # ServiceGroup.to_json()
    cells: list[dict[str, Any]] = field(default_factory=list)  # Cell.to_json()
    done: list[str] = field(default_factory=list)  # cell ids already finished (resume)
    simulated: bool = False
    pid: int = 0


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


@dataclass(kw_only=True)
class ServiceReady(Event):
    name: ClassVar[str] = "service_ready"
    group: str
    startup_s: float = 0.0
    attempt: int = 1


@dataclass(kw_only=True)
class ServiceFailed(Event):
    name: ClassVar[str] = "service_failed"
    group: str
    reason: str = ""
    log_tail: list[str] = field(default_factory=list)
    attempt: int = 1


@dataclass(kw_only=True)
class GroupFinished(Event):
    name: ClassVar[str] = "group_finished"
    group: str
    status: str = "done"  # done | failed | skipped


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
    throughput_tok_s: float = 0.0
    ttft_p50_s: float | None = None
    output_tok_s_p50: float | None = None
    accept_length_mean: float | None = None
    # How the client itself fared; a lagged client inflated the cell's timings.
    client_lagged: bool = False
    client_lag_p99_s: float | None = None
    client_cpu_share: float | None = None


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
    stats: dict[str, float] | None = None  # parsed SGLang stats or [logs] pattern groups
    matches: list[str] = field(default_factory=list)  # names of the [logs] patterns that hit


@dataclass(kw_only=True)
class GpuSample(Event):
    name: ClassVar[str] = "gpu_sample"
    durable: ClassVar[bool] = False
    host: str
    gpu: int
    util_pct: float = 0.0
    mem_used_mib: float = 0.0
    mem_total_mib: float = 0.0
    power_w: float = 0.0
    temp_c: float = 0.0
    processes: list[str] = field(default_factory=list)


def event_names() -> list[str]:
    return sorted(_REGISTRY)

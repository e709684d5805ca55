"""A campaign as a live observer sees it: the durable state plus what only streams.

``CampaignProgress`` is ``CampaignState`` (the one reducer of the event log) with the live
events folded in too: requests done, server log lines, GPU samples, notices. The console, the
headless printer and a detached console each hold one and agree on what "done", "running" or
"ETA" means, because they compute it from the same stream (replay, then live). It has no
clock of its own: time-dependent answers (elapsed, ETA, uptime) take ``now`` so that tests and
snapshots are deterministic.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from specbench_tui.results.events import GpuSample, LogLine, Notice, RequestDone
from specbench_tui.results.gpu_readings import READING_NAMES
from specbench_tui.results.state import (
    DURABLE_HANDLERS,
    CampaignState,
    CellState,
    Counts,
    GroupState,
)

__all__ = ["CampaignProgress", "CellState", "Counts", "GpuState", "GroupState", "format_clock"]


@dataclass
class GpuState:
    """The latest telemetry sample of one GPU, as the console draws it: the readings of
    ``GpuReadings`` that it shows, named as there, 0 where the GPU reported none."""

    host: str
    gpu: int
    util_pct: float = 0.0
    mem_used_mib: float = 0.0
    mem_total_mib: float = 0.0
    power_w: float = 0.0
    temp_c: float = 0.0
    processes: list[str] = field(default_factory=list)
    ts: float = 0.0


#: The readings the console keeps of a sample (a reading the GPU did not report shows as 0);
#: a new reading is shown once it is a field of ``GpuState`` too.
_SHOWN: tuple[str, ...] = tuple(f.name for f in fields(GpuState) if f.name in READING_NAMES)


class CampaignProgress(CampaignState):
    """The durable reducer plus live state, and the questions a console asks of both."""

    def __init__(self) -> None:
        super().__init__()
        self.gpus: dict[tuple[str, int], GpuState] = {}
        self.notices: deque[Notice] = deque(maxlen=50)

    @classmethod
    def _handlers(cls) -> dict[type, Callable[[Any, Any], None]]:
        return _ALL_HANDLERS

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
        for name in _SHOWN:
            setattr(gpu, name, getattr(ev, name) or 0.0)
        gpu.processes, gpu.ts = list(ev.processes), ev.ts

    def _notice(self, ev: Notice) -> None:
        self.notices.append(ev)

    # --- time-dependent questions -----------------------------------------------------------

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
            if c.status == "done" and not c.resumed and c.duration_s and c.duration_s > 0:
                sums.setdefault(c.kind, []).append(c.duration_s)
        return {k: sum(v) / len(v) for k, v in sums.items()}

    def mean_startup_s(self) -> float | None:
        ups = [g.startup_s for g in self.groups.values() if g.startup_s]
        return sum(ups) / len(ups) if ups else None

    def eta_s(self, now: float) -> float | None:
        """Seconds left: for each cell still to run in this run, the mean measured duration
        of its kind (or of all kinds, before its kind has a measurement), less the time the
        running cell has already had, plus a measured server start-up for each group not yet
        started. None until at least one cell has been measured: a guess from nothing helps
        nobody."""
        if self.finished:
            return 0.0
        means = self.mean_durations()
        if not means:
            return None
        overall = sum(means.values()) / len(means)
        left = 0.0
        for c in self.cells.values():
            if c.status == "pending" and c.selected:
                left += means.get(c.kind, overall)
            elif c.status == "running":
                expected = means.get(c.kind, overall)
                ran = now - c.started_at if c.started_at is not None else 0.0
                left += max(expected - ran, 0.0)
        startup = self.mean_startup_s()
        if startup:
            for g in self.groups.values():
                if g.server == "pending" and any(
                    self.cells[cid].status == "pending" and self.cells[cid].selected
                    for cid in g.cells
                    if cid in self.cells
                ):
                    left += startup
        return left


_ALL_HANDLERS: dict[type, Callable[[Any, Any], None]] = {
    **DURABLE_HANDLERS,
    RequestDone: CampaignProgress._request_done,
    LogLine: CampaignProgress._log_line,
    GpuSample: CampaignProgress._gpu_sample,
    Notice: CampaignProgress._notice,
}


def format_clock(seconds: float | None) -> str:
    """``1:02:03`` / ``2:03``: compact and fixed-format so header columns do not jump."""
    if seconds is None:
        return "--:--"
    s = round(max(seconds, 0.0))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"

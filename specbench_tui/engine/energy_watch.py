"""Follows the GPU samples of a run and records each finished cell's GPU board energy, with
the GPU conditions over its window (clocks, temperature, power limit, throttle reasons, other
processes: ``bench/conditions.py``).

The figures are ``bench/energy.py``'s, computed here because only here are they all at
hand: the live samples with the processes on each GPU (``telemetry.parquet`` keeps no
processes, and its parts are written a minute late), the cell's measured window from its
requests, and the group's idle floor. A cell ends before the sample that closes its window
has come in, so its energy is recorded by a ``cell_energy`` event of its own once a sample
of every one of the group's GPUs is past the window's end, or after ``WAIT_S`` with what
there is (then the window is "not covered" and no figure is given). cells.parquet, the
headless line and the report all read that event: there is one computation.

Per server start it keeps, until the first cell starts, the samples since the server's
ready line (the idle floor) and every process seen on the group's GPUs since the start (the
server's own: its GPUs were seen free before it started); a process outside that set during
a window makes the cell's energy invalid.

Clocks: a sample's time is the GPU host's clock, the window's the client's. Each host's
offset is taken as the smallest (arrival here - sample time) so far, which is the clocks'
difference plus the quickest delivery; windows are moved onto the host's clock by it.

Telemetry is a side show: nothing here raises into the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from specbench_tui.bench.conditions import GpuCondition, gpu_conditions
from specbench_tui.bench.energy import PowerSample, cell_energy, idle_power
from specbench_tui.hosts.telemetry import GpuSample
from specbench_tui.results.events import (
    CellEnergy,
    CellFailed,
    CellQueued,
    CellSkipped,
    CellStarted,
    Event,
    GroupFinished,
    GroupStarted,
    ServiceReady,
    TelemetryChosen,
)
from specbench_tui.results.records import RequestRecord

log = logging.getLogger(__name__)

#: How long after a cell's end its energy waits for the samples that close its window.
WAIT_S = 10.0
#: How long a ready server is left alone, on a host whose GPUs are read, for its idle floor.
IDLE_FLOOR_S = 10.0
#: Samples kept per server start for its idle floor (a long start-up at 8 GPUs fits).
IDLE_KEEP = 20_000


@dataclass
class _Server:
    host: str
    gpus: list[int]
    started_at: float
    ready_at: float | None = None
    began: bool = False  # its first cell has started: idle floor and own processes are set
    learned: set[int] = field(default_factory=set)  # GPUs whose own processes are known
    pids: set[int] = field(default_factory=set)
    idle: deque[PowerSample] = field(default_factory=lambda: deque(maxlen=IDLE_KEEP))
    idle_power_w: float | None = None


@dataclass
class _Watch:
    cell_id: str
    cell: str
    group: str
    attempt: int
    host: str
    gpus: list[int]
    samples: list[PowerSample] = field(default_factory=list)
    # Set when the cell finished: the window (client clock), tokens, and until when to wait.
    spans: list[tuple[float, float]] | None = None
    tokens: int = 0
    deadline: float = 0.0


def cell_spans(records: Iterable[RequestRecord], concurrent: bool) -> list[tuple[float, float]]:
    """The measured window as epoch spans, as ``figures.measured_window`` takes it: the one
    request span of a concurrency cell, each request's own span otherwise."""
    spans = [
        (r.started_at, r.started_at + r.e2e_s)
        for r in records
        if r.started_at and r.e2e_s is not None and r.e2e_s > 0
    ]
    if concurrent and spans:
        return [(min(a for a, _ in spans), max(b for _, b in spans))]
    return spans


class EnergyWatch:
    """Taps the hub's events (``on_event``) and the host readers' samples (``sample``);
    ``cell_finished`` hands it a finished attempt's rows; ``emit`` publishes the result and
    ``changed`` is called after it."""

    def __init__(
        self,
        emit: Callable[[Event], None],
        changed: Callable[[], None] = lambda: None,
        *,
        wait_s: float = WAIT_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._emit = emit
        self._changed = changed
        self.wait_s = wait_s
        self._clock = clock
        self._offset: dict[str, float] = {}  # host: local clock - host clock
        self._servers: dict[str, _Server] = {}
        self._watches: dict[str, _Watch] = {}
        self._last: dict[tuple[str, int], PowerSample] = {}
        self._read: set[str] = set()  # hosts whose GPUs are read (their telemetry_chosen)

    # -- what comes in ------------------------------------------------------------------------

    def on_event(self, ev: Event) -> None:
        try:
            self._on_event(ev)
        except Exception:
            log.exception("energy watch: %s", ev.name)

    def _on_event(self, ev: Event) -> None:
        if isinstance(ev, TelemetryChosen):
            if ev.source != "none":
                self._read.add(ev.host)
        elif isinstance(ev, GroupStarted):
            self._servers[ev.group] = _Server(ev.host, list(ev.gpu_ids), ev.ts)
        elif isinstance(ev, ServiceReady):
            srv = self._servers.get(ev.group)
            if srv is not None:
                srv.ready_at = ev.ts
        elif isinstance(ev, GroupFinished):
            self._servers.pop(ev.group, None)
        elif isinstance(ev, CellStarted):
            srv = self._servers.get(ev.group)
            if srv is None:
                return
            if not srv.began:
                srv.began = True
                if srv.ready_at is not None:
                    off = self._offset.get(srv.host, 0.0)
                    srv.idle_power_w, _ = idle_power(
                        srv.idle, srv.ready_at - off, ev.ts - off, srv.gpus
                    )
                srv.idle.clear()
            w = _Watch(ev.cell_id, ev.cell, ev.group, ev.attempt, srv.host, list(srv.gpus))
            # The reading before the start: the window's first edge lies after it.
            w.samples = [s for g in w.gpus if (s := self._last.get((w.host, g))) is not None]
            self._watches[ev.cell_id] = w
        elif isinstance(ev, CellFailed | CellSkipped | CellQueued):
            w = self._watches.get(ev.cell_id)
            if w is not None and w.spans is None:
                del self._watches[ev.cell_id]

    def sample(self, s: GpuSample) -> None:
        """One sample as it arrives from a host's agent."""
        try:
            self._sample(s)
        except Exception:
            log.exception("energy watch: a sample")

    def _sample(self, s: GpuSample) -> None:
        now = self._clock()
        off = now - float(s.t)
        self._offset[s.host] = min(self._offset.get(s.host, math.inf), off)
        ps = PowerSample(
            t=float(s.t),
            gpu=int(s.gpu),
            power_w=s.power_w,
            energy_mj=s.energy_mj,
            pids=frozenset(p.pid for p in s.processes),
            cond=GpuCondition.of(s),
        )
        self._last[(s.host, ps.gpu)] = ps
        for srv in self._servers.values():
            if srv.host != s.host or ps.gpu not in srv.gpus:
                continue
            if not srv.began:
                srv.pids.update(ps.pids)
                srv.idle.append(ps)
                if ps.pids:
                    srv.learned.add(ps.gpu)
            elif ps.gpu not in srv.learned:
                # No sample of this GPU showed the server before its first cell (a fast
                # start): its own processes there are those its first sample shows.
                srv.pids.update(ps.pids)
                srv.learned.add(ps.gpu)
        # The counter's reads since the last sample (the agent's energy_trace): they pin a
        # cell's edges to within a trace step.
        trace = [
            PowerSample(t=t, gpu=ps.gpu, power_w=None, energy_mj=mj) for t, mj in s.energy_trace
        ]
        for w in list(self._watches.values()):
            if w.host == s.host and ps.gpu in w.gpus:
                w.samples.extend(trace)
                w.samples.append(ps)
        self._settle(now)

    async def idle_floor(self, group: str, seconds: float) -> None:
        """Return once ``seconds`` have passed since the group's server was ready, so that
        its idle floor rests on that many seconds of samples; at once where its host has
        given no sample (no telemetry: nothing to measure)."""
        srv = self._servers.get(group)
        if srv is None or srv.began or not self._reads(srv.host):
            return
        since = srv.ready_at if srv.ready_at is not None else self._clock()
        wait = since + seconds - self._clock()
        if wait > 0:
            await asyncio.sleep(min(wait, seconds))

    def cell_finished(
        self, cell_id: str, records: Sequence[RequestRecord], *, concurrent: bool
    ) -> None:
        """A finished attempt's rows: its window and tokens. Its energy follows once the
        samples past the window are in (or at once, when they already are)."""
        w = self._watches.get(cell_id)
        if w is None:
            return
        if not self._reads(w.host):  # no telemetry on the host: nothing to record
            del self._watches[cell_id]
            return
        w.spans = cell_spans(records, concurrent)
        w.tokens = sum(r.output_tokens or 0 for r in records if r.error is None)
        w.deadline = self._clock() + self.wait_s
        self._settle(self._clock())
        if cell_id in self._watches:
            with contextlib.suppress(RuntimeError):  # no loop: the next sample settles it
                asyncio.get_running_loop().call_later(
                    self.wait_s + 0.1, lambda: self._settle(self._clock())
                )

    async def drain(self, timeout_s: float | None = None) -> None:
        """Wait for the cells whose energy is still to come (the end of a run), then record
        the rest with what there is."""
        end = time.monotonic() + (self.wait_s if timeout_s is None else timeout_s)
        while self.pending() and time.monotonic() < end:
            await asyncio.sleep(0.1)
        self._settle(math.inf)

    def _reads(self, host: str) -> bool:
        """Whether the host's GPUs are read: its telemetry was chosen, or it sent samples.
        A cell on such a host always gets its record, "no samples" included, so a run's
        records do not depend on when the first sample came in."""
        return host in self._read or any(h == host for h, _ in self._last)

    def pending(self) -> int:
        return sum(1 for w in self._watches.values() if w.spans is not None)

    # -- what goes out ------------------------------------------------------------------------

    def _settle(self, now: float) -> None:
        for w in [w for w in self._watches.values() if w.spans is not None]:
            off = self._offset.get(w.host, 0.0)
            end = max((b for _, b in w.spans or ()), default=0.0) - off
            seen = {s.gpu for s in w.samples if s.t >= end}
            if now < w.deadline and not set(w.gpus) <= seen:
                continue
            del self._watches[w.cell_id]
            try:
                self._record(w, off)
            except Exception:
                log.exception("energy watch: cell %s", w.cell_id)

    def _record(self, w: _Watch, off: float) -> None:
        srv = self._servers.get(w.group)
        result = cell_energy(
            w.samples,
            [(a - off, b - off) for a, b in w.spans or ()],
            w.gpus,
            w.tokens,
            idle_power_w=srv.idle_power_w if srv is not None else None,
            own_pids=srv.pids if srv is not None else None,
        )
        own = srv.pids if srv is not None else set()
        foreign = {p for s in w.samples for p in s.pids} - own if srv is not None else set()
        conditions = gpu_conditions((s.cond for s in w.samples if s.cond), foreign)
        self._emit(
            CellEnergy(
                cell_id=w.cell_id,
                group=w.group,
                cell=w.cell,
                attempt=w.attempt,
                figures={**result.figures(), **conditions},
            )
        )
        self._changed()

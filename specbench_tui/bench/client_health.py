"""Is the client itself fast enough for what it measures? Event-loop lag, CPU share and GC.

Every timestamp the client takes is taken when the event loop gets round to it. A loop held
up (a CPU hog in the process, a slow callback, a garbage collection, a starved machine)
delays every timestamp behind it, and the cell's TTFT and gaps grow with it. So each cell runs
under a :class:`ClientWatch`: a task that asks to wake every ``interval_s`` and records how
late it woke (the loop's lag), plus the process's CPU seconds over the cell's wall time (its
CPU share: near 1.0 the single-threaded client is saturated). A cell whose lag p99 passed
``threshold_s`` is flagged ``client_lagged``: its timings include the client's own delay.

The watch also keeps the cyclic garbage collector out of the measured path: objects that
exist when the cell starts are frozen (never scanned again), automatic collection is off
during the cell, and one full collection runs when it ends. Per-request objects are freed by
reference counting; should cyclic garbage still pile up (more than ``gc_ceiling`` young
objects), the watch collects the young generations and counts it.

Cells of packed groups overlap in one process, so the collector is quieted for the process,
not per cell (:class:`_QuietGc`): a full collection (30-80 ms with the tool's modules loaded)
at one cell's edge would stall every neighbour's streams in the middle of their measurement.
Only the first cell to start and the last to end collect.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from dataclasses import dataclass
from typing import Any

from specbench_tui.bench.metrics import percentile

LAG_THRESHOLD_S = 0.005
"""Lag p99 above which a cell is flagged. The timing target is a TTFT error of 1 ms median and
3 ms p99 against the server's own times; a loop late by 5 ms at its 99th percentile cannot
meet it."""
WATCH_INTERVAL_S = 0.01


@dataclass(frozen=True)
class ClientHealth:
    """How the client fared during one cell."""

    lag_p50_s: float
    lag_p99_s: float
    lag_max_s: float
    cpu_share: float  # process CPU seconds / wall seconds (1.0 = one core busy)
    wall_s: float
    samples: int
    gc_collections: int  # collections the watch had to run during the cell
    threshold_s: float

    @property
    def lagged(self) -> bool:
        return self.lag_p99_s > self.threshold_s

    def figures(self) -> dict[str, Any]:
        """The cell-row columns (``cells.parquet``, ``CellFinished``)."""
        return {
            "client_lagged": self.lagged,
            "client_lag_p50_s": round(self.lag_p50_s, 6),
            "client_lag_p99_s": round(self.lag_p99_s, 6),
            "client_lag_max_s": round(self.lag_max_s, 6),
            "client_cpu_share": round(self.cpu_share, 4),
            "client_gc_collections": self.gc_collections,
        }

    def describe(self) -> str:
        return (
            f"client event loop lagged: p99 {self.lag_p99_s * 1e3:.1f} ms, max "
            f"{self.lag_max_s * 1e3:.1f} ms (threshold {self.threshold_s * 1e3:.1f} ms), "
            f"client CPU {self.cpu_share:.0%} of a core"
        )


class _QuietGc:
    """The process's cyclic collector, off while any cell measures. The first cell to start
    collects, freezes what exists and turns automatic collection off; the last to end thaws,
    restores the collector as it found it and collects, where no timestamp is being taken.
    While cells overlap without a gap (a packed run), old garbage waits for such a moment;
    the watches' young-generation ceiling bounds what piles up meanwhile."""

    def __init__(self) -> None:
        self.measuring = 0
        self._was_enabled = False

    def enter(self) -> None:
        if self.measuring == 0:
            self._was_enabled = gc.isenabled()
            gc.collect()
            gc.freeze()
            gc.disable()
        self.measuring += 1

    def exit(self) -> None:
        self.measuring -= 1
        if self.measuring == 0:
            gc.unfreeze()
            if self._was_enabled:
                gc.enable()
            gc.collect()


_QUIET_GC = _QuietGc()


class ClientWatch:
    """``async with ClientWatch() as w: ...`` then ``w.health``."""

    def __init__(
        self,
        *,
        interval_s: float = WATCH_INTERVAL_S,
        threshold_s: float = LAG_THRESHOLD_S,
        quiet_gc: bool = True,
        gc_ceiling: int = 200_000,
    ) -> None:
        self.interval_s = interval_s
        self.threshold_s = threshold_s
        self.quiet_gc = quiet_gc
        self.gc_ceiling = gc_ceiling
        self.health: ClientHealth | None = None
        self._lags: list[float] = []
        self._collections = 0
        self._task: asyncio.Task[None] | None = None
        self._t0 = 0.0
        self._cpu0 = 0.0

    async def __aenter__(self) -> ClientWatch:
        if self.quiet_gc:
            _QUIET_GC.enter()
        self._t0 = time.perf_counter()
        self._cpu0 = time.process_time()
        self._task = asyncio.create_task(self._watch())
        return self

    async def __aexit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self._t0
        cpu = time.process_time() - self._cpu0
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self.quiet_gc:
            _QUIET_GC.exit()
        lags = sorted(self._lags) or [0.0]
        self.health = ClientHealth(
            lag_p50_s=percentile(lags, 50),
            lag_p99_s=percentile(lags, 99),
            lag_max_s=lags[-1],
            cpu_share=cpu / wall if wall > 0 else 0.0,
            wall_s=wall,
            samples=len(self._lags),
            gc_collections=self._collections,
            threshold_s=self.threshold_s,
        )

    async def _watch(self) -> None:
        perf = time.perf_counter
        interval = self.interval_s
        lags = self._lags
        while True:
            due = perf() + interval
            await asyncio.sleep(interval)
            lags.append(max(0.0, perf() - due))
            if self.quiet_gc and gc.get_count()[0] > self.gc_ceiling:
                gc.collect(1)
                self._collections += 1

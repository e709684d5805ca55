"""What writing the event log costs the event loop that times requests: the synchronous path
(write and fsync inside ``emit``, as every durable event was written before the writer
thread) against the writer thread (engine/event_writer.py), and the client lag of a packed
simulated campaign run each way.

    python bench/event_log.py [--events 1000] [--gap-ms 1] [--dir DIR] [--packed]
                              [--plan plans/demo.toml] [--repeats 1]

Part one emits ``--events`` durable events through the engine's hub, one every ``--gap-ms``
(a packed run's cells start, end and are judged at about that rate at its busiest), into a
results directory under ``--dir`` (default: a temporary one; put it on the disk the results
go to, since the figure is that disk's fsync), and prints how long each ``emit`` held the
loop (median, p99, max), the loop's lag as the client's watch samples it every 10 ms, and
for the writer how many fsyncs the events took. ``--packed`` then runs the plan with
``pack = true`` on the simulated host (``--sim --headless``) both ways and prints how many
finished cells were flagged client-lagged and their loop lag p99 (median and max over cells).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specbench_tui.bench.client_health import LAG_THRESHOLD_S, WATCH_INTERVAL_S  # noqa: E402
from specbench_tui.bench.metrics import percentile  # noqa: E402
from specbench_tui.engine.event_writer import EventWriter  # noqa: E402
from specbench_tui.engine.hub import EventHub  # noqa: E402
from specbench_tui.engine.run_control import RunControl  # noqa: E402
from specbench_tui.engine.store import ResultsStore  # noqa: E402
from specbench_tui.results.events import CellFinished, CellStarted  # noqa: E402
from specbench_tui.results.layout import ResultsLayout  # noqa: E402
from specbench_tui.results.state import CampaignState  # noqa: E402

#: Run in a child interpreter for the synchronous path of a whole campaign: the hub then
#: never starts its writer thread and writes every durable event inside ``emit``.
SYNC_LAUNCHER = (
    "import sys\n"
    "from specbench_tui.engine.hub import EventHub\n"
    "EventHub._writer_now = lambda self: None\n"
    "from specbench_tui.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


class SyncHub(EventHub):
    """The hub with no writer thread: every durable event written and synced in ``emit``."""

    def _writer_now(self) -> EventWriter | None:
        return None


def _ms(v: float) -> str:
    return f"{v * 1e3:.3f} ms"


async def _watch(lags: list[float], stop: asyncio.Event) -> None:
    """The client's loop-lag sample: ask to wake every 10 ms, record how late it woke."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        t = loop.time()
        await asyncio.sleep(WATCH_INTERVAL_S)
        lags.append(max(0.0, loop.time() - t - WATCH_INTERVAL_S))


async def _emit_many(hub: EventHub, n: int, gap_s: float) -> tuple[list[float], list[float]]:
    lags: list[float] = []
    stop = asyncio.Event()
    watcher = asyncio.ensure_future(_watch(lags, stop))
    held: list[float] = []
    for i in range(n):
        ev = (
            CellStarted(cell_id=f"c{i}", group="g", cell=f"cell {i}", requests=8)
            if i % 2 == 0
            else CellFinished(cell_id=f"c{i - 1}", group="g", cell=f"cell {i - 1}", requests=8)
        )
        t = time.perf_counter()
        hub.emit(ev)
        held.append(time.perf_counter() - t)
        await asyncio.sleep(gap_s)
    await hub.durable()
    stop.set()
    await watcher
    return held, lags


def _one_way(where: Path, sync: bool, n: int, gap_s: float) -> str:
    layout = ResultsLayout.for_campaign(where, "sync" if sync else "writer")
    store = ResultsStore(layout)
    store.open("[campaign]\n", "bench")
    hub = (SyncHub if sync else EventHub)(store, RunControl(), CampaignState(layout.rows_exist))
    try:
        held, lags = asyncio.run(_emit_many(hub, n, gap_s))
        batches = store._writer.batches if store._writer is not None else n
    finally:
        store.close()
    held.sort()
    lags.sort()
    name = "synchronous" if sync else "writer thread"
    return (
        f"{name:>13}: emit holds the loop median {_ms(statistics.median(held))}, "
        f"p99 {_ms(percentile(held, 99))}, max {_ms(held[-1])}; loop lag p99 "
        f"{_ms(percentile(lags, 99))} (threshold {_ms(LAG_THRESHOLD_S)}); "
        f"{n} events in {batches} fsyncs"
    )


def _packed_plan(text: str) -> str:
    text = re.sub(r"(?m)^pack\s*=.*\n", "", text)
    return re.sub(r"(?m)^(name\s*=.*)$", r"\1\npack = true", text, count=1)


def _campaign(plan: Path, results: Path, sync: bool) -> str:
    import polars as pl

    head = [sys.executable, *(("-c", SYNC_LAUNCHER) if sync else ("-m", "specbench_tui"))]
    t0 = time.monotonic()
    proc = subprocess.run(
        [*head, str(plan), "--sim", "--headless", "--results", str(results)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    wall = time.monotonic() - t0
    name = "synchronous" if sync else "writer thread"
    cells = pl.read_parquet(next(results.glob("*/cells.parquet")))
    done = cells.filter(pl.col("status") == "done")
    p99 = sorted(done["client_lag_p99_s"].drop_nulls().to_list())
    return (
        f"{name:>13}: exit {proc.returncode}, {wall:.0f} s; {done['client_lagged'].sum()} of "
        f"{done.height} cells flagged client-lagged; their loop lag p99 median "
        f"{_ms(statistics.median(p99))}, max {_ms(p99[-1])}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1000)
    ap.add_argument("--gap-ms", type=float, default=1.0)
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--packed", action="store_true")
    ap.add_argument("--plan", type=Path, default=ROOT / "plans" / "demo.toml")
    ap.add_argument("--repeats", type=int, default=1, help="packed runs each way, alternated")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="event-log-bench-", dir=args.dir) as tmp:
        for sync in (True, False):
            print(_one_way(Path(tmp) / "emit", sync, args.events, args.gap_ms / 1e3), flush=True)
        if args.packed:
            plan = Path(tmp) / "packed.toml"
            plan.write_text(_packed_plan(args.plan.read_text()))
            for i in range(args.repeats):
                for sync in (True, False):
                    where = Path(tmp) / f"{'rs' if sync else 'rw'}{i}"
                    print(_campaign(plan, where, sync), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the views cost when a cell ends, after 10 and after 1000 cells.

Writes a results directory the way a long campaign leaves it (one part file per finished
cell, chunk-gap lists included; one telemetry part per cell: 8 GPUs sampled once a second
for a minute), then times what the store does when one more cell ends: ``per cell`` (the
cells view; the request and telemetry views are left to the end of the run and to the
rebuild every ``WHOLE_VIEWS_EVERY_S``) and ``rebuild`` (every view, as at the end of a run).
With ``--before REV`` it also times the store of that git revision doing what it did when a
cell ended (its part frames already cached in memory, as in a running campaign).

Run: python bench/views_bench.py [--cells 10 1000] [--rows 30] [--before REV]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import polars as pl

from specbench_tui.engine.store import ResultsStore
from specbench_tui.results.cells import Cell, ServiceGroup
from specbench_tui.results.events import CampaignStarted, CellFinished, CellStarted, Event
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.schema import REQUEST_SCHEMA, TELEMETRY_SCHEMA
from specbench_tui.results.state import CampaignState
from specbench_tui.results.views import cells_frame

GAPS = 32  # chunk gaps per request
GPUS, SAMPLES = 8, 60  # per telemetry part
ROOT = Path(__file__).resolve().parent.parent


def _group() -> ServiceGroup:
    return ServiceGroup(
        id="gpu1.ddtree.tp8",
        host="gpu1",
        host_kind="ssh",
        config="ddtree",
        label="DDTree",
        tp=8,
        gpu_ids=tuple(range(8)),
        port=30000,
        command=("python", "-m", "sglang.launch_server"),
        env=(),
        api="sglang",
        ready_timeout_s=900.0,
        speculative=True,
    )


def _cell(n: int) -> Cell:
    return Cell(
        id=f"c{n:05d}",
        name=f"gpu1.ddtree.tp8/single/chat/{n}",
        group="gpu1.ddtree.tp8",
        host="gpu1",
        config="ddtree",
        tp=8,
        workload="single",
        kind="single",
        prompt_set="chat",
        max_tokens=1024,
        concurrency=None,
        prompts=("chat",),
    )


def _part(cell: Cell, rows: int) -> pl.DataFrame:
    data = {
        "campaign": ["bench"] * rows,
        "cell_id": [cell.id] * rows,
        "attempt": [1] * rows,
        "group": [cell.group] * rows,
        "host": [cell.host] * rows,
        "config": [cell.config] * rows,
        "tp": [cell.tp] * rows,
        "workload": [cell.workload] * rows,
        "kind": [cell.kind] * rows,
        "prompt_set": [cell.prompt_set] * rows,
        "prompt_id": [f"p{i}" for i in range(rows)],
        "max_tokens": [cell.max_tokens] * rows,
        "repeat": [0] * rows,
        "started_at": [1.767e9 + i for i in range(rows)],
        "ttft_s": [0.05] * rows,
        "e2e_s": [5.0] * rows,
        "itl_s": [[0.004 + i * 1e-6] * GAPS for i in range(rows)],
        "output_tokens": [1024] * rows,
        "prompt_tokens": [300] * rows,
        "output_sha256": [f"{i:064x}" for i in range(rows)],
    }
    return pl.DataFrame(data).with_columns(
        [pl.lit(None, dtype=t).alias(k) for k, t in REQUEST_SCHEMA.items() if k not in data]
    )


def _telemetry(n: int) -> pl.DataFrame:
    t0 = 1.767e9 + n * SAMPLES
    rows = [
        {
            "time": t0 + s,
            "host": "gpu1",
            "gpu": g,
            "util_pct": 90.0,
            "mem_used_mib": 130000.0,
            "mem_total_mib": 143771.0,
            "power_w": 600.0,
            "temp_c": 60.0,
        }
        for s in range(SAMPLES)
        for g in range(GPUS)
    ]
    return pl.DataFrame(rows, schema={k: TELEMETRY_SCHEMA[k] for k in rows[0]})


def campaign(root: Path, cells: int, rows: int) -> tuple[ResultsLayout, CampaignState]:
    """``cells`` finished cells, their parts and telemetry on disk; the reduced log."""
    layout = ResultsLayout(root)
    for d in (layout.parts, layout.telemetry_parts, layout.logs):
        d.mkdir(parents=True)
    planned = [_cell(n) for n in range(cells)]
    events: list[Event] = [
        CampaignStarted(
            campaign="bench",
            plan_hash="bench",
            hosts=["gpu1"],
            groups=[_group()],
            cells=planned,
            selected=[c.id for c in planned],
        )
    ]
    for n, c in enumerate(planned):
        _part(c, rows).write_parquet(layout.part_path(c.id, 1))
        _telemetry(n).write_parquet(layout.telemetry_parts / f"{n + 1:06d}.parquet")
        events.append(CellStarted(cell_id=c.id, group=c.group, cell=c.name))
        figures = {"throughput_tok_s": 1000.0, "ttft_s_mean": 0.05, "accept_length_mean": 4.2}
        events.append(
            CellFinished(cell_id=c.id, group=c.group, cell=c.name, requests=rows, figures=figures)
        )
    return layout, CampaignState.from_events(events, layout.rows_exist)


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Median seconds of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def store_of(rev: str) -> ModuleType:
    """``specbench_tui/engine/store.py`` as it was at ``rev``, importable beside today's."""
    src = subprocess.run(
        ["git", "show", f"{rev}:specbench_tui/engine/store.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp(prefix="specbench-store-")) / "store_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("store_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def before_per_cell(module: ModuleType, layout: ResultsLayout, state: CampaignState) -> float:
    """What the store of ``module`` did when a cell ended: its ``_refresh_loop`` body."""
    store = module.ResultsStore(layout)

    def once() -> None:
        store._write_views(cells_frame(state), dict(store._part_frames))

    once()  # a running campaign has every part in memory already
    return timed(once, 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, nargs="+", default=[10, 1000])
    ap.add_argument("--rows", type=int, default=30, help="request rows per cell")
    ap.add_argument("--before", metavar="REV", help="also time the store of this git revision")
    args = ap.parse_args()
    before = store_of(args.before) if args.before else None
    print(f"{'cells':>6} {'rows':>8} {'samples':>8} {'per cell':>10} {'rebuild':>10}", end="")
    print(f" {'before: per cell':>17}" if before else "")
    for n in args.cells:
        with tempfile.TemporaryDirectory(prefix="specbench-views-") as tmp:
            layout, state = campaign(Path(tmp) / "bench", n, args.rows)
            store = ResultsStore(layout)

            def per_cell(store: ResultsStore = store, state: CampaignState = state) -> None:
                store._write_views(cells_frame(state), whole=False)

            def rebuild(store: ResultsStore = store, state: CampaignState = state) -> None:
                store.write_views(state)

            now = timed(per_cell, 5)
            whole = timed(rebuild, 3)
            line = f"{n:>6} {n * args.rows:>8} {n * GPUS * SAMPLES:>8} "
            line += f"{now * 1e3:>8.1f}ms {whole * 1e3:>8.1f}ms"
            if before is not None:
                line += f" {before_per_cell(before, layout, state) * 1e3:>15.1f}ms"
            print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())

"""The demo campaign end to end, headless, on the simulated host (target: under 2 minutes on
two cores). Prints the wall time, the cells and the request figures it measured.

Run: python bench/demo_bench.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    with tempfile.TemporaryDirectory() as results:
        t0 = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "specbench_tui",
                str(ROOT / "plans" / "demo.toml"),
                "--headless",
                "--results",
                results,
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        wall = time.perf_counter() - t0
        root = Path(results) / "demo"
        cells = pl.read_parquet(root / "cells.parquet")
        req = pl.read_parquet(root / "requests.parquet")
        print(
            f"demo campaign: exit {proc.returncode}, {wall:.1f} s wall, "
            f"{(cells['status'] == 'done').sum()}/{cells.height} cells done, "
            f"{req.height} requests"
        )
        print(
            f"  TTFT p50 {req['ttft_s'].median() * 1e3:.2f} ms, "
            f"ITL p50 {req['itl_s'].explode().median() * 1e3:.2f} ms (simulated time x12)"
        )
        acc = req.group_by("config").agg(pl.col("accept_length").mean()).sort("config")
        print(
            "  accept length by config: "
            + ", ".join(f"{c} {a:.2f}" if a is not None else f"{c} -" for c, a in acc.iter_rows())
        )


if __name__ == "__main__":
    main()

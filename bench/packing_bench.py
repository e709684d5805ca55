"""Packed against unpacked: the seed campaign rehearsed on the simulated host both ways at the
same simulator speed, with the dry run's prediction beside the measured wall times.

    python bench/packing_bench.py [--plan plans/ddtree-qwen36-ct200.toml] [--speed 50]

Prints the predicted and measured wall time of each, and the packed/unpacked ratios (the
target: packed at most half the unpacked estimate, and a measured run at most 60%).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _variant(text: str, pack: bool, speed: float) -> str:
    text = re.sub(r"(?m)^pack\s*=.*\n", "", text)
    flag = "true" if pack else "false"
    text = re.sub(r"(?m)^(name\s*=.*)$", rf"\1\npack = {flag}", text, count=1)
    # Rehearsals of SSH hosts run the simulator at x50; say the speed for every host.
    return re.sub(r"(?m)^(\[hosts\.[^\]]+\])$", rf"\1\nspeed = {speed:g}", text)


def _lagged(results: Path) -> str:
    """How many finished cells the client flagged as lagged (its own delay in their timings)."""
    import polars as pl

    cells = pl.read_parquet(next(results.glob("*/cells.parquet")))
    done = cells.filter(pl.col("status") == "done")
    return f"{done['client_lagged'].sum()} of {done.height} cells flagged client-lagged"


def _run(plan: Path, results: Path) -> tuple[float, int, float]:
    dry = subprocess.run(
        [sys.executable, "-m", "specbench_tui", str(plan), "--sim", "--dry-run", "--json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    predicted = json.loads(dry.stdout)["estimate_s"]
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "specbench_tui",
            str(plan),
            "--sim",
            "--headless",
            "--results",
            str(results),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return predicted, proc.returncode, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", type=Path, default=ROOT / "plans" / "ddtree-qwen36-ct200.toml")
    ap.add_argument("--speed", type=float, default=50.0)
    args = ap.parse_args()
    text = args.plan.read_text()
    with tempfile.TemporaryDirectory(prefix="packing-bench-") as tmp:
        out = {}
        for pack in (False, True):
            plan = Path(tmp) / f"{'packed' if pack else 'unpacked'}.toml"
            plan.write_text(_variant(text, pack, args.speed))
            out[pack] = _run(plan, Path(tmp) / ("rp" if pack else "ru"))
            name = "packed" if pack else "unpacked"
            pred, code, wall = out[pack]
            lagged = _lagged(Path(tmp) / ("rp" if pack else "ru"))
            print(
                f"{name:>9}: predicted {pred:7.1f} s, measured {wall:7.1f} s (exit {code}); "
                + lagged
            )
    (pu, _, wu), (pp, _, wp) = out[False], out[True]
    print(f"predicted packed/unpacked {pp / pu:.2f} (target <= 0.50)")
    print(f"measured  packed/unpacked {wp / wu:.2f} (target <= 0.60)")
    return 0 if out[False][1] == out[True][1] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

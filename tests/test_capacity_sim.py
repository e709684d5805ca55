"""A capacity search, run by a headless campaign against the simulated server, finds the
concurrency at which the server's own performance model puts TPOT over the SLO's limit.

The simulator's decode step is 28 ms at TP1, 1.2% slower per extra running request
(``sim/model.py`` ``PerfModel.step_cost``), divided by ``--speed``; an autoregressive request
yields one token a step, so its TPOT at ``c`` concurrent clients is the step at batch ``c``
(plus the odd prefill of another client's next request). The limit is put halfway between the
steps at batch 12 and 13, so the known capacity is 12 and the search, bisecting [4, 24] to a
closed bracket, must end there (one level lower at most, for the prefills its model leaves
out: they only ever add time).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from specbench_tui.sim.config import SimConfig
from specbench_tui.sim.model import PerfModel

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[1]
SPEED = 2.0

PLAN = """
[campaign]
name = "capacity"
baseline = "ar"

[hosts.sim]
sim = true
gpus = 1
speed = {speed}

[configs.ar]

[matrix]
configs = ["ar"]
tp = [1]

[slo]
tpot = "{tpot_ms:.4f}ms"
target = 0.6

[workloads.capacity]
kind = "capacity"
levels = [4, 24]
requests = 24
max_points = 8
max_tokens = 128
prompts = ["chat"]
"""


def step_s(batch: int) -> float:
    """The simulator's decode step at ``batch`` running requests, in real seconds."""
    return PerfModel(SimConfig(tp_size=1)).step_cost(batch).total_ms / 1000 / SPEED


def known_capacity(limit_s: float) -> int:
    """The highest concurrency whose TPOT (one step per token) stays within ``limit_s``."""
    c = 1
    while step_s(c + 1) <= limit_s:
        c += 1
    return c


def test_the_search_finds_the_simulators_tpot_limit(tmp_path: Path) -> None:
    limit_s = (step_s(12) + step_s(13)) / 2
    known = known_capacity(limit_s)
    assert known == 12
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(speed=SPEED, tpot_ms=limit_s * 1000))
    proc = subprocess.run(
        [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results",
         str(tmp_path / "res")],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    root = tmp_path / "res" / "capacity"
    cell = pl.read_parquet(root / "cells.parquet").row(0, named=True)
    found, fails = cell["max_concurrency_under_slo"], cell["capacity_fail_level"]
    print(
        f"TPOT limit {limit_s * 1000:.3f} ms: known capacity {known}, found {found} "
        f"(fails at {fails}), levels {cell['capacity_levels']}, "
        f"shares {[round(s, 2) for s in cell['capacity_shares']]}"
    )
    assert fails == found + 1, cell["capacity_note"]  # the bracket closed
    assert known - 1 <= found <= known
    assert cell["capacity_levels"][:2] == [4, 24]
    assert len(cell["capacity_levels"]) <= 8
    # Each level's rows carry it, and the share recorded for a level is its rows' share.
    rows = pl.read_parquet(root / "requests.parquet")
    per_level = rows.group_by("concurrency").len()
    assert sorted(per_level["concurrency"].to_list()) == sorted(cell["capacity_levels"])
    assert set(per_level["len"].to_list()) == {24}
    for level, share in zip(cell["capacity_levels"], cell["capacity_shares"], strict=True):
        at = rows.filter(pl.col("concurrency") == level)
        good = at.filter(pl.col("error").is_null() & (pl.col("tpot_s") <= limit_s)).height
        assert share == pytest.approx(good / at.height)
    assert f"capacity under the SLO {found} (fails at {fails})" in proc.stdout

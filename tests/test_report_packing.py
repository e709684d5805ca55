"""Packed results are marked, and a packed campaign's control (``pack_control``) is kept
apart from the packed cells: compared with them in a block of its own, never pooled."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from conftest import MINIMAL_PLAN, ROOT

from specbench_tui.report.frames import comparison, packing_effect, requests
from specbench_tui.report.inputs import load_inputs

PLAN = (
    MINIMAL_PLAN.replace('name = "t"', 'name = "t"\npack = true\npack_control = true')
    .replace("speed = 50", "speed = 20")
    .replace("samples = 2", "samples = 1\nrepeats = 3")
)


@pytest.mark.system
def test_packed_cells_are_marked_and_the_control_compared_apart(write_plan, tmp_path: Path) -> None:
    plan = write_plan(PLAN)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "specbench_tui",
            str(plan),
            "--headless",
            "--results",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    root = tmp_path / "t"
    cells = pl.read_parquet(root / "cells.parquet")
    flags = dict(zip(cells["group"], cells["packed"], strict=True))
    assert flags == {"sim.ar.tp1": True, "sim.dflash.tp1": True, "sim.ar.tp1.solo": False}

    inp = load_inputs(root)
    req = pl.read_parquet(root / "requests.parquet").filter(pl.col("error").is_null())
    per_group = dict(req.group_by("group").len().iter_rows())
    cmp = comparison(inp)
    assert cmp["packed"].to_list() == [True, True]  # ar and dflash; the control is no row
    ar = cmp.filter(pl.col("config") == "ar").row(0, named=True)
    # Not pooled with sim.ar.tp1.solo's (a request whose tokens all came in one read has a
    # zero decode window and no decode tok/s, so fewer may count than were made):
    assert 0 < ar["requests"] <= per_group["sim.ar.tp1"]
    assert "sim.ar.tp1.solo" not in requests(inp)["group"].cast(pl.String).to_list()

    (eff,) = packing_effect(inp).to_dicts()
    assert (eff["config"], eff["tp"], eff["workload"]) == ("ar", 1, "single")
    assert eff["n_packed"] >= 2 and eff["n_solo"] >= 2  # repeats, as units
    assert eff["ratio"] == pytest.approx(eff["packed_tok_s"] / eff["solo_tok_s"])
    # Three repeats a side on two busy cores may be too few to bound the ratio: then it says so.
    assert eff["ratio_too_few"] or eff["ratio_lo"] <= eff["ratio"] <= eff["ratio_hi"]

    report = (root / "report.md").read_text()
    assert "2 of 3 service groups ran packed" in report
    assert "Packing effect on sim" in report

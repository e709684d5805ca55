"""A kill -9 at every write boundary, then a resume: every cell finishes exactly once, no row
is lost or counted twice, and every view agrees with the event log.

The boundaries are the store's own ``crash_point`` names (results/files.py): the test kills
the campaign right after each kind of write became durable, at its first and a later
occurrence, which covers the windows where an earlier version lost data (between a cell's
rows and the event that ends it, between the cells view and the log).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from conftest import MINIMAL_PLAN, ROOT

from specbench_tui.results.files import CRASH_ENV, TMP_SUFFIX, read_events
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.state import CampaignState

PLAN = (
    MINIMAL_PLAN.replace('prompts = ["chat"]', 'prompts = ["chat", "code"]')
    .replace("speed = 50", "speed = 200")
    .replace("[workloads.single]", "[checks]\ngreedy_equivalence = true\n\n[workloads.single]")
)
CELLS, REQUESTS_PER_CELL = 4, 2

BOUNDARIES = [
    "plan",
    "event:campaign_started",
    "event:group_started",
    "event:cell_started@2",
    "part",
    "part@3",
    "texts@2",
    "event:cell_finished",
    "event:cell_finished@3",
    "views:requests",
    "views:cells@2",
    "event:group_finished",
    "event:campaign_finished",
    "telemetry",
]


def _run(plan: Path, results: Path, crash: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    if crash:
        env[CRASH_ENV] = crash
    cmd = [
        sys.executable,
        "-m",
        "specbench_tui",
        str(plan),
        "--headless",
        "--results",
        str(results),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=ROOT, env=env)


@pytest.mark.slow
@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_kill_at_a_write_boundary_then_resume(write_plan, tmp_path: Path, boundary: str) -> None:
    plan = write_plan(PLAN)
    results = tmp_path / "results"
    crashed = _run(plan, results, boundary)
    assert crashed.returncode == -9, f"no crash at {boundary}: {crashed.stdout[-2000:]}"
    resumed = _run(plan, results, None)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]

    layout = ResultsLayout(results / "t")
    events = read_events(layout.events)
    state = CampaignState.from_events(events, layout.rows_exist)
    assert state.finished and len(state.cells) == CELLS
    assert {c.status for c in state.cells.values()} == {"done"}
    finished = Counter(e.cell_id for e in events if e.name == "cell_finished")
    assert set(finished.values()) == {1}, f"a cell finished twice or never: {finished}"

    counted = {c.id: c.attempt for c in state.cells.values()}
    req = pl.read_parquet(layout.requests)
    rows = req.filter(
        pl.struct("cell_id", "attempt").map_elements(
            lambda r: counted.get(r["cell_id"]) == r["attempt"], return_dtype=pl.Boolean
        )
    )
    per_cell = Counter(rows["cell_id"].to_list())
    assert per_cell == dict.fromkeys(counted, REQUESTS_PER_CELL), per_cell
    keys = rows.select("cell_id", "prompt_id", "repeat")
    assert keys.n_unique() == keys.height  # no request counted twice

    cells = pl.read_parquet(layout.cells)
    assert cells.height == CELLS and set(cells["status"]) == {"done"}
    assert dict(zip(cells["cell_id"], cells["attempt"], strict=True)) == counted

    leftovers = [
        p
        for d in (layout.root, layout.parts, layout.telemetry_parts)
        for p in d.iterdir()
        if p.name.endswith(TMP_SUFFIX)
    ]
    assert not leftovers
    if boundary.startswith("part"):  # rows written, end never logged: kept aside, not counted
        assert any(layout.interrupted_parts.glob("*.parquet"))
    assert json.loads(layout.events.read_text().splitlines()[-1])["event"]

"""A kill -9 at every write boundary, then a resume: every cell ends exactly once, no row is
lost or counted twice, and every view agrees with the event log.

The boundaries are not listed here: a run with ``SPECBENCH_CRASH_AT=record:FILE`` writes the
name of every ``crash_point`` it passes (results/files.py), and the test is parametrized over
what it recorded: each name at its first occurrence and, for a name passed three times or
more (a cell's rows, its events, the cells view), at a middle one too, which covers the
windows where an earlier version lost data (between a cell's rows and the event that ends
it, between the cells view and the log). A boundary added to the store is tested from the
day it is written, with no list to keep up to date.

Two scenarios: a clean campaign (every cell finishes, a greedy-equivalence verdict), and a
``--rerun-failed`` of a campaign whose servers fail (one dies mid-cell, one never starts),
for the boundaries only failures pass: ``cell_queued``, ``service_failed``, ``cell_failed``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
from conftest import MINIMAL_PLAN, ROOT, free_port, tier_runs

from specbench_tui.report.render import TEX_ENGINES
from specbench_tui.results.files import CRASH_ENV, RECORD_PREFIX, TMP_SUFFIX, read_events
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.state import CampaignState
from specbench_tui.results.views import view_status

CLEAN_PLAN = (
    MINIMAL_PLAN.replace('prompts = ["chat"]', 'prompts = ["chat", "code"]')
    .replace("speed = 50", "speed = 200")
    .replace("[workloads.single]", "[checks]\ngreedy_equivalence = true\n\n[workloads.single]")
)
# The AR server dies at its third request (mid-way through the second cell); DFlash never starts.
FAULT_PLAN = CLEAN_PLAN.replace(
    'label = "AR"', 'label = "AR"\nargs = ["--sim-fault", "crash-after:3"]'
).replace('"8"]', '"8", "--sim-fault", "crash-at-start"]')
CELLS, REQUESTS_PER_CELL = 4, 2


@dataclass(frozen=True)
class Scenario:
    plan: str
    args: tuple[str, ...]  # of the run that is killed
    setup: bool  # a plain run first, whose results each case starts from
    exit_codes: tuple[int, ...]  # of the resume


SCENARIOS = {
    "clean": Scenario(CLEAN_PLAN, (), setup=False, exit_codes=(0,)),
    "rerun-failed": Scenario(FAULT_PLAN, ("--rerun-failed",), setup=True, exit_codes=(1,)),
}
_scratch = tempfile.TemporaryDirectory(prefix="specbench-crash-")  # for the module's lifetime
_setups: dict[str, Path] = {}  # scenario -> results root after its setup run
_recorded: dict[str, list[str]] = {}  # scenario -> the boundaries its run passed


def _no_tex() -> str:
    """A PATH directory whose TeX engines fail at once: the PDF is not what these runs check,
    and compiling it would take half of each one."""
    where = Path(_scratch.name) / "no-tex"
    if not where.is_dir():
        where.mkdir()
        for name in TEX_ENGINES:
            (where / name).write_text("#!/bin/sh\nexit 1\n")
            (where / name).chmod(0o755)
    return str(where)


def _run(
    plan: Path, results: Path, crash: str | None, args: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    env["PATH"] = f"{_no_tex()}:{env.get('PATH', '')}"
    if crash:
        env[CRASH_ENV] = crash
    cmd = [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results"]
    return subprocess.run(
        [*cmd, str(results), *args], capture_output=True, text=True, timeout=180, cwd=ROOT, env=env
    )


def _write_plan(where: Path, text: str) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    path = where / "plan.toml"
    path.write_text(text.replace("{port}", str(free_port())))
    return path


def record_boundaries(name: str, sc: Scenario) -> list[str]:
    """Every boundary one run of the scenario passes, in order (setting up its start first)."""
    where = Path(_scratch.name) / name
    plan = _write_plan(where, sc.plan)
    results = where / "results"
    if sc.setup:
        first = _run(plan, results, None)
        assert first.returncode in (0, 1), first.stdout[-3000:] + first.stderr[-3000:]
        shutil.copytree(results, where / "setup")
        _setups[name] = where / "setup"
    log = where / "boundaries.txt"
    proc = _run(plan, results, RECORD_PREFIX + str(log), sc.args)
    assert proc.returncode in sc.exit_codes, proc.stdout[-3000:] + proc.stderr[-3000:]
    return log.read_text().split()


def recorded() -> dict[str, list[str]]:
    """Each scenario recorded once per test session (collection does it)."""
    for name, sc in SCENARIOS.items():
        if name not in _recorded:
            _recorded[name] = record_boundaries(name, sc)
    return _recorded


#: Boundaries passed a number of times that depends on the run, not the plan: notices (the
#: comparability audit's warning as a group ends comes only where the host's load moved
#: between the groups). Each test worker records the scenarios at collection, and two
#: workers must collect the same cases, so these get no middle case.
VARYING = frozenset({"event:notice"})


def crash_cases(recorded: dict[str, list[str]]) -> list[tuple[str, str]]:
    """(scenario, NAME[@K]): every name at its first occurrence and, when it is passed three
    times or more, at the middle one; a later scenario only adds names no earlier one has."""
    cases: list[tuple[str, str]] = []
    covered: set[str] = set()
    for scenario, names in recorded.items():
        counts = Counter(names)
        for name in dict.fromkeys(names):
            if name in covered:
                continue
            cases.append((scenario, name))
            if counts[name] >= 3 and name not in VARYING:
                cases.append((scenario, f"{name}@{counts[name] // 2 + 1}"))
        covered |= set(counts)
    # Sorted: a cell's cell_energy comes when the sample after its window does, so where it
    # falls among the other boundaries differs from run to run (and between test workers).
    return sorted(cases)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "boundary" not in metafunc.fixturenames:
        return
    if not tier_runs(metafunc.config, "system"):  # the default tier: no recording runs
        metafunc.parametrize("scenario,boundary", [("clean", "unrecorded")])  # deselected anyway
        return
    cases = crash_cases(recorded())
    metafunc.parametrize("scenario,boundary", cases, ids=[f"{s}:{b}" for s, b in cases])


@pytest.mark.system
def test_the_record_has_every_kind_of_boundary() -> None:
    """The recording itself: the failures' boundaries and every view are in the lists, and
    the views that concatenate every part are not written per cell."""
    names = {b.partition("@")[0] for _, b in crash_cases(recorded())}
    for must in (
        "plan",
        "part",
        "texts",
        "telemetry",
        "views:cells",
        "views:requests",
        "views:telemetry",
        "event:service_ready",
        "event:check_verdict",
        "event:cell_finished",
        "event:cell_failed",
        "event:cell_queued",
        "event:service_failed",
    ):
        assert must in names, f"{must} never passed: {sorted(names)}"
    clean = Counter(recorded()["clean"])
    # The views that concatenate every part are written once, at the end: not per cell.
    assert clean["views:requests"] == clean["views:telemetry"] == 1
    assert clean["views:cells"] == CELLS + 1 and clean["part"] == CELLS


@pytest.mark.system
def test_kill_at_a_write_boundary_then_resume(tmp_path: Path, scenario: str, boundary: str) -> None:
    sc = SCENARIOS[scenario]
    plan = _write_plan(tmp_path, sc.plan)
    results = tmp_path / "results"
    if sc.setup:
        shutil.copytree(_setups[scenario], results)
    crashed = _run(plan, results, boundary, sc.args)
    assert crashed.returncode == -9, f"no crash at {boundary}: {crashed.stdout[-2000:]}"
    resumed = _run(plan, results, None)
    assert resumed.returncode in sc.exit_codes, resumed.stdout[-3000:] + resumed.stderr[-3000:]

    layout = ResultsLayout(results / "t")
    events = read_events(layout.events)
    state = CampaignState.from_events(events, layout.rows_exist)
    assert state.finished and len(state.cells) == CELLS
    statuses = {c.status for c in state.cells.values()}
    assert statuses <= {"done", "failed"}, statuses  # every cell ended
    if scenario == "clean":
        assert statuses == {"done"}
    finished = Counter(e.cell_id for e in events if e.name == "cell_finished")
    done = {c.id for c in state.cells.values() if c.status == "done"}
    assert set(finished) == done and set(finished.values()) <= {1}, finished

    counted = {c.id: c.attempt for c in state.cells.values() if c.status == "done"}
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
    assert cells.height == CELLS
    want = {c.id: (view_status(state, c.status), c.attempt) for c in state.cells.values()}
    got = {r["cell_id"]: (r["status"], r["attempt"]) for r in cells.iter_rows(named=True)}
    assert got == want

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

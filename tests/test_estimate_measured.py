"""The estimate's constants measured in an earlier results directory (plan/measured.py): a cell
measured before is estimated at what it took, a server start-up and a group's tail at theirs,
a group that failed to start with the same command at its time to fail; the dry run says which
constants are measured and which assumed; ``--estimate-from`` and the default directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specbench_tui.cli import main
from specbench_tui.errors import InputError
from specbench_tui.plan.estimate import Estimate, estimate, host_speeds
from specbench_tui.plan.expand import Expansion, expand
from specbench_tui.plan.loader import load_plan
from specbench_tui.plan.measured import find_measured, load_measured
from specbench_tui.results.events import GroupFinished, GroupStarted, ServiceFailed
from specbench_tui.results.layout import ResultsLayout
from tests.conftest import MINIMAL_PLAN, ROOT
from tests.support.results_builder import ResultsBuilder, request_row

#: The minimal plan with two output lengths: two cells per group, on a simulator at x50.
PLAN = MINIMAL_PLAN.replace("max_tokens = [32]", "max_tokens = [32, 64]").replace("{port}", "31000")
SPEED = 50.0


def _results(root: Path, plan_text: str = PLAN) -> Path:
    """What a run of the plan left: the AR group ready after 10 s, its two cells 10 s each and
    30 s besides them (the builder's clock ticks 10 s an event); DFlash's server failed after
    3 s; the campaign finished 6 s after that."""
    root.parent.mkdir(parents=True, exist_ok=True)
    plan_path = root.parent / "plan-earlier.toml"
    plan_path.write_text(plan_text)
    exp = expand(load_plan(plan_path))
    b = ResultsBuilder(root, campaign="t")
    b.groups = {g.id: g for g in exp.groups}
    b.cells = {c.id: c for c in exp.cells}
    b.ready("sim.ar.tp1")
    for c in exp.cells_of("sim.ar.tp1"):
        b.finished(c.id, [request_row()])
    b.group_done("sim.ar.tp1")
    t = b.now()
    b.events += [
        GroupStarted(group="sim.dflash.tp1", host="sim", config="dflash", tp=1, ts=t + 1),
        ServiceFailed(group="sim.dflash.tp1", reason="exited during start-up", ts=t + 4),
        GroupFinished(group="sim.dflash.tp1", status="failed", ts=t + 4),
    ]
    return b.write(plan=plan_text)


def _estimate(tmp_path: Path, earlier: Path, plan_text: str = PLAN) -> tuple[Expansion, Estimate]:
    path = tmp_path / "plan-now.toml"
    path.write_text(plan_text)
    plan = load_plan(path)
    exp = expand(plan)
    speed = host_speeds(plan.spec, sim=False)
    measured = load_measured(earlier)
    return exp, estimate(
        plan.spec, plan.prompts, exp.groups, exp.cells, speed=speed, measured=measured
    )


def test_an_earlier_run_gives_what_it_measured_in_real_seconds(tmp_path: Path) -> None:
    m = load_measured(_results(tmp_path / "t"))
    assert m is not None and len(m.cells) == 2
    assert all(c.seconds == pytest.approx(10 * SPEED) for c in m.cells)  # x50: real seconds
    groups = {g.id: g for g in m.groups}
    ar, dflash = groups["sim.ar.tp1"], groups["sim.dflash.tp1"]
    assert ar.startup_s == pytest.approx(10 * SPEED) and ar.tail_s == pytest.approx(30 * SPEED)
    assert ar.failed_s is None and dflash.startup_s is None
    assert dflash.failed_s == pytest.approx(3 * SPEED)


def test_cells_measured_before_are_estimated_at_what_they_took(tmp_path: Path) -> None:
    exp, est = _estimate(tmp_path, _results(tmp_path / "t"))
    for c in exp.cells_of("sim.ar.tp1"):
        assert est.per_cell_s[c.id] == pytest.approx(10.0)
    assert est.group_startup_s["sim.ar.tp1"] == pytest.approx(10.0)
    assert est.group_tail_s["sim.ar.tp1"] == pytest.approx(30.0)
    # the group that failed to start with the same command fails again, at its time to fail
    assert est.group_startup_s["sim.dflash.tp1"] == pytest.approx(3.0)
    assert all(est.per_cell_s[c.id] == 0 for c in exp.cells_of("sim.dflash.tp1"))
    assert est.end_s == pytest.approx(6.0)
    assert est.total_s == pytest.approx(10 + 2 * 10 + 30 + 3 + 6)  # one group after the other
    said = "\n".join(est.assumptions)
    assert f"measured (from {tmp_path / 't'}, 2 cells)" in said
    assert "failing to start again, as they did there with the same command: sim.dflash.tp1" in said
    assert "speculative configs x2.5: assumed (default)" in said
    assert est.spread > 0 and est.measured_from == str(tmp_path / "t")


def test_a_fixed_config_is_estimated_like_any_and_borrows_its_ratio(tmp_path: Path) -> None:
    earlier = _results(tmp_path / "t")
    fixed = PLAN.replace(
        '"--speculative-num-draft-tokens", "8"', '"--speculative-num-draft-tokens", "4"'
    )
    exp, est = _estimate(tmp_path, earlier, fixed)
    dflash = exp.cells_of("sim.dflash.tp1")
    assert all(est.per_cell_s[c.id] > 0 for c in dflash)
    assert est.group_startup_s["sim.dflash.tp1"] == pytest.approx(10.0)  # AR's, any group's
    assert "2 cells have no like cell there and borrow it" in "\n".join(est.assumptions)


def test_without_measurements_every_constant_says_where_it_comes_from(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(PLAN + '\n[estimate]\nstartup = "30s"\n')
    plan = load_plan(path)
    exp = expand(plan)
    est = estimate(plan.spec, plan.prompts, exp.groups, exp.cells)
    said = "\n".join(est.assumptions)
    assert "server start-up 30 s per group: assumed (the plan's [estimate])" in said
    assert "prefill 4000 tok/s: assumed (default)" in said
    assert est.measured_from == "" and est.spread == 0


def test_the_default_is_the_campaigns_newest_results_with_finished_cells(tmp_path: Path) -> None:
    results = tmp_path / "results"
    layout = ResultsLayout.for_campaign(results, "t")
    assert find_measured(layout, None, {}) is None  # nothing there yet
    aside = _results(results / "t.20260101T000000Z")  # what --fresh moved aside
    found = find_measured(layout, None, {})
    assert found is not None and found.source == aside
    own = _results(layout.root)
    found = find_measured(layout, None, {})
    assert found is not None and found.source == own  # its own directory first


def test_estimate_from_a_directory_without_finished_cells_is_refused(tmp_path: Path) -> None:
    empty = ResultsBuilder(tmp_path / "empty", campaign="t").write()
    with pytest.raises(InputError, match="no finished cell"):
        find_measured(ResultsLayout(tmp_path / "x"), empty, {})
    with pytest.raises(InputError, match="not a results directory"):
        find_measured(ResultsLayout(tmp_path / "x"), tmp_path, {})


def test_the_dry_run_says_measured_or_assumed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    earlier = _results(tmp_path / "t")
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    args = [str(plan), "--dry-run", "--results", str(tmp_path / "new")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "server start-up 150 s per group: assumed (default)" in out
    assert main([*args, "--estimate-from", str(earlier)]) == 0
    out = capsys.readouterr().out
    assert f"cell times per config, TP and workload: measured (from {earlier}, 2 cells)" in out
    assert f"server start-up per host, config and TP: measured (from {earlier}, 1 group)" in out


@pytest.mark.system
def test_a_rehearsal_prints_the_eta_and_seeds_the_next_estimate(tmp_path: Path) -> None:
    """A real ``--sim`` run: every done line ends with the ETA and its range, and the next dry
    run takes its constants from it (the campaign's own directory, by default)."""
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    cmd = [sys.executable, "-m", "specbench_tui", str(plan), "--sim", "--results", str(tmp_path)]
    run = subprocess.run([*cmd, "--headless"], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    done = [ln for ln in run.stdout.splitlines() if " done " in ln]
    assert len(done) == 4 and all(" ETA " in ln for ln in done), run.stdout
    dry = subprocess.run([*cmd, "--dry-run"], capture_output=True, text=True, cwd=ROOT)
    assert f"measured (from {tmp_path / 't-sim'}, 4 cells)" in dry.stdout, dry.stdout

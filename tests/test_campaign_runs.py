"""``[campaign] runs = N``: every group run N times with its server started afresh, cell ids
that keep run 1 as a plan without ``runs`` has it, a dry run and estimate that count the runs,
figures whose unit is the run, and ``--report A B`` that judges "beyond noise" only against
run-to-run variation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import MINIMAL_PLAN
from support.results_builder import ResultsBuilder

from specbench_tui.cli import main
from specbench_tui.engine.campaign import Campaign, CampaignOptions
from specbench_tui.plan.estimate import estimate
from specbench_tui.plan.expand import expand
from specbench_tui.plan.loader import load_plan
from specbench_tui.report import render
from specbench_tui.report.compare import build_comparison
from specbench_tui.report.frames import comparison
from specbench_tui.report.inputs import load_inputs
from specbench_tui.report.render import render_texts
from specbench_tui.results.layout import ResultsLayout

RUNS_PLAN = MINIMAL_PLAN.replace('baseline = "ar"', 'baseline = "ar"\nruns = 3').replace(
    "tp = [1]", "tp = [1, 2]"
)


def test_each_group_runs_n_times_and_run_one_keeps_its_ids(write_plan) -> None:  # type: ignore[no-untyped-def]
    once = expand(load_plan(write_plan(RUNS_PLAN.replace("runs = 3", ""), "once.toml")))
    thrice = expand(load_plan(write_plan(RUNS_PLAN, "thrice.toml")))
    assert len(thrice.groups) == 3 * len(once.groups)
    assert len(thrice.cells) == 3 * len(once.cells)
    # Every config once, then again: TP by TP, a run's configs together.
    assert [g.id for g in thrice.groups[:6]] == [
        "sim.ar.tp1",
        "sim.dflash.tp1",
        "sim.ar.tp1.r2",
        "sim.dflash.tp1.r2",
        "sim.ar.tp1.r3",
        "sim.dflash.tp1.r3",
    ]
    assert [g.run for g in thrice.groups[:6]] == [1, 1, 2, 2, 3, 3]
    # Run 1 is the plan without runs: what it finished stays finished when runs are added.
    run1 = [c.id for c in thrice.cells if c.run == 1]
    assert run1 == [c.id for c in once.cells]
    assert len({c.id for c in thrice.cells}) == len(thrice.cells)  # later runs: new ids
    for c in thrice.cells:
        assert c.group.endswith(f".r{c.run}") == (c.run > 1)


def test_the_dry_run_and_its_estimate_count_the_runs(write_plan, capsys) -> None:  # type: ignore[no-untyped-def]
    plan = RUNS_PLAN + "\n[checks]\ngreedy_equivalence = true\nstate_leak = true\n"
    once = load_plan(write_plan(plan.replace("runs = 3", ""), "once.toml"))
    thrice_path = write_plan(plan, "thrice.toml")
    thrice = load_plan(thrice_path)
    x1, x3 = expand(once), expand(thrice)
    e1 = estimate(once.spec, once.prompts, x1.groups, x1.cells)
    e3 = estimate(thrice.spec, thrice.prompts, x3.groups, x3.cells)
    assert e3.requests > 2.9 * e1.requests - 100  # the probes run in the first run only
    assert e3.total_s > 2.5 * e1.total_s
    assert main([str(thrice_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "12 server starts (3 runs: every group 3 times, a fresh server each)" in out
    assert "noise-floor probe on 2 baseline groups" in out  # ar at TP 1 and 2, run 1
    assert "state-leak probe on every group of the first run" in out
    assert main([str(thrice_path), "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["campaign"]["runs"] == 3
    assert {c["run"] for c in doc["cells"]} == {1, 2, 3}
    assert {g["run"] for g in doc["groups"]} == {1, 2, 3}


def test_runs_is_checked_like_every_key(write_plan, capsys) -> None:  # type: ignore[no-untyped-def]
    path = write_plan(RUNS_PLAN.replace("runs = 3", "runs = 0"))
    assert main([str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "campaign.runs" in err and err.count("\n") == 1


# --- figures over runs ----------------------------------------------------------------------

PLAN_TOML = '[campaign]\nname = "syn"\nbaseline = "ar"\n'


def _campaign(
    root: Path, per_run: dict[str, list[list[float]]], *, runs: int | None = None
) -> Path:
    """Single-stream cells of each config: ``per_run[config][run]`` is the decode rate of
    each repeat of that run (65 tokens, TTFT 50 ms)."""
    b = ResultsBuilder(root)
    for cfg, run_rates in per_run.items():
        for r, rates in enumerate(run_rates, start=1):
            if runs is not None and r > runs:
                break
            cid = f"{cfg}-r{r}"
            b.cell(cid, cfg, 1, "single", "single", repeats=len(rates), run=r)
            b.finished(
                cid,
                [
                    dict(
                        prompt_id="p", repeat=k, ttft_s=0.05, e2e_s=0.05 + 64 / v, output_tokens=65
                    )
                    for k, v in enumerate(rates)
                ],
            )
    return b.write(plan=PLAN_TOML)


def _rows(root: Path) -> dict[str, dict[str, Any]]:
    return {r["config"]: r for r in comparison(load_inputs(root)).to_dicts()}


# Within a run the repeats hardly move; between runs (a fresh server each) the rate does.
A_RUNS = {
    "ar": [[100.0, 100.1, 99.9], [92.0, 92.1, 91.9], [108.0, 108.1, 107.9]],
    "dflash": [[300.0, 300.2, 299.8], [276.0, 276.1, 275.9], [324.0, 324.2, 323.8]],
}


def test_the_unit_is_the_run_where_there_are_runs(tmp_path: Path) -> None:
    rows = _rows(_campaign(tmp_path / "a", A_RUNS))
    ar = rows["ar"]
    assert ar["between_runs"] and ar["n"] == 3
    assert ar["decode_tok_s"] == pytest.approx(100.0, abs=0.05)
    # The interval spans the runs (92..108), not the repeats (+-0.1).
    assert ar["decode_tok_s_hi"] - ar["decode_tok_s_lo"] > 30
    one = _rows(_campaign(tmp_path / "one", A_RUNS, runs=1))["ar"]
    assert not one["between_runs"] and one["n"] == 3  # repeats
    assert one["decode_tok_s_hi"] - one["decode_tok_s_lo"] < 1


def _verdicts(md: str, config: str) -> list[str]:
    return [x for x in md.splitlines() if x.startswith(f"| sim | {config} |")]


def test_report_a_b_calls_nothing_beyond_noise_it_knows_only_within_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two single runs of a fixed-timing server, B 11% slower: within a run the repeats are
    so tight that a t-test would call it beyond noise; nothing here knows run-to-run noise."""
    monkeypatch.setattr(render, "tex_engine", lambda: None)
    slower = {c: [[v * 0.89 for v in rates] for rates in runs] for c, runs in A_RUNS.items()}
    a = _campaign(tmp_path / "a", A_RUNS, runs=1)
    b = _campaign(tmp_path / "b", slower, runs=1)
    md, _ = render_texts(build_comparison([a, b]))
    (line,) = _verdicts(md, "dflash")
    assert "0.89x" in line and "within-run only (differs within a run)" in line
    assert "beyond noise" not in md.split("## ")[1].replace("beyond noise where", "")


def test_report_a_b_judges_against_the_variation_between_runs(tmp_path: Path) -> None:
    a = _campaign(tmp_path / "a", A_RUNS)
    # B: the same server 11% slower in every run, and one run-to-run spread as A's.
    slower = {c: [[v * 0.89 for v in rates] for rates in runs] for c, runs in A_RUNS.items()}
    md, _ = render_texts(build_comparison([a, _campaign(tmp_path / "b", slower)]))
    (line,) = _verdicts(md, "dflash")
    assert "0.89x" in line and "within noise" in line  # 11% inside an 8% run-to-run spread
    # Far slower: beyond what changes between runs.
    much = {c: [[v * 0.5 for v in rates] for rates in runs] for c, runs in A_RUNS.items()}
    md, _ = render_texts(build_comparison([a, _campaign(tmp_path / "c", much)]))
    (line,) = _verdicts(md, "dflash")
    assert "0.50x" in line and "beyond noise" in line


def test_rows_in_one_campaign_only_are_listed(tmp_path: Path) -> None:
    a = _campaign(tmp_path / "a", A_RUNS, runs=1)
    b_runs = {"ar": A_RUNS["ar"], "eagle": A_RUNS["dflash"]}
    b = _campaign(tmp_path / "b", b_runs, runs=1)
    md, _ = render_texts(build_comparison([a, b]))
    assert "Rows not compared: present in one campaign only" in md
    alone = md.split("Rows not compared")[1]
    dflash = next(x for x in alone.splitlines() if x.startswith("| sim | dflash |"))
    eagle = next(x for x in alone.splitlines() if x.startswith("| sim | eagle |"))
    assert "| A |" in dflash and "| B |" in eagle


# --- on the simulator -----------------------------------------------------------------------


def _events(root: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]


@pytest.mark.system
async def test_runs_restart_the_server_and_resume_knows_them(write_plan, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    text = MINIMAL_PLAN.replace('baseline = "ar"', 'baseline = "ar"\nruns = 2').replace(
        "samples = 2", "samples = 2\nrepeats = 2"
    )
    path = write_plan(text)

    async def run(plan_path: Path) -> tuple[int, Path]:
        plan = load_plan(plan_path)
        layout = ResultsLayout.for_campaign(tmp_path / "res", plan.spec.campaign.name)
        return await Campaign.prepare(plan, layout, CampaignOptions()).run(), layout.root

    code, root = await run(path)
    assert code == 0
    ev = _events(root)
    ready = [e["group"] for e in ev if e["event"] == "service_ready"]
    assert ready == ["sim.ar.tp1", "sim.dflash.tp1", "sim.ar.tp1.r2", "sim.dflash.tp1.r2"]
    stops = [e["group"] for e in ev if e["event"] == "group_finished"]
    assert stops == ready  # each run's server stopped before the next started
    # Each group's manifest, recorded when its server was ready, through its interpreter.
    manifest = json.loads((root / "manifest.json").read_text())["groups"]
    assert sorted(manifest) == sorted(ready)
    for gid, entry in manifest.items():
        assert entry["run"] == (2 if gid.endswith(".r2") else 1)
        assert entry["plan_hash"] and entry["tool"]["version"]
        gpus = entry["probe"]["gpus"]
        assert gpus["source"] == "nvml" and gpus["devices"][0]["power_limit_w"] == 600.0
    rows = {r["config"]: r for r in comparison(load_inputs(root)).to_dicts()}
    assert rows["dflash"]["between_runs"] and rows["dflash"]["n"] == 2
    cells = pl.read_parquet(root / "cells.parquet")
    assert sorted(cells["run"].to_list()) == [1, 1, 2, 2] and set(cells["status"]) == {"done"}
    # The same plan again: everything is finished, nothing runs.
    started = sum(e["event"] == "cell_started" for e in ev)
    assert (await run(path))[0] == 0
    assert sum(e["event"] == "cell_started" for e in _events(root)) == started
    # A third run: only its cells run; the first two stay as they were.
    code, _ = await run(write_plan(text.replace("runs = 2", "runs = 3"), "plan3.toml"))
    assert code == 0
    new = [e for e in _events(root)[len(ev) :] if e["event"] == "cell_started"]
    assert {e["group"] for e in new} == {"sim.ar.tp1.r3", "sim.dflash.tp1.r3"}

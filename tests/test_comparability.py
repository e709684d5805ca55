"""The comparability audit: a speed-up holds only between like and like (report/comparability.py),
and every comparison the report makes is in comparisons.parquet with its audit."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import MINIMAL_PLAN

from specbench_tui.engine.campaign import Campaign, CampaignOptions
from specbench_tui.errors import InputError
from specbench_tui.plan.expand import expand
from specbench_tui.plan.loader import load_plan
from specbench_tui.report.build import build_report
from specbench_tui.report.comparability import Audit
from specbench_tui.report.comparisons import (
    ENERGY_RATIO,
    SPEEDUP,
    comparisons,
    write_comparisons,
)
from specbench_tui.report.frames import NOT_COMPARABLE_MARK, comparison
from specbench_tui.report.inputs import load_inputs
from specbench_tui.report.render import render_texts
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.tui import results_source
from tests.support.results_builder import ResultsBuilder

PLAN = '[campaign]\nname = "syn"\nbaseline = "ar"\n'
SGLANG_INFO = Path(__file__).parent / "fixtures" / "sglang-0.5.23-cpu" / "ar" / "server_info.json"


def _campaign(
    tmp_path: Path,
    *,
    ar_figures: dict[str, Any] | None = None,
    ng_figures: dict[str, Any] | None = None,
    settings: tuple[dict[str, Any], dict[str, Any]] | None = None,
) -> Path:
    """ar and ngram on one host, two repeats of two prompts; ngram accepts 2 tokens a step
    and decodes 1.8x faster: a plausible speed-up, which only the conditions can spoil."""
    b = ResultsBuilder(tmp_path / "syn")
    b.cell("ar-chat", "ar", 1, "single", "single")
    b.cell("ng-chat", "ngram", 1, "single", "single")
    ar = [
        {"prompt_id": f"p{i}", "repeat": r, "e2e_s": 1.8 + 0.05 * i + 0.02 * r}
        for r in (0, 1)
        for i in range(2)
    ]
    ng = [
        {
            "prompt_id": f"p{i}",
            "repeat": r,
            "e2e_s": 1.0 + 0.01 * i + 0.005 * r,
            "spec_verify_ct": 32,
            "accept_length": 2.0,
            "spec_accepted_tokens": 32,
            "spec_draft_tokens": 96,
        }
        for r in (0, 1)
        for i in range(2)
    ]
    b.finished("ar-chat", ar, figures=ar_figures)
    b.finished("ng-chat", ng, figures=ng_figures)
    root = b.write(plan=PLAN)
    if settings is not None:
        groups = {
            f"sim.{cfg}.tp1": {"host": "sim", "config": cfg, "tp": 1, "settings": s}
            for cfg, s in zip(("ar", "ngram"), settings, strict=True)
        }
        (root / "manifest.json").write_text(json.dumps({"manifest": 1, "groups": groups}))
    return root


def _ngram(root: Path) -> dict[str, Any]:
    return next(r for r in comparison(load_inputs(root)).to_dicts() if r["config"] == "ngram")


def _report_row(root: Path) -> str:
    md, _ = render_texts(build_report(root))
    return next(ln for ln in md.splitlines() if ln.startswith("| ngram |"))


def test_alike_conditions_compare_and_the_best_is_named(tmp_path: Path) -> None:
    load = {"host_load_per_cpu": 0.3, "gpu_sm_clock_mhz": 1980.0, "gpu_power_limit_w": 700.0}
    info = json.loads(SGLANG_INFO.read_text())
    spec = {**info, "speculative_algorithm": "NGRAM", "random_seed": 7, "port": 30001}
    root = _campaign(tmp_path, ar_figures=load, ng_figures=load, settings=(info, spec))
    ng = _ngram(root)
    assert ng["comparable"] is True and ng["why"] is None and ng["best"]
    assert NOT_COMPARABLE_MARK not in _report_row(root)


def test_one_differing_server_argument_is_named(tmp_path: Path) -> None:
    # A real SGLang server's settings; the speculative one turned overlap scheduling off.
    info = json.loads(SGLANG_INFO.read_text())
    spec = {
        **info,
        "speculative_algorithm": "NGRAM",
        "disable_overlap_schedule": not info["disable_overlap_schedule"],
    }
    root = _campaign(tmp_path, settings=(info, spec))
    ng = _ngram(root)
    assert ng["comparable"] is False and not ng["best"]
    assert "disable_overlap_schedule" in ng["why"], ng["why"]
    assert "speculative_algorithm" not in ng["why"]
    assert NOT_COMPARABLE_MARK in _report_row(root)
    shown = [r for r in results_source.comparison(root).to_dicts() if r["config"] == "ngram"]
    assert shown and all("disable_overlap_schedule" in (r["why"] or "") for r in shown)
    md, _ = render_texts(build_report(root))
    section = md[md.index("## Comparability") :].split("\n## ")[0]
    assert "0 of 1 comparisons hold" in section and "disable\\_overlap\\_schedule" in section


def test_a_baseline_measured_under_a_cpu_load_the_config_did_not_have(tmp_path: Path) -> None:
    root = _campaign(
        tmp_path, ar_figures={"host_load_per_cpu": 20.0}, ng_figures={"host_load_per_cpu": 0.4}
    )
    ng = _ngram(root)
    assert ng["comparable"] is False
    assert "host load per CPU 0.40 against the baseline's 20.00" in ng["why"]


def test_load_within_the_tolerance_is_alike(tmp_path: Path) -> None:
    # 0.20 and 0.40 per CPU: within LOAD_GAP (0.25, half the load step measured to matter).
    root = _campaign(
        tmp_path, ar_figures={"host_load_per_cpu": 0.2}, ng_figures={"host_load_per_cpu": 0.4}
    )
    assert _ngram(root)["comparable"] is True
    # 0.2 and 0.5: one busy process on a two-core host, which cut a real vLLM's rate to 0.29.
    root = _campaign(
        tmp_path / "b", ar_figures={"host_load_per_cpu": 0.2}, ng_figures={"host_load_per_cpu": 0.5}
    )
    assert "host load per CPU 0.50 against the baseline's 0.20" in _ngram(root)["why"]


def test_gpu_conditions_that_differ(tmp_path: Path) -> None:
    root = _campaign(
        tmp_path,
        ar_figures={"gpu_sm_clock_mhz": 1980.0, "gpu_power_limit_w": 700.0, "gpu_throttle_mask": 0},
        ng_figures={
            "gpu_sm_clock_mhz": 1500.0,
            "gpu_power_limit_w": 500.0,
            "gpu_throttle_mask": 0x20,
            "gpu_foreign_processes": 1,
        },
    )
    why = _ngram(root)["why"]
    assert "SM clock 1500 MHz against the baseline's 1980 MHz" in why
    assert "power limit 500 W against the baseline's 700 W" in why
    assert "throttling: thermal (software), the baseline: none" in why
    assert "a process other than the servers held the GPUs" in why


def test_a_side_whose_own_draw_hit_the_power_cap_is_alike(tmp_path: Path) -> None:
    # Under one power limit, the config that draws more is capped and clocks lower: its own
    # nature (an H100 under a dense load: 1357 MHz at 698 W of 700, tests/fixtures/
    # nvml-h100-conditions), not a difference in its surroundings.
    base = {"gpu_sm_clock_mhz": 1980.0, "gpu_power_limit_w": 700.0, "gpu_throttle_mask": 0}
    capped = {"gpu_sm_clock_mhz": 1357.5, "gpu_power_limit_w": 700.0, "gpu_throttle_mask": 0x4}
    root = _campaign(tmp_path, ar_figures=base, ng_figures=capped)
    assert _ngram(root)["comparable"] is True


def test_client_lag_on_one_side_only(tmp_path: Path) -> None:
    root = _campaign(tmp_path, ar_figures={"client_lagged": True}, ng_figures={})
    assert "the client lagged in 1 of 1 of the baseline's cells only" in _ngram(root)["why"]


def test_comparisons_parquet_holds_every_comparison_with_its_audit(tmp_path: Path) -> None:
    root = _campaign(
        tmp_path,
        ar_figures={"host_load_per_cpu": 20.0},
        ng_figures={"host_load_per_cpu": 0.4},
    )
    inp = load_inputs(root)
    path = write_comparisons(root, inp)
    got = pl.read_parquet(path)
    assert got.columns[:3] == ["host", "config", "baseline"]
    for col in ("tp", "workload", "level", "temperature", "figure", "ratio", "lo", "hi"):
        assert col in got.columns
    row = got.row(0, named=True)
    assert (row["config"], row["baseline"], row["figure"]) == ("ngram", "ar", SPEEDUP)
    assert row["comparable"] is False and "host load" in row["why"]
    assert row["ratio"] == _ngram(root)["speedup"]
    assert row["temperature"] == 0.0
    assert ENERGY_RATIO not in got["figure"].to_list()  # no energy was measured


# --- a simulated campaign ---------------------------------------------------------------------


@pytest.mark.system
async def test_a_simulated_server_started_with_one_more_argument(write_plan, tmp_path) -> None:
    """The speculative config's server also gets ``--attention-backend triton``: the engine
    says so when the second server is ready, and the report marks its speed-up, naming it.
    Every cell records the host's CPU conditions, read at its edges."""
    plan = MINIMAL_PLAN.replace(
        '"--speculative-num-draft-tokens", "8"]',
        '"--speculative-num-draft-tokens", "8", "--attention-backend", "triton"]',
    )
    loaded = load_plan(write_plan(plan))
    layout = ResultsLayout.for_campaign(tmp_path, loaded.spec.campaign.name)
    c = Campaign.prepare(loaded, layout, CampaignOptions())
    assert await c.run() == 0
    notices = [
        json.loads(line)
        for line in layout.events.read_text().splitlines()
        if '"notice"' in line and "server settings differ" in line
    ]
    assert len(notices) == 1, notices
    assert "attention_backend: 'triton' vs default" in notices[0]["text"]
    manifest = json.loads(layout.manifest.read_text())["groups"]
    assert manifest["sim.dflash.tp1"]["settings"]["attention_backend"] == "triton"
    assert manifest["sim.ar.tp1"]["settings_source"] == "/server_info"
    chat = manifest["sim.ar.tp1"]["prompt_files"]["chat"]
    assert chat["sha256"] == hashlib.sha256(Path(chat["path"]).read_bytes()).hexdigest()
    assert Path(chat["path"]).name == "chat.jsonl"
    row = next(
        r for r in comparison(load_inputs(layout.root)).to_dicts() if r["config"] == "dflash"
    )
    assert row["comparable"] is False and "attention_backend" in row["why"], row["why"]
    cells = pl.read_parquet(layout.cells)
    assert cells["host_load_per_cpu"].null_count() == 0
    assert cells["host_cpu_busy"].is_between(0, 1).all()


@pytest.mark.system
def test_the_headless_line_says_when_a_finished_group_is_not_like_its_baseline(
    write_plan, tmp_path
) -> None:
    """Run as a user would (``--headless``): once the speculative group ends, one line says
    its speed-up is not like with like and why, before the campaign's last line; it lands in
    the event log as a warning, which is also the console's toast."""
    plan = write_plan(
        MINIMAL_PLAN.replace(
            '"--speculative-num-draft-tokens", "8"]',
            '"--speculative-num-draft-tokens", "8", "--attention-backend", "triton"]',
        )
    )
    argv = [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--sim"]
    proc = subprocess.run(
        [*argv, "--results", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).parent.parent,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    lines = proc.stdout.splitlines()
    said = [i for i, line in enumerate(lines) if "not like with like" in line]
    assert len(said) == 1, proc.stdout
    line = lines[said[0]]
    assert "dflash against ar at TP 1 on sim, speed-up not comparable: single" in line, line
    assert "attention_backend: 'triton' vs default" in line, line
    done = [i for i, line in enumerate(lines) if "group sim.dflash.tp1" in line]
    finished = next(i for i, line in enumerate(lines) if " finished " in line)
    assert done and said[0] < finished, proc.stdout
    events = ResultsLayout.for_campaign(tmp_path / "out", "t", sim=True).events.read_text()
    warned = [json.loads(e) for e in events.splitlines() if "not like with like" in e]
    assert [e["level"] for e in warned] == ["warning"]


# The baseline has a long workload of its own, first, so its server is measuring while the
# speculative group's packed cells run: they always run beside a busy neighbour. Their
# control then runs on the same server with no other group measuring.
PACKED = (
    MINIMAL_PLAN.replace('baseline = "ar"', 'baseline = "ar"\npack = true\ninterference_check = 1')
    # Warm-up requests first: the measured requests start once both servers measure.
    .replace("samples = 2", "samples = 2\nrepeats = 3\nwarmup = 2")
    .replace(
        '"--speculative-num-draft-tokens", "8"]',
        '"--speculative-num-draft-tokens", "8", "--sim-fault", "neighbours:{slow}"]',
    )
    + '\n[workloads.long]\nkind = "single"\nconfigs = ["ar"]\nprompts = ["chat"]\n'
    "samples = 4\nrepeats = 10\nmax_tokens = [256]\n"
)


async def _packed(write_plan, tmp_path: Path, slow: float) -> dict[str, Any]:
    loaded = load_plan(write_plan(PACKED.replace("{slow}", str(slow))))
    assert [g.id for g in expand(loaded).groups if g.exclusive] == [
        "sim.ar.tp1.solo",
        "sim.dflash.tp1.solo",
    ]
    layout = ResultsLayout.for_campaign(tmp_path, loaded.spec.campaign.name)
    c = Campaign.prepare(loaded, layout, CampaignOptions())
    assert await c.run() == 0
    inp = load_inputs(layout.root)
    rows = comparison(inp).to_dicts()
    return {"row": next(r for r in rows if r["config"] == "dflash"), "inp": inp}


@pytest.mark.system
async def test_a_packed_campaign_measures_what_packing_did(write_plan, tmp_path) -> None:
    """interference_check = 1 runs one cell of each packed group again alone, on the same
    server once no other group measures; where the simulator slows a server beside a busy
    one (``neighbours:10``), the packed speed-up is not
    comparable and says by how much packing changed the config's rate. The baseline's long
    workload outlasts the slowed cells, so every packed request runs beside it: a cell that
    outlived its neighbour had its last repeats fast, and Welch's test (three repeats a side)
    then called the change noise on a loaded machine."""
    got = await _packed(write_plan, tmp_path, 10.0)
    row = got["row"]
    assert row["packed"] and row["comparable"] is False, row["why"]
    said = re.search(r"packing changed its decode rate: packed over alone ([0-9.]+)x", row["why"])
    assert said and float(said.group(1)) < 0.6, row["why"]
    md, _ = render_texts(build_report(got["inp"].root))
    assert "## Packing" in md and "## Comparability" in md


def test_packing_within_noise_leaves_the_comparison_alike(tmp_path: Path) -> None:
    """Only a packing effect told apart from noise spoils a packed comparison."""
    root = _campaign(tmp_path)
    inp = load_inputs(root)
    key = {"host": "sim", "tp": 1, "kind": "single", "workload": "single", "concurrency": 0}
    row = {**key, "ratio": 0.97, "ratio_lo": 0.9, "ratio_hi": 1.05, "ratio_too_few": False}
    for differs, said in ((False, []), (True, ["packing changed its decode rate"])):
        packing = pl.DataFrame([{**row, "config": "ngram", "differs": differs}])
        audit = Audit(inp, pl.DataFrame(), set(), packing)
        got = audit._packing_why({**key, "config": "ngram"}, "ar", True, True)
        assert [g.split(":")[0] for g in got] == said


CONTROLLED = MINIMAL_PLAN.replace(
    '[matrix]\nconfigs = ["ar", "dflash"]',
    '[configs.dflash-nooverlap]\nargs = ["--speculative-algorithm", "DFLASH", '
    '"--speculative-num-draft-tokens", "8", "--disable-overlap-schedule"]\n\n'
    '[configs.ddtree]\ncontrol = "dflash-nooverlap"\nargs = ["--speculative-algorithm", '
    '"DDTREE", "--speculative-ddtree-budget", "16", "--disable-overlap-schedule"]\n\n'
    '[matrix]\nconfigs = ["ar", "dflash-nooverlap", "ddtree"]',
)


@pytest.mark.system
async def test_a_setting_that_must_differ_is_compared_against_its_control(
    write_plan, tmp_path
) -> None:
    """DDTree runs without overlap scheduling: against the baseline that is a difference in
    settings, named; against its control (DFlash with the same constraint) it is alike."""
    loaded = load_plan(write_plan(CONTROLLED))
    layout = ResultsLayout.for_campaign(tmp_path, loaded.spec.campaign.name)
    c = Campaign.prepare(loaded, layout, CampaignOptions())
    assert await c.run() == 0
    inp = load_inputs(layout.root)
    got = {(r["config"], r["baseline"]): r for r in comparisons(inp).to_dicts()}
    against_base = got[("ddtree", "ar")]
    assert against_base["comparable"] is False
    assert "disable_overlap_schedule: True vs default" in against_base["why"]
    against_control = got[("ddtree", "dflash-nooverlap")]
    assert "server settings" not in (against_control["why"] or ""), against_control["why"]
    assert against_control["ratio"] > 0 and against_control["figure"] == SPEEDUP
    md, _ = render_texts(build_report(layout.root))
    assert "Speed-up over each config's control" in md


def test_a_control_must_be_another_config_of_the_matrix(write_plan) -> None:
    bad = CONTROLLED.replace('control = "dflash-nooverlap"', 'control = "nope"')
    with pytest.raises(InputError, match=r"control 'nope' is not in matrix\.configs"):
        load_plan(write_plan(bad))
    selfish = CONTROLLED.replace('control = "dflash-nooverlap"', 'control = "ddtree"')
    with pytest.raises(InputError, match="control 'ddtree' is the config itself"):
        load_plan(write_plan(selfish))

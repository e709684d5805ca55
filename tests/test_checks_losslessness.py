"""Losslessness checks: token-level divergence, the noise floor, the state-leak probe and a
verdict that gates (exit status 1, failed-check cells), on pure data and on simulated
campaigns with a lossy config and with state that leaks after a long request."""

from __future__ import annotations

import hashlib
from pathlib import Path

import polars as pl
import pytest
from conftest import MINIMAL_PLAN

from specbench_tui.bench.greedy import (
    FIRST_TOKENS,
    Finding,
    Output,
    Sample,
    first_divergence,
    greedy_verdict,
    leak_verdict,
)
from specbench_tui.bench.prompting import DEFAULT_PROMPTING
from specbench_tui.engine.campaign import Campaign, CampaignOptions
from specbench_tui.plan.loader import load_plan
from specbench_tui.plan.prompt_sets import load_named_set, sample_prompts
from specbench_tui.report.build import build_report
from specbench_tui.report.render import render_texts
from specbench_tui.results.cells import Cell
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.sim.textgen import prompt_seed

# --- pure ---------------------------------------------------------------------------------


def test_first_divergence_by_tokens_text_and_prefix() -> None:
    a = Output(" a b c d", (1, 2, 3, 4))
    assert first_divergence(a, Output(" a b c d", (1, 2, 3, 4))) is None
    d = first_divergence(a, Output(" a b x d", (1, 2, 9, 4)))
    assert d is not None and d.token == 2 and d.position == 2
    # Cut at another max_tokens: the common prefix is what counts.
    assert first_divergence(a, Output(" a b", (1, 2)), prefix=True) is None
    assert first_divergence(a, Output(" a b", (1, 2))) is not None
    t = first_divergence(Output(" one two three"), Output(" one two four"))
    assert t is not None and t.token is None and t.word == 2


def _cell(config: str, kind: str = "single", max_tokens: int = 64) -> Cell:
    return Cell.from_json(
        {
            "id": f"{config}-{kind}-{max_tokens}",
            "name": f"h.{config}.tp1/w",
            "config": config,
            "tp": 1,
            "kind": kind,
            "workload": "w",
            "prompt_set": "chat",
            "max_tokens": max_tokens,
        }
    )


def _finding(config: str, pos: int | None, kind: str = "single") -> Finding:
    base = Output(" w" * 64, tuple(range(64)))
    ids = list(range(64))
    if pos is not None:
        ids[pos] = -1
    ours = Sample(_cell(config, kind), "p#0", "chat/p", 0, Output(" w" * 64, tuple(ids)))
    theirs = Sample(_cell("ar"), "p#0", "chat/p", 0, base)
    return Finding(ours, theirs, first_divergence(ours.output, theirs.output))


def test_verdicts_pass_fail_and_noise() -> None:
    assert greedy_verdict("x", "ar", [_finding("x", None)], []).status == "pass"
    early = greedy_verdict("x", "ar", [_finding("x", 3)], [_finding("ar", 40)])
    assert early.status == "fail" and "from the first tokens" in early.text
    assert early.detail["first"]["token"] == 3
    # Late, and no earlier than the baseline differs from itself: numerics.
    late = greedy_verdict("x", "ar", [_finding("x", 50)], [_finding("ar", 40, "concurrency")])
    assert late.status == "noise" and "own noise" in late.text and "deterministic" in late.text
    # Late, but the baseline never differs from itself: broken all the same.
    clean = greedy_verdict("x", "ar", [_finding("x", 50)], [_finding("ar", None)])
    assert clean.status == "fail" and "never differed from itself" in clean.text
    blind = greedy_verdict("x", "ar", [_finding("x", 50)], [])
    assert blind.status == "fail" and "no noise floor was measured" in blind.text
    assert FIRST_TOKENS > 3


def test_leak_verdict() -> None:
    same = Output(" a b c", (1, 2, 3))
    assert leak_verdict("x", same, same, same).status == "pass"
    v = leak_verdict("x", same, same, Output(" a q c", (1, 7, 3)))
    assert v.status == "fail" and "after a long unrelated request" in v.text and "token 1" in v.text


# --- on the simulator -----------------------------------------------------------------------

PLAN = (
    MINIMAL_PLAN.replace("samples = 2", "samples = 3\nrepeats = 2")
    .replace("[workloads.single]", "[checks]\ngreedy_equivalence = true\n\n[workloads.single]")
    .replace("max_tokens = [32]", "max_tokens = [64]")
)


async def _run(path: Path, tmp_path: Path) -> tuple[Campaign, int]:
    plan = load_plan(path)
    layout = ResultsLayout.for_campaign(tmp_path, plan.spec.campaign.name)
    c = Campaign.prepare(plan, layout, CampaignOptions())
    return c, await c.run()


def _diverge_at(plan_path: Path) -> dict[str, int]:
    """Where the simulator's ``diverge`` fault switches words, per chat prompt it will see."""
    prompts = sample_prompts(load_named_set("chat", plan_path.parent), 3, 0)
    out = {}
    for p in prompts:
        text = DEFAULT_PROMPTING.text(p.messages())
        out[f"chat/{p.id}"] = 8 + hashlib.sha256(text.encode()).digest()[12] % 40
    return out


@pytest.mark.system
async def test_a_lossy_config_fails_at_the_right_token_and_gates(write_plan, tmp_path) -> None:
    path = write_plan(PLAN.replace('"8"]', '"8", "--sim-fault", "diverge"]'))
    c, code = await _run(path, tmp_path)
    assert code == 1  # every cell done, yet the campaign fails: dflash is lossy
    assert c.state.counts.failed == 0
    verdict = c.state.checks[("greedy", "sim", "dflash", 1)]
    assert verdict.status == "fail"
    expected = _diverge_at(path)
    first = verdict.detail["first"]
    assert first["position"] == min(expected.values())
    assert first["position"] == expected[first["prompt"]]
    assert all(cell.failed_check for cell in c.state.cells.values() if cell.config == "dflash")
    assert not any(cell.failed_check for cell in c.state.cells.values() if cell.config == "ar")
    cells = pl.read_parquet(c.layout.cells)
    checks = dict(zip(cells["config"], cells["check"], strict=True))
    assert checks["ar"] is None and "dflash" in checks["dflash"]


@pytest.mark.system
async def test_no_fault_every_config_passes(write_plan, tmp_path) -> None:
    c, code = await _run(write_plan(PLAN), tmp_path)
    assert code == 0
    verdict = c.state.checks[("greedy", "sim", "dflash", 1)]
    assert verdict.status == "pass" and verdict.detail["compared"] == 6
    # The baseline's repeats against its first run, and the floor probe: 2 prompts again alone
    # and batched 4 at a time.
    assert verdict.detail["floor_compared"] == 9
    assert verdict.detail["floor_sources"] == {"repeats and batches": 3, "probe": 6}
    probe = c.state.checks[("noise_floor", "sim", "ar", 1)]
    assert probe.status == "pass" and probe.detail["requests"] == 8


@pytest.mark.system
async def test_state_that_leaks_after_a_long_request_is_found(write_plan, tmp_path) -> None:
    text = PLAN.replace('"8"]', '"8", "--sim-fault", "leak:1000"]').replace(
        "greedy_equivalence = true", "greedy_equivalence = true\nstate_leak = true"
    )
    path = write_plan(text)
    c, code = await _run(path, tmp_path)
    assert code == 1
    leak = c.state.checks[("state_leak", "sim", "dflash", 1)]
    assert leak.status == "fail" and "after a long unrelated request" in leak.text
    assert leak.detail["alone"] != leak.detail["after_long"]
    # The simulator's leak poisons the request after the long one from token 4 + seed % 12 of
    # its prompt: the probe prompt (the first workload's first prompt), as the server sees it.
    probe = sample_prompts(load_named_set("chat", path.parent), 1, 0)[0]
    expected = 4 + prompt_seed(DEFAULT_PROMPTING.text(probe.messages())) % 12
    assert leak.detail["divergence"]["token"] == expected
    assert f"at token {expected}:" in leak.text
    md, _ = render_texts(build_report(c.layout.root))
    assert "State leak in dflash at TP 1" in md
    assert c.state.checks[("state_leak", "sim", "ar", 1)].status == "pass"
    # Short prompts never follow a long request in the cells: the greedy check passes.
    assert c.state.checks[("greedy", "sim", "dflash", 1)].status == "pass"

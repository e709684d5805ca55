"""The greedy check's noise floor and its comparisons across TP sizes: one row per divergent
prompt, the floor probe (so a plan with no repeats and no concurrency still has a floor), a
config judged against its own outputs at another TP size, and agentic turns compared; on pure
data and on simulated campaigns."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from conftest import MINIMAL_PLAN

from specbench_tui.bench.greedy import (
    FIRST_TOKENS,
    Finding,
    Floor,
    Output,
    Sample,
    config_verdicts,
    first_divergence,
    floor_probe_verdict,
    greedy_verdict,
)
from specbench_tui.bench.prompting import DEFAULT_PROMPTING
from specbench_tui.engine.campaign import Campaign, CampaignOptions
from specbench_tui.errors import InputError
from specbench_tui.plan.loader import load_plan
from specbench_tui.plan.prompt_sets import load_named_set, sample_prompts
from specbench_tui.report.build import build_report
from specbench_tui.report.render import render_texts
from specbench_tui.results.cells import Cell
from specbench_tui.results.layout import ResultsLayout

# --- pure ---------------------------------------------------------------------------------

N = 64


def _cell(config: str, tp: int = 1, max_tokens: int = N, kind: str = "single") -> Cell:
    return Cell.from_json(
        {
            "id": f"{config}-{tp}-{kind}-{max_tokens}",
            "name": f"h.{config}.tp{tp}/w{max_tokens}",
            "config": config,
            "tp": tp,
            "kind": kind,
            "workload": "w",
            "prompt_set": "chat",
            "max_tokens": max_tokens,
        }
    )


def _out(at: int | None = None, n: int = N) -> Output:
    ids = list(range(n))
    if at is not None:
        ids[at:] = [-1] * (n - at)
    return Output(" w" * n, tuple(ids))


def _sample(config: str, prompt: str, at: int | None = None, tp: int = 1, **kw: int) -> Sample:
    return Sample(_cell(config, tp, **kw), f"{prompt}#0", f"chat/{prompt}", 0, _out(at))


def _find(ours: Sample, theirs: Sample) -> Finding:
    return Finding(ours, theirs, first_divergence(ours.output, theirs.output, prefix=True))


def test_divergent_rows_one_per_prompt_earliest_first_counts_kept() -> None:
    base = {p: _sample("ar", p) for p in ("a", "b")}
    # Prompt "a" diverges in two cells (another max_tokens), "b" in one; one more is equal.
    findings = [
        _find(_sample("x", "a", 30), base["a"]),
        _find(_sample("x", "a", 20, max_tokens=32), base["a"]),
        _find(_sample("x", "b", 25), base["b"]),
        _find(_sample("x", "b", max_tokens=32), base["b"]),
    ]
    v = greedy_verdict("x", "ar", findings, [])
    assert v is not None and v.status == "fail"
    assert v.detail["compared"] == 4 and v.detail["diverged"] == 3
    rows = v.detail["divergent"]
    assert [(r["prompt"], r["token"]) for r in rows] == [("chat/a", 20), ("chat/b", 25)]
    assert v.detail["first"]["token"] == 20
    assert "3 of 4 outputs (2 distinct)" in v.text


def test_the_floor_probe_gives_a_floor_and_says_within_or_beyond_noise() -> None:
    same = _out()
    quiet = floor_probe_verdict("ar", ["chat/a", "chat/b"], [same, same], [same, same], [same] * 4)
    assert quiet.status == "pass" and quiet.detail["compared"] == 6
    assert quiet.detail["requests"] == 8 and quiet.detail["first"] is None
    # Batched, the baseline differs from itself from token 30.
    noisy = floor_probe_verdict("ar", ["chat/a"], [same], [same], [same, _out(30)])
    assert noisy.status == "noise" and noisy.detail["first"] == 30
    assert noisy.detail["findings"][0]["how"] == "batched"

    late = [_find(_sample("x", "a", 40), _sample("ar", "a"))]
    within = greedy_verdict("x", "ar", late, Floor.from_probe(noisy.detail))
    assert (
        within is not None and within.status == "noise" and "within ar's own noise" in within.text
    )
    beyond = greedy_verdict("x", "ar", late, Floor.from_probe(quiet.detail))
    assert beyond is not None and beyond.status == "fail"
    assert "beyond ar's own noise" in beyond.text and "6 self-comparisons" in beyond.text
    earlier = [_find(_sample("x", "a", 20), _sample("ar", "a"))]
    v = greedy_verdict("x", "ar", earlier, Floor.from_probe(noisy.detail))
    assert v is not None and v.status == "fail" and "beyond ar's own noise" in v.text
    assert v.detail["floor_sources"] == {"probe": 3}


def _samples(**outs: dict[int, list[Sample]]) -> dict[tuple[str, int], list[Sample]]:
    return {(config, tp): got for config, by_tp in outs.items() for tp, got in by_tp.items()}


def test_a_config_that_diverges_across_tp_sizes_fails_where_it_differs() -> None:
    # The baseline ran at TP 1 only; x matches it there, and differs from itself at TP 2.
    samples = _samples(
        ar={1: [_sample("ar", "a")]},
        x={1: [_sample("x", "a")], 2: [_sample("x", "a", 5, tp=2)]},
    )
    ((c1, v1),) = config_verdicts("ar", samples, 1)
    assert c1 == "x" and v1.status == "pass"
    assert v1.detail["across_tp"]["2"]["first"] == 5
    assert v1.detail["across_tp"]["2"]["counted"] is False  # TP 1 matched the baseline
    ((_, v2),) = config_verdicts("ar", samples, 2)
    assert v2.status == "fail" and v2.detail["compared"] == 0
    assert v2.detail["first"]["token"] == 5
    assert "differ from its own at TP 1" in v2.text and "from the first tokens" in v2.text
    # No baseline at TP 2: its floor is the baseline's at the TP sizes it ran at.
    probe = {"compared": 6, "diverged": 0, "first": None}
    ((_, v2),) = config_verdicts("ar", samples, 2, {1: probe})
    assert v2.status == "fail" and v2.detail["floor_sources"] == {"probe": 6}
    # While the baseline's TP 2 cells are still to run, there is no verdict at TP 2 yet.
    assert config_verdicts("ar", samples, 2, settled={1}) == []


def test_the_baseline_across_tp_sizes_is_part_of_the_floor() -> None:
    # The baseline itself differs between TP 1 and TP 2 from token 30.
    ar = {1: [_sample("ar", "a")], 2: [_sample("ar", "a", 30, tp=2)]}
    within = _samples(ar=ar, x={1: [_sample("x", "a", 40)], 2: [_sample("x", "a", 30, tp=2)]})
    ((_, v),) = config_verdicts("ar", within, 1)
    assert v.status == "noise" and v.detail["noise_floor"] == 30
    assert v.detail["floor_sources"] == {"TP 1 vs TP 2": 1}
    assert v.detail["across_tp"]["2"]["status"] == "noise"
    beyond = _samples(ar=ar, x={1: [_sample("x", "a", 20)], 2: [_sample("x", "a", 30, tp=2)]})
    ((_, v),) = config_verdicts("ar", beyond, 1)
    assert v.status == "fail" and "earlier" not in v.text and "from token 30" in v.text
    assert FIRST_TOKENS <= 20
    # A TP size that fails against its own baseline explains the divergence across TP sizes:
    # the other TP size is not blamed for it.
    ar_same = {1: [_sample("ar", "a")], 2: [_sample("ar", "a", tp=2)]}
    broken2 = _samples(ar=ar_same, x={1: [_sample("x", "a")], 2: [_sample("x", "a", 3, tp=2)]})
    verdicts = {tp: config_verdicts("ar", broken2, tp)[0][1].status for tp in (1, 2)}
    assert verdicts == {1: "pass", 2: "fail"}


# --- on the simulator -----------------------------------------------------------------------

# No repeats and no concurrency workload: only the floor probe can measure a floor.
PLAN = MINIMAL_PLAN.replace(
    "[workloads.single]", "[checks]\ngreedy_equivalence = true\n\n[workloads.single]"
).replace("max_tokens = [32]", "max_tokens = [64]")
LOSSY = '"8", "--sim-fault", "diverge"]'


async def _run(path: Path, tmp_path: Path) -> tuple[Campaign, int]:
    plan = load_plan(path)
    layout = ResultsLayout.for_campaign(tmp_path, plan.spec.campaign.name)
    c = Campaign.prepare(plan, layout, CampaignOptions())
    return c, await c.run()


def _diverge_at(messages: list[dict[str, str]]) -> int:
    """Where the simulator's ``diverge`` fault switches words for a prompt it sees."""
    return 8 + hashlib.sha256(DEFAULT_PROMPTING.text(messages).encode()).digest()[12] % 40


@pytest.mark.system
async def test_no_repeats_the_probe_is_the_floor(write_plan, tmp_path) -> None:
    path = write_plan(PLAN.replace('"8"]', LOSSY))
    c, code = await _run(path, tmp_path)
    assert code == 1
    probe = c.state.checks[("noise_floor", "sim", "ar", 1)]
    assert probe.status == "pass" and probe.detail["requests"] == 8
    assert probe.detail["max_tokens"] == 64  # as long as the plan's answers
    v = c.state.checks[("greedy", "sim", "dflash", 1)]
    assert v.status == "fail" and v.detail["floor_sources"] == {"probe": 6}
    prompts = sample_prompts(load_named_set("chat", path.parent), 2, 0)
    first = min(_diverge_at(p.messages()) for p in prompts)
    assert v.detail["first"]["token"] == first
    reason = "from the first tokens" if first < FIRST_TOKENS else "beyond ar's own noise"
    assert reason in v.text
    md, _ = render_texts(build_report(c.layout.root))
    assert "Noise-floor probe on AR at TP 1 (sim): 8 requests" in md
    assert "never (6 compared)" in md


@pytest.mark.system
async def test_the_floor_probe_can_be_turned_off(write_plan, tmp_path) -> None:
    text = PLAN.replace('"8"]', LOSSY).replace(
        "greedy_equivalence = true", "greedy_equivalence = true\nnoise_floor = false"
    )
    c, code = await _run(write_plan(text), tmp_path)
    assert code == 1
    assert not any(check == "noise_floor" for check, *_ in c.state.checks)
    v = c.state.checks[("greedy", "sim", "dflash", 1)]
    assert v.detail["floor_compared"] == 0
    assert "from the first tokens" in v.text or "no noise floor was measured" in v.text


def test_a_bad_noise_floor_value_is_one_line(write_plan) -> None:
    path = write_plan(PLAN.replace("greedy_equivalence = true", 'noise_floor = "yes please"'))
    with pytest.raises(InputError) as e:
        load_plan(path)
    msg = str(e.value)
    assert "\n" not in msg and "checks.noise_floor" in msg and "boolean" in msg


@pytest.mark.system
async def test_a_config_that_diverges_at_one_tp_size_fails_there(write_plan, tmp_path) -> None:
    # The baseline runs at TP 1 only; dflash at TP 1 and TP 2, lossy on its TP 2 server.
    text = (
        PLAN.replace('"8"]', '"8", "--sim-fault", "diverge-tp:2"]')
        .replace("tp = [1]", 'tp = [1, 2]\nexclude = [{ config = "ar", tp = 2 }]')
        .replace("samples = 2", "samples = 3")
    )
    path = write_plan(text)
    c, code = await _run(path, tmp_path)
    assert code == 1
    one = c.state.checks[("greedy", "sim", "dflash", 1)]
    two = c.state.checks[("greedy", "sim", "dflash", 2)]
    assert one.status == "pass" and one.detail["across_tp"]["2"]["counted"] is False
    assert two.status == "fail" and "its own at TP 1" in two.text
    prompts = sample_prompts(load_named_set("chat", path.parent), 3, 0)
    at = {f"chat/{p.id}": _diverge_at(p.messages()) for p in prompts}
    assert two.detail["first"]["token"] == min(at.values())
    assert two.detail["across_tp"]["1"]["diverged"] == 3
    failed = {(cell.config, cell.tp) for cell in c.state.cells.values() if cell.failed_check}
    assert failed == {("dflash", 2)}
    md, _ = render_texts(build_report(c.layout.root))
    first = two.detail["first"]["token"]
    assert (
        f"| 3 | 0 | never (6 compared) | TP 2: from {first} (beyond noise, blamed on TP 2) |" in md
    )
    assert f"| 0 | 0 | never (6 compared) | TP 1: from {first} (beyond noise) |" in md
    assert "| itself at TP 1 |" in md


AGENTIC = MINIMAL_PLAN.replace(
    '[workloads.single]\nkind = "single"\nprompts = ["chat"]\nsamples = 2\nmax_tokens = [32]\n',
    '[checks]\ngreedy_equivalence = true\n\n[workloads.agent]\nkind = "agentic"\n'
    'sessions = 2\nturns = 3\ntool_output_tokens = 32\nmax_tokens = 64\nprompts = ["chat"]\n',
)


@pytest.mark.system
async def test_agentic_turns_are_compared_and_a_lossy_config_fails(write_plan, tmp_path) -> None:
    assert "agentic" in AGENTIC and "single" not in AGENTIC
    c, code = await _run(write_plan(AGENTIC.replace('"8"]', LOSSY)), tmp_path)
    assert code == 1
    v = c.state.checks[("greedy", "sim", "dflash", 1)]
    assert v.status == "fail"
    first = v.detail["first"]
    assert first["kind"] == "agentic" and first["context"].startswith("s")
    # Each session stops at its first divergent turn: one row per session.
    rows = v.detail["divergent"]
    assert all(r["kind"] == "agentic" for r in rows)
    assert len({(r["prompt"], r["context"].split("/")[0]) for r in rows}) == len(rows) <= 2
    # The same plan without the fault: every turn compared, every one equal.
    c2, code2 = await _run(write_plan(AGENTIC, name="clean.toml"), tmp_path / "clean")
    assert code2 == 0
    ok = c2.state.checks[("greedy", "sim", "dflash", 1)]
    assert ok.status == "pass" and ok.detail["compared"] == 2 * 3

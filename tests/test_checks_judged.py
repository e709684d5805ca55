"""Greedy verdicts judged from the stored outputs by every reader (report, console), whatever
the campaign's end: a lossy config of a campaign that ended before its verdict was written is
flagged and never best; a config no verdict covers is unchecked and never best; a recorded
failure is never cleared; a live campaign's config waits for its baseline."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

import pytest
from support.results_builder import ResultsBuilder

from specbench_tui.report import render
from specbench_tui.report.frames import comparison
from specbench_tui.report.inputs import load_inputs
from specbench_tui.report.render import render_report

PLAN = """\
[campaign]
name = "syn"
baseline = "ar"

[checks]
greedy_equivalence = true
"""

PROMPTS = ("p1", "p2")
TOKENS = 64


def _rows(rate: float) -> list[dict[str, Any]]:
    e2e = 0.05 + (TOKENS - 1) / rate
    return [
        dict(prompt_id=p, repeat=r, ttft_s=0.05, e2e_s=e2e, output_tokens=TOKENS)
        for r in range(3)
        for p in PROMPTS
    ]


def _texts(diverge_at: int | None) -> dict[str, Any]:
    """Outputs keyed as a single-stream cell stores them ("<id>#<repeat>"), with token ids."""
    out = {}
    for p in PROMPTS:
        ids = list(range(TOKENS))
        if diverge_at is not None:
            ids[diverge_at] = -1
        for r in range(3):
            out[f"{p}#{r}"] = {"text": " ".join(map(str, ids)), "ids": ids}
    return out


def _campaign(
    root: Path,
    *,
    lossy: dict[tuple[str, int], int] | None = None,
    rates: dict[tuple[str, int], tuple[float, ...]] | None = None,
    pending: tuple[tuple[str, int], ...] = (),
) -> ResultsBuilder:
    """ar and dflash at TP 1 (and what ``rates`` adds), every cell finished with its outputs
    (``lossy``: where a config's diverge, at which token) except those ``pending``; no
    verdict recorded, no end: the log of a campaign killed before any group ended."""
    b = ResultsBuilder(root)
    rates = rates or {("ar", 1): (100.0, 101.0, 99.0), ("dflash", 1): (300.0, 310.0, 305.0)}
    lossy = lossy or {}
    for (cfg, tp), per_rep in rates.items():
        cid = f"{cfg}-{tp}"
        b.cell(cid, cfg, tp, "single", "single", prompt_set="chat", repeats=3)
        if (cfg, tp) in pending:
            continue
        rows = []
        for r, rate in enumerate(per_rep):
            rows += [row for row in _rows(rate) if row["repeat"] == r]
        b.ready(f"sim.{cfg}.tp{tp}")
        b.finished(cid, rows, texts=_texts(lossy.get((cfg, tp))))
    return b


def _frame(root: Path) -> dict[tuple[str, int], dict[str, Any]]:
    cmp = comparison(load_inputs(root))
    return {(r["config"], r["tp"]): r for r in cmp.to_dicts()}


@pytest.fixture
def no_tex(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render, "tex_engine", lambda: None)


def test_a_lossy_config_of_a_campaign_killed_before_its_verdict_is_flagged(
    tmp_path: Path, no_tex: None
) -> None:
    root = _campaign(tmp_path / "syn", lossy={("dflash", 1): 3}).write(finished=False, plan=PLAN)
    rows = _frame(root)
    dflash = rows[("dflash", 1)]
    # 3x the baseline, told apart, but its outputs leave the baseline's at token 3.
    assert dflash["failed_check"] and not dflash["best"] and not dflash["top_tie"]
    assert "diverged from the first tokens" in dflash["check_reason"]
    assert not rows[("ar", 1)]["best"]  # the only other config: no best at all
    render_report(root)
    md = (root / "report.md").read_text()
    assert "No config failed a correctness check" not in md
    assert "Configs that failed a correctness check" in md
    assert "fail \\*" in md  # judged from the stored outputs, not recorded
    summary = md.split("## 2")[0]
    assert "best: told apart" not in summary


def test_without_the_judgement_the_same_campaign_passes_unflagged(tmp_path: Path) -> None:
    """The control: the same outputs, equal, give a pass and dflash ranked best."""
    root = _campaign(tmp_path / "syn").write(finished=False, plan=PLAN)
    dflash = _frame(root)[("dflash", 1)]
    assert not dflash["failed_check"] and not dflash["unchecked"] and dflash["best"]


def test_a_recorded_failure_is_never_cleared_by_outputs(tmp_path: Path) -> None:
    b = _campaign(tmp_path / "syn")  # the outputs now agree (say, a part was replaced)
    b.verdict("dflash", 1, "fail", "dflash: diverged at token 5 of chat/p1")
    dflash = _frame(b.write(plan=PLAN))[("dflash", 1)]
    assert dflash["failed_check"] and dflash["check_reason"].startswith("dflash: diverged")


def test_no_baseline_at_a_tp_size_is_unchecked_and_never_best(tmp_path: Path, no_tex: None) -> None:
    rates = {
        ("ar", 1): (100.0, 101.0, 99.0),
        ("dflash", 1): (300.0, 310.0, 305.0),
        ("dflash", 4): (500.0, 505.0, 510.0),
        ("eagle", 4): (200.0, 201.0, 199.0),
    }
    root = _campaign(tmp_path / "syn", rates=rates).write(plan=PLAN)
    rows = _frame(root)
    assert rows[("dflash", 1)]["best"]  # checked at TP 1
    # eagle ran only at TP 4, where ar never ran: nothing covers it, however fast it is.
    eagle = rows[("eagle", 4)]
    assert eagle["unchecked"] and not eagle["failed_check"]
    assert not eagle["best"] and not eagle["top_tie"]
    assert "ar has no finished temperature-0 outputs at TP 4 on sim" in eagle["check_reason"]
    # dflash at TP 4 equals its own TP 1 outputs, which equal ar's: covered.
    assert not rows[("dflash", 4)]["unchecked"]
    render_report(root)
    md = (root / "report.md").read_text()
    assert "Configs no correctness check covers" in md
    assert "eagle, TP 4 on sim: eagle: unchecked" in md
    assert "unchecked" in md.split("Single-stream decoding")[1]


def test_a_live_campaign_waits_for_its_baseline(tmp_path: Path) -> None:
    rates = {("ar", 4): (100.0, 101.0, 99.0), ("dflash", 4): (300.0, 310.0, 305.0)}
    b = _campaign(tmp_path / "syn", rates=rates, pending=(("ar", 4),))
    root = b.write(finished=False, plan=PLAN)
    fd = os.open(b.layout.lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what a running campaign holds
        r = _frame(root)[("dflash", 4)]
        assert r["unchecked"] and "waiting for ar's outputs at TP 4" in r["check_reason"]
    finally:
        os.close(fd)
    # The process is gone: ar at TP 4 will never come.
    r = _frame(root)[("dflash", 4)]
    assert r["unchecked"] and "ar has no finished" in r["check_reason"]


def test_the_cells_view_is_unchanged_by_a_reader(tmp_path: Path) -> None:
    """Judging is a reader's view: nothing is written into the results."""
    root = _campaign(tmp_path / "syn", lossy={("dflash", 1): 3}).write(finished=False, plan=PLAN)
    before = (root / "events.jsonl").read_bytes()
    load_inputs(root)
    assert (root / "events.jsonl").read_bytes() == before


async def test_a_read_only_console_replays_the_judged_verdicts(tmp_path: Path) -> None:
    """``--attach`` on a dead campaign: after the log, the verdicts its outputs give, so the
    plan tree marks the lossy config's cells as the results table does."""
    from specbench_tui.engine.replay import ReplayControl
    from specbench_tui.results.events import CheckVerdict
    from specbench_tui.results.layout import ResultsLayout
    from specbench_tui.results.progress import CampaignProgress

    root = _campaign(tmp_path / "syn", lossy={("dflash", 1): 3}).write(finished=False, plan=PLAN)
    progress = CampaignProgress()
    seen = []
    async for ev in ReplayControl(ResultsLayout(root)).subscribe():
        progress.apply(ev)
        seen.append(ev)
    assert isinstance(seen[-1], CheckVerdict) and seen[-1].status == "fail"
    assert progress.cells["dflash-1"].failed_check and not progress.cells["ar-1"].failed_check

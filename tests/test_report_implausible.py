"""A speed-up larger than its config's accept length allows is not printed as a plain one.

On the real vLLM plan the n-gram config printed 6.48x (single) and 165.89x (agentic) at accept
lengths 1.96 and 3.88: the baseline had run at load 40-59, the n-gram group at 7-27. Decoding L
tokens per verify step cannot be more than about L times faster, so such a ratio says the two
sides were measured under different conditions. These directories have that shape.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench_tui.report.build import build_report
from specbench_tui.report.frames import IMPLAUSIBLE_MARK, comparison, implausible
from specbench_tui.report.inputs import load_inputs
from specbench_tui.report.render import render_texts
from specbench_tui.report.stats import Ratio
from specbench_tui.tui import results_source
from tests.support.results_builder import ResultsBuilder

PLAN = '[campaign]\nname = "syn"\nbaseline = "ar"\n'


def _campaign(tmp_path: Path, base_e2e: float) -> Path:
    """ar and ngram, two repeats of two prompts; ngram's steps accept 2 tokens (accept length
    2.00, vLLM's 1 + accepted / steps) and its requests take 1 s."""
    b = ResultsBuilder(tmp_path / "syn")
    b.cell("ar-chat", "ar", 1, "single", "single")
    b.cell("ng-chat", "ngram", 1, "single", "single")
    ar = [
        {"prompt_id": f"p{i}", "repeat": r, "e2e_s": base_e2e + 0.05 * i + 0.02 * r}
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
    b.finished("ar-chat", ar)
    b.finished("ng-chat", ng)
    return b.write(plan=PLAN)


def test_a_speedup_far_above_the_accept_length_is_implausible(tmp_path: Path) -> None:
    root = _campaign(tmp_path, base_e2e=6.5)  # a baseline under five times the load
    rows = {r["config"]: r for r in comparison(load_inputs(root)).to_dicts()}
    ng = rows["ngram"]
    assert ng["accept_len_weighted"] == pytest.approx(2.0)
    assert ng["speedup"] > 5
    assert ng["implausible"] and "above the accept length 2.00" in ng["implausible"]
    assert not ng["best"] and not ng["top_tie"]
    shown = [r for r in results_source.comparison(root).to_dicts() if r["config"] == "ngram"]
    assert shown and not any(r["best"] for r in shown)
    assert all(r["implausible"] for r in shown)  # the console's speed-up cell says so
    md, _ = render_texts(build_report(root))
    row = next(ln for ln in md.splitlines() if ln.startswith("| ngram |"))
    assert IMPLAUSIBLE_MARK in row, row
    answer = md[md.index("**Table 1:") :].split("\n\n")[1]
    assert "| ngram |" not in answer, answer  # never the fastest


def test_a_speedup_within_the_accept_length_stands(tmp_path: Path) -> None:
    root = _campaign(tmp_path, base_e2e=1.8)  # 1.8x at accept length 2: plausible
    rows = {r["config"]: r for r in comparison(load_inputs(root)).to_dicts()}
    assert 1.5 < rows["ngram"]["speedup"] < 2.0
    assert rows["ngram"]["implausible"] is None and rows["ngram"]["best"]


def test_the_rule_uses_the_intervals_low_end() -> None:
    assert implausible(Ratio(2.5, 2.3, 2.7), 2.0)  # all of it above 2.2
    assert not implausible(Ratio(2.5, 2.1, 2.9), 2.0)  # may be noise
    assert not implausible(Ratio(2.1, None, None), 2.0)  # within the margin
    assert implausible(Ratio(3.0, None, None), 2.0)
    assert not implausible(None, 2.0) and not implausible(Ratio(9.0, 8.0, 10.0), None)

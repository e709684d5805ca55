"""A config whose every request reached the client in one read keeps its rows.

A client that lags behind a fast server reads a whole stream at once: no token after the
first is timed apart from it, so the request has a zero decode window and no decode rate
(bench/figures.py). On a loaded two-core machine every request of the real vLLM's n-gram
config came that way (12 of 12; the autoregressive config's 7 of 12), and the comparison
dropped the config from every table and the console, though its cells were done and its
accept length measured. These directories are written by hand with exactly that shape.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench_tui.report.build import build_report
from specbench_tui.report.frames import UNTIMED_MARK, comparison
from specbench_tui.report.inputs import load_inputs
from specbench_tui.report.render import render_texts
from specbench_tui.tui import results_source
from tests.support.results_builder import ResultsBuilder

PLAN = '[campaign]\nname = "syn"\nbaseline = "ar"\n'


def _timed(i: int, rep: int) -> dict:
    return {"prompt_id": f"p{i}", "repeat": rep, "e2e_s": 1.0 + 0.1 * i + 0.01 * rep}


def _one_read(i: int, rep: int) -> dict:
    """Every content chunk in the read of the first: TTFT = e2e, a zero decode window."""
    return {
        "prompt_id": f"p{i}",
        "repeat": rep,
        "ttft_s": 0.2,
        "e2e_s": 0.2,
        "decode_s": 0.0,
        "spec_verify_ct": 16,
        "accept_length": 4.0,
        "spec_accepted_tokens": 48,
        "spec_draft_tokens": 80,
    }


def _campaign(tmp_path: Path, untimed: set[str]) -> Path:
    b = ResultsBuilder(tmp_path / "syn")
    for config in ("ar", "ngram"):
        cid = f"{config}-chat"
        b.cell(cid, config, 1, "single", "single")
        make = _one_read if config in untimed else _timed
        b.finished(cid, [make(i, rep) for rep in (0, 1) for i in range(2)])
    return b.write(plan=PLAN)


def test_an_untimed_config_keeps_its_row_with_no_decode_figure(tmp_path: Path) -> None:
    root = _campaign(tmp_path, untimed={"ngram"})
    rows = {r["config"]: r for r in comparison(load_inputs(root)).to_dicts()}
    assert set(rows) == {"ar", "ngram"}  # the n-gram row was dropped before
    ng = rows["ngram"]
    assert ng["untimed"] and not rows["ar"]["untimed"]
    assert ng["n"] == 0 and ng["requests"] == 0
    assert ng["decode_tok_s"] is None and ng["speedup"] is None
    assert not ng["best"] and not ng["top_tie"]
    assert ng["accept_len_weighted"] == pytest.approx(1 + 48 / 16)  # its own figure stands
    shown = [r for r in results_source.comparison(root).to_dicts() if r["config"] == "ngram"]
    assert {r["pooled"] for r in shown} == {True, False}
    assert all(r["tok_s"] is None and r["accept"] == pytest.approx(4.0) for r in shown)
    md, _ = render_texts(build_report(root))
    row = next(ln for ln in md.splitlines() if ln.startswith("| ngram | 0 |"))
    assert UNTIMED_MARK in row and "—" in row, row


def test_an_untimed_baseline_gives_no_speedup_and_the_answer_table_says_why(
    tmp_path: Path,
) -> None:
    root = _campaign(tmp_path, untimed={"ar", "ngram"})
    rows = {r["config"]: r for r in comparison(load_inputs(root)).to_dicts()}
    assert rows["ar"]["untimed"] and rows["ar"]["speedup"] is None
    md, _ = render_texts(build_report(root))
    base = next(ln for ln in md.splitlines() if ln.startswith("| AR | 0 |") or "| ar | 0 |" in ln)
    assert "1.00x" not in base and UNTIMED_MARK in base, base
    answer = md[md.index("**Table 1:") :].split("\n\n")[1]
    assert f"{UNTIMED_MARK}: ar, ngram" in answer or f"{UNTIMED_MARK}: ar and ngram" in answer, (
        answer
    )

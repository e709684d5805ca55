"""Acceptance from raw counts: real vLLM per-request metrics against its counter deltas."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from specbench_tui.bench.metrics import summarize
from specbench_tui.engine.headless import format_event
from specbench_tui.engines.acceptance import cell_acceptance
from specbench_tui.engines.counters import Counters, WindowResult
from specbench_tui.engines.registry import adapter
from specbench_tui.engines.vllm import vllm_spec_counts
from specbench_tui.report.frames import comparison
from specbench_tui.report.inputs import load_inputs
from specbench_tui.results.events import CellFinished
from specbench_tui.results.records import RequestRecord
from specbench_tui.tui import results_source
from tests.support.replay import FIXTURES
from tests.support.results_builder import ResultsBuilder

VLLM = FIXTURES / "vllm"


def batch() -> tuple[list[RequestRecord], WindowResult, dict]:
    """The 8 concurrent requests of the capture and the counters around them."""
    data = json.loads((VLLM / "batch8_requests.json").read_text())
    records = []
    for req in data["requests"]:
        c = vllm_spec_counts(req)
        records.append(
            RequestRecord(
                output_tokens=req["completion_tokens"],
                spec_verify_ct=c["verify"],
                spec_accepted_tokens=c["accepted"],
                spec_draft_tokens=c["drafted"],
                spec_accept_histogram=c["histogram"],
                accept_length=c.get("accept_length"),
            )
        )
    before = adapter("vllm").parse_counters((VLLM / "metrics_after_single.txt").read_text())
    after = adapter("vllm").parse_counters((VLLM / "metrics_after_batch8.txt").read_text())
    return records, WindowResult(after.minus(before), settled=True), data


def test_counter_deltas_of_the_real_batch() -> None:
    _, window, data = batch()
    d = window.deltas
    assert d is not None
    assert d.generation_tokens == data["batch_delta"]["generation_tokens"] == 653
    assert (d.verify_steps, d.accepted_tokens, d.draft_tokens) == (193, 323, 399)
    assert d.per_position == (143, 92, 88)


def test_pooled_requests_equal_the_counters_and_differ_from_the_plain_mean() -> None:
    records, window, data = batch()
    acc = cell_acceptance(records, window, engine="vllm", speculative=True)
    assert acc["acceptance_check"] == "agree"
    assert acc["spec_verify_steps"] == 193 and acc["counter_verify_steps"] == 193
    assert acc["spec_accepted_tokens"] == 323 and acc["spec_draft_tokens"] == 399
    want = data["batch_check"]["aggregate_AL_1_plus_dacc_over_ddrafts"]  # 2.6736
    assert acc["accept_length_weighted"] == pytest.approx(want, rel=1e-12)
    assert acc["accept_length_counters"] == pytest.approx(want, rel=1e-12)
    assert acc["acceptance_rate"] == pytest.approx(323 / 399)
    assert acc["acceptance_rate_counters"] == pytest.approx(323 / 399)
    assert acc["accept_per_position"] == pytest.approx([143 / 193, 92 / 193, 88 / 193])
    assert acc["accept_per_position_counters"] == pytest.approx(acc["accept_per_position"])
    # The plain request mean is another figure: the request that ended on its first token
    # (no verify step) has no accept length, the other seven count equally.
    mean = summarize(records)["accept_length_mean"]
    seven = [r.accept_length for r in records if r.accept_length is not None]
    assert len(seven) == 7 and mean == pytest.approx(sum(seven) / 7)
    assert abs(mean - want) > 0.05


def test_a_disagreement_is_flagged() -> None:
    records, window, _ = batch()
    d = window.deltas
    assert d is not None
    extra = Counters(d.generation_tokens, d.verify_steps + 10, d.accepted_tokens + 30,
                     d.draft_tokens + 30, d.per_position)  # fmt: skip
    acc = cell_acceptance(
        records, WindowResult(extra, settled=True), engine="vllm", speculative=True
    )
    assert acc["acceptance_check"].startswith("disagree: ")
    assert "verify steps 193 from requests vs 203 from counters" in acc["acceptance_check"]


def test_failed_requests_or_one_source_only() -> None:
    records, window, _ = batch()
    records[0].error = "timeout after 5 s"
    acc = cell_acceptance(records, window, engine="vllm", speculative=True)
    assert acc["acceptance_check"].startswith("not compared: 1 request(s) failed")
    records[0].error = None
    acc = cell_acceptance(records, None, engine="vllm", speculative=True)
    # "requests only" always says why the counters are missing
    assert acc["acceptance_check"] == (
        "requests only (no counters: the server's /metrics is off or did not answer)"
    )
    no_verify = WindowResult(Counters(generation_tokens=120.0), settled=True)
    acc = cell_acceptance(records, no_verify, engine="sglang", speculative=True)
    assert acc["acceptance_check"] == (
        "requests only (no sglang:spec_verify_calls_total counter in the server's /metrics)"
    )
    assert acc["accept_length_counters"] is None and acc["accept_length_weighted"] is not None
    bare = [RequestRecord(output_tokens=r.output_tokens) for r in records]
    acc = cell_acceptance(bare, window, engine="vllm", speculative=True)
    assert acc["acceptance_check"] == "counters only"


def test_null_for_a_non_speculative_config() -> None:
    records, window, _ = batch()
    acc = cell_acceptance(records, window, engine="vllm", speculative=False)
    assert all(v is None for v in acc.values())
    nospec = adapter("vllm").parse_counters((VLLM / "metrics_nospec_idle.txt").read_text())
    assert nospec.verify_steps is None and nospec.generation_tokens is not None


def test_sglang_counts_every_completion_token() -> None:
    """SGLang's counters add a request's completion tokens and its verify steps when it
    finishes, so a request that ended on its first token adds a token and no step."""
    reqs = [
        RequestRecord(output_tokens=10, spec_verify_ct=5, accept_length=2.0),
        RequestRecord(output_tokens=1, spec_verify_ct=0),
    ]
    window = WindowResult(Counters(generation_tokens=11, verify_steps=5), settled=True)
    acc = cell_acceptance(reqs, window, engine="sglang", speculative=True)
    assert acc["accept_length_weighted"] == pytest.approx(11 / 5)
    assert acc["accept_length_counters"] == pytest.approx(11 / 5)
    assert acc["acceptance_check"] == "agree"


def test_the_report_console_and_headless_line_show_vllms_own_accept_length(
    tmp_path: Path,
) -> None:
    """The real batch in a results directory: the report's frame (which the console's table
    is) pools the counts by vLLM's definition, 1 + accepted / steps, as its counters do;
    output tokens over steps (SGLang's) would say 3.38 and the request mean 2.85."""
    records, window, data = batch()
    want = data["batch_check"]["aggregate_AL_1_plus_dacc_over_ddrafts"]
    b = ResultsBuilder(tmp_path / "syn")
    g = b.group("ngram", 1)
    b.groups[g.id] = replace(g, engine="vllm")
    b.cell("c8", "ngram", 1, "load", "concurrency", concurrency=8, prompt_set="chat")
    rows = [
        {
            "prompt_id": f"p{i}",
            "output_tokens": r.output_tokens,
            "spec_verify_ct": r.spec_verify_ct,
            "spec_accepted_tokens": r.spec_accepted_tokens,
            "spec_draft_tokens": r.spec_draft_tokens,
            "accept_length": r.accept_length,
        }
        for i, r in enumerate(records)
    ]
    acc = cell_acceptance(records, window, engine="vllm", speculative=True)
    b.finished("c8", rows, figures=acc)
    root = b.write(plan='[campaign]\nname = "syn"\n')
    (row,) = comparison(load_inputs(root)).to_dicts()
    assert row["accept_len_weighted"] == pytest.approx(want, rel=1e-12)
    assert row["accept_len_weighted"] == pytest.approx(acc["accept_length_counters"])
    assert abs(653 / 193 - want) > 0.5  # SGLang's definition on vLLM's counts: another figure
    assert abs(row["accept_len_mean"] - want) > 0.1
    shown_rows = results_source.comparison(root).to_dicts()  # the pooled row and its point
    assert {r["pooled"] for r in shown_rows} == {True, False}
    for shown in shown_rows:
        assert shown["accept"] == pytest.approx(want, rel=1e-12)
    line = format_event(
        CellFinished(cell_id="c8", cell="g/load/c8", requests=8, figures=acc, wall_s=1.0)
    )
    assert line is not None and f"accept {want:.2f}" in line

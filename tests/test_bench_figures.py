"""The figures' one definition (bench/figures.py): token-weighted decode rates that count what
they leave out, the measured window, chunk gaps that came in one read, ITL per token."""

from __future__ import annotations

import json

import pytest

from specbench_tui.bench.figures import (
    Span,
    decode_left_out,
    decode_total,
    fill_rates,
    mark_bursts,
    measured_window,
    throughput,
    token_gaps,
)
from specbench_tui.bench.metrics import summarize
from specbench_tui.engines.registry import adapter
from specbench_tui.results.records import RequestRecord


def row(n: int, ttft: float, e2e: float, **kw: object) -> RequestRecord:
    r = RequestRecord(output_tokens=n, ttft_s=ttft, e2e_s=e2e, chunks=n, **kw)  # type: ignore[arg-type]
    fill_rates(r, [])
    return r


def test_a_cells_decode_rate_is_token_weighted_and_says_what_it_left_out() -> None:
    long = row(257, 0.1, 2.1)  # 256 tokens in 2 s: 128 tok/s
    short = row(5, 0.1, 0.11)  # 4 tokens in 10 ms: 400 tok/s, a burst
    one = row(1, 0.1, 0.1)
    burst = RequestRecord(output_tokens=64, ttft_s=0.2, e2e_s=0.20001, chunks=1)
    fill_rates(burst, [64], one_read=True)  # every token in the first read
    assert burst.decode_s == 0.0 and burst.decode_tok_s is None and burst.tpot_s is None
    failed = RequestRecord(output_tokens=40, ttft_s=0.1, e2e_s=9.0, error="timeout after 9 s")
    total = decode_total([long, short, one, burst, failed])
    assert total.rate == pytest.approx(260 / 2.01)  # not (128 + 400) / 2
    assert (total.counted, total.one_token, total.zero_window) == (2, 1, 1)
    s = summarize([long, short, one, burst, failed])
    assert s["decode_tok_s_total"] == pytest.approx(260 / 2.01)
    assert s["decode_tok_s_p50"] == pytest.approx((128 + 400) / 2)  # a distribution still
    assert (s["decode_one_token"], s["decode_zero_window"], s["decode_requests"]) == (1, 1, 2)
    assert decode_left_out(s) == "1 with a zero decode window (all in one read), 1 of one token"
    assert decode_left_out({}) == ""


def test_a_window_far_shorter_than_its_chunks_imply_is_a_burst_read_and_left_out() -> None:
    """Chunks 20 ms apart as the client read them in time; one request's 63 chunks came in
    two reads 0.6 ms apart (103,000 tok/s): its window is the client's reads, not the
    server's decode. It keeps its window, loses its rate, and is counted apart."""

    def streamed(n: int, gap: float, coalesced: list[int] | None = None) -> RequestRecord:
        gaps = [gap] * (n - 1)
        r = RequestRecord(
            output_tokens=n,
            ttft_s=0.05,
            e2e_s=0.05 + sum(gaps),
            chunks=n,
            itl_s=gaps,
            coalesced_gaps=coalesced or [],
        )
        fill_rates(r, [])
        return r

    steady = [streamed(64, 0.02) for _ in range(5)]
    burst = streamed(64, 0.6e-3 / 62, coalesced=list(range(61)))
    slow = streamed(64, 0.004)  # a fifth of the pace: read late, yet not a burst
    assert mark_bursts([*steady, burst, slow]) == 1
    assert burst.burst_read and burst.decode_tok_s is None and burst.decode_s
    assert not slow.burst_read and slow.decode_tok_s is not None
    total = decode_total([*steady, burst, slow])
    assert (total.counted, total.burst) == (6, 1)
    assert total.rate == pytest.approx(63 * 6 / (5 * 63 * 0.02 + 63 * 0.004))
    s = summarize([*steady, burst, slow])
    assert s["decode_burst_read"] == 1
    assert "1 read in a burst" in decode_left_out(s)
    # The report's form of the same rate, over the stored rows: the burst read counts nothing.
    import polars as pl

    from specbench_tui.bench.figures import decode_parts_expr

    rows = pl.DataFrame(
        [
            {k: getattr(r, k) for k in ("output_tokens", "e2e_s", "ttft_s", "decode_s")}
            | {"burst_read": r.burst_read}
            for r in (*steady, burst, slow)
        ]
    )
    tokens, seconds = decode_parts_expr()
    parts = rows.select(tokens.alias("t"), seconds.alias("s"))
    assert parts["t"].sum() / parts["s"].sum() == pytest.approx(total.rate)
    assert parts["t"].null_count() == 1


def test_rows_written_before_the_decode_window_column_still_count() -> None:
    old = RequestRecord(output_tokens=11, ttft_s=0.5, e2e_s=1.5, decode_tok_s=10.0)
    assert decode_total([old]).rate == pytest.approx(10.0)


def test_the_measured_window_is_the_request_span_or_the_requests_own_spans() -> None:
    spans = [Span(10.0, 11.0), Span(10.2, 11.5), Span(11.1, 12.0)]
    assert measured_window(spans, concurrent=True) == pytest.approx(2.0)  # 10.0 to 12.0
    assert measured_window(spans, concurrent=False) == pytest.approx(1.0 + 1.3 + 0.9)
    assert measured_window([], concurrent=True) == 0.0
    rows = [RequestRecord(output_tokens=100), RequestRecord(output_tokens=50, error="x")]
    assert throughput(rows, 2.0) == pytest.approx(50.0)  # failed requests' tokens not counted
    assert throughput(rows, 0.0) is None


def test_gaps_inside_one_read_are_no_gaps_and_itl_per_token_takes_the_read_whole() -> None:
    # Chunks of 1, 2, 2, 3, 1 tokens; the third came in the read of the second, the fifth in
    # the read of the fourth.
    gaps = [0.04, 0.00002, 0.06, 0.00001]
    tokens = [1, 2, 2, 3, 1]
    assert token_gaps(gaps, tokens, [1, 3]) == [
        (pytest.approx(0.04 / 4), 4),
        (pytest.approx(0.06 / 4), 4),
    ]
    # Chunks that came with the first one are part of the first arrival, not latencies of 0.
    assert token_gaps([0.00001, 0.05], [1, 3, 2], [0]) == [(pytest.approx(0.025), 2)]
    r = RequestRecord(output_tokens=9, ttft_s=0.1, e2e_s=0.2, itl_s=gaps, coalesced_gaps=[1, 3])
    r.chunk_tokens = tokens
    s = summarize([r])
    assert s["itl_s_p50"] == pytest.approx(0.05)  # over the two measured gaps only
    assert s["coalesced_gap_share"] == pytest.approx(0.5)
    assert s["itl_token_s_p50"] == pytest.approx((0.01 + 0.015) / 2)
    all_in_one = RequestRecord(output_tokens=3, ttft_s=0.1, e2e_s=0.2, itl_s=[1e-5, 1e-5])
    all_in_one.coalesced_gaps = [0, 1]
    s = summarize([all_in_one])
    assert s["itl_s_p50"] is None and s["coalesced_gap_share"] == 1.0  # never 0.00 ms


def _chat(content: str, ids: list[int] | None) -> bytes:
    choice: dict[str, object] = {"index": 0, "delta": {"content": content}, "token_ids": ids}
    return json.dumps({"id": "c", "choices": [choice]}).encode()


def test_a_parser_marks_chunks_of_one_read_and_counts_vllm_token_ids_per_chunk() -> None:
    p = adapter("vllm").stream_parser("openai")
    p.feed(_chat("a", [5]), 0.10, read=1)
    p.feed(_chat("bcd", [6, 7, 8]), 0.15, read=2)
    p.feed(_chat("ef", [9, 10]), 0.15001, read=2)  # came in the same read
    p.feed(b'{"id":"c","choices":[],"usage":{"completion_tokens":6}}', 0.16, read=3)
    p.feed(b"[DONE]", 0.16, read=3)
    r = RequestRecord()
    p.finish(r, 0.16)
    fill_rates(r, p.content_tokens, one_read=p.one_read)
    assert r.chunk_tokens == [1, 3, 2]  # from the token ids, not from the chunk count
    assert r.coalesced_gaps == [1]
    assert r.decode_s == pytest.approx(0.06) and r.decode_tok_s == pytest.approx(5 / 0.06)
    # SGLang: every content chunk in the first read is a zero decode window.
    q = adapter("sglang").stream_parser("sglang", "incremental")
    for i, t in enumerate((0.2, 0.20001, 0.20002)):
        meta = {"completion_tokens": 4 * (i + 1), "finish_reason": None}
        q.feed({"text": "x", "output_ids": [1, 2, 3, 4], "meta_info": meta}, t, read=1)
    q.feed(b"[DONE]", 0.3, read=2)
    assert q.one_read

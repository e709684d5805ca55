"""Per-cell summaries: the metric columns of ``cells.parquet``.

A cell has at most a few hundred requests, so plain Python is fast enough and keeps the
percentile definition explicit: linear interpolation between closest ranks (numpy's and
polars' default), so numbers match a notebook that recomputes them from ``requests.parquet``.

The figures are defined in :mod:`specbench_tui.bench.figures`. ``itl_s_*`` and
``output_tok_s_*`` are the contract's older names for ``chunk_gap_s_*`` and ``e2e_tok_s_*``
(same numbers); ``itl_token_s_*`` is ITL per token; ``decode_tok_s_total`` is the cell's
token-weighted decode rate, with the requests it leaves out counted beside it.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Any

from specbench_tui.bench.figures import (
    decode_total,
    measured_gaps,
    stall_columns,
    throughput,
    token_gaps,
)
from specbench_tui.results.records import RequestRecord

STAT_METRICS: tuple[str, ...] = (
    "ttft_s",
    "e2e_s",
    "tpot_s",
    "itl_s",
    "output_tok_s",
    "accept_length",
    "decode_tok_s",
    "e2e_tok_s",
    "chunk_gap_s",
    "itl_token_s",
)
STATS: tuple[str, ...] = ("mean", "p50", "p90", "p99")
SUMMARY_COLUMNS: tuple[str, ...] = (
    "requests",
    "errors",
    "throughput_tok_s",
    "decode_tok_s_total",
    "decode_requests",
    "decode_one_token",
    "decode_zero_window",
    "decode_burst_read",
    "coalesced_gap_share",
    "stalled_requests",
    *(f"{m}_{s}" for m in STAT_METRICS for s in STATS),
)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of already sorted values, linearly interpolated."""
    n = len(sorted_values)
    if n == 1:
        return float(sorted_values[0])
    pos = (n - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac)


def describe(values: Iterable[float | None]) -> dict[str, float | None]:
    """Mean and p50/p90/p99 of the non-null values; all null when there are none."""
    data = sorted(v for v in values if v is not None and not math.isnan(v))
    if not data:
        return dict.fromkeys(STATS)
    return {
        "mean": math.fsum(data) / len(data),
        "p50": percentile(data, 50),
        "p90": percentile(data, 90),
        "p99": percentile(data, 99),
    }


def describe_weighted(pairs: Iterable[tuple[float, int]]) -> dict[str, float | None]:
    """:func:`describe` of the values each repeated ``weight`` times, without building the
    repeated list (a cell's ITL per token is one value per output token)."""
    data = sorted((v, w) for v, w in pairs if w > 0 and not math.isnan(v))
    if not data:
        return dict.fromkeys(STATS)
    values = [v for v, _ in data]
    ends = list(itertools.accumulate(w for _, w in data))  # last expanded index + 1 of each
    n = ends[-1]

    def at(i: int) -> float:
        return values[bisect.bisect_right(ends, i)]

    def pct(q: float) -> float:
        pos = (n - 1) * q / 100.0
        lo = math.floor(pos)
        a, b = at(lo), at(min(lo + 1, n - 1))
        return float(a + (b - a) * (pos - lo))

    return {
        "mean": math.fsum(v * w for v, w in data) / n,
        "p50": pct(50),
        "p90": pct(90),
        "p99": pct(99),
    }


def summarize(records: Sequence[RequestRecord], wall_s: float | None = None) -> dict[str, Any]:
    """Summarise one cell's measured requests.

    Latency and speed statistics cover the successful requests only (a timed-out request has
    no meaningful e2e); ``errors`` counts the rest. Chunk-gap statistics run over every
    measured gap of every request (gaps inside one read are not: ``coalesced_gap_share`` says
    how many those were) and ITL per token over every token, not over per-request means, so
    long outputs weigh by their length.
    ``throughput_tok_s`` is all output tokens of the cell over its measured window ``wall_s``
    (null without it).
    """
    ok = [r for r in records if r.error is None]
    out: dict[str, Any] = {
        "requests": len(records),
        "errors": len(records) - len(ok),
    }
    out["throughput_tok_s"] = throughput(ok, wall_s)
    out.update(decode_total(ok).columns())
    out.update(stall_columns(ok))
    gaps = [measured_gaps(r.itl_s, r.coalesced_gaps) for r in ok]
    all_gaps = sum(len(r.itl_s) for r in ok)
    out["coalesced_gap_share"] = (
        sum(len(r.coalesced_gaps) for r in ok) / all_gaps if all_gaps else None
    )
    columns: dict[str, Iterable[float | None]] = {
        "ttft_s": (r.ttft_s for r in ok),
        "e2e_s": (r.e2e_s for r in ok),
        "tpot_s": (r.tpot_s for r in ok),
        "itl_s": (gap for g in gaps for gap in g),
        "output_tok_s": (r.output_tok_s for r in ok),
        "accept_length": (r.accept_length for r in ok),
        "decode_tok_s": (r.decode_tok_s for r in ok),
        "e2e_tok_s": (r.e2e_tok_s for r in ok),
        "chunk_gap_s": (gap for g in gaps for gap in g),
    }
    for metric, values in columns.items():
        for stat, value in describe(values).items():
            out[f"{metric}_{stat}"] = value
    per_token = (p for r in ok for p in token_gaps(r.itl_s, r.chunk_tokens, r.coalesced_gaps))
    for stat, value in describe_weighted(per_token).items():
        out[f"itl_token_s_{stat}"] = value
    return out

"""Agentic multi-turn sessions: per host and TP, a table of the configs and TTFT and decode
speed per turn against the context size (with prefix caching, TTFT should stay flat as the
context grows, and decode speed shows what a longer context costs)."""

from __future__ import annotations

from typing import Any

import polars as pl

from specbench_tui.bench.figures import figure_axis
from specbench_tui.report import format as f
from specbench_tui.report.blocks import (
    Chart,
    Charts,
    Para,
    Point,
    Section,
    Series,
    text,
)
from specbench_tui.report.frames import (
    DECODE_PARTS,
    config_rank,
    marked,
    subset,
    unit_moments,
)
from specbench_tui.report.inputs import Inputs
from specbench_tui.report.sections import columns as C
from specbench_tui.report.sections.common import (
    DECODE_DEFINITION,
    MARKS_EXPLAINED,
    compared,
    workload_section,
)
from specbench_tui.report.stats import from_moments

KIND = "agentic"


def _turns(df: pl.DataFrame, value: str) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    """Per (host, tp, workload, config): per turn, the mean over sessions of ``value`` with its
    interval (decode tok/s: all the turn's decode tokens over all its decode time, as a
    cell's), and the mean context size (prompt tokens) at that turn."""
    keys = ["host", "tp", "workload", "config", "turn"]
    if value == "decode_tok_s":
        # Token-weighted over the sessions, as a cell is: one turn that reached the client
        # in a burst (255 tokens in half a millisecond) must not outweigh the others.
        num, den = (pl.col(c) for c in DECODE_PARTS)
        mom = (
            df.filter(den.is_not_null())
            .group_by(keys)
            .agg((num.sum() / den.sum()).alias("mean"), pl.len().alias("n"))
            .with_columns(pl.lit(None, dtype=pl.Float64).alias("sd"))
            .filter(pl.col("mean").is_finite())
        )
    else:
        mom = unit_moments(df, keys, value=value)
    ctx = df.group_by(keys).agg(
        pl.col("prompt_tokens").mean().alias("context"),
        (pl.col("cached_tokens").sum() / pl.col("prompt_tokens").sum()).alias("cached"),
    )
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in mom.join(ctx, on=keys, how="left").sort("turn").to_dicts():
        m = from_moments(r["mean"], r["sd"], r["n"])
        out.setdefault((r["host"], r["tp"], r["workload"], r["config"]), []).append(
            {"turn": r["turn"], "mean": m, "context": r["context"], "cached": r["cached"]}
        )
    return out


def _chart(
    inp: Inputs, per: dict[tuple[Any, ...], list[dict[str, Any]]], scope: tuple[Any, ...], **kw: Any
) -> Chart:
    order = config_rank(inp)
    host, tp, workload = scope
    configs = sorted(
        {k[3] for k in per if k[:3] == scope}, key=lambda c: (order.get(c, len(order)), c)
    )
    series = []
    for c in configs:
        pts = [
            Point(t["context"], t["mean"].mean)
            for t in per[(host, tp, workload, c)]
            if t["context"] is not None
        ]
        series.append(Series(marked(inp, c, host, [tp]), pts, color=order.get(c, 0)))
    return Chart(kind="lines", xlabel="context (prompt tokens)", series=series, **kw)


#: The sessions table's columns (energy where the table has some). The turn TTFTs are the
#: means over sessions the per-turn chart plots, in milliseconds.
SESSION_COLUMNS = (
    C.CONFIG,
    C.N,
    C.DECODE_CI,
    C.SPEEDUP_CI,
    C.ACCEPT,
    C.figure("ttft_s", lambda v: f.fnum(v, 1), at="ttft_first", scope="first turn"),
    C.figure("ttft_s", lambda v: f.fnum(v, 1), at="ttft_last", scope="last turn"),
    C.field("context_last", "Context last turn", f.count),
    C.field("cached_last", "Cached last turn", f.share),
)


def build(inp: Inputs) -> Section | None:
    cmp = compared(inp).filter(pl.col("kind") == KIND)
    if cmp.height == 0:
        return None
    cols = ["host", "tp", "workload", "config", "kind", "turn", "cell_id", "unit"]
    df = subset(
        inp,
        [*cols, "ttft_ms", "decode_tok_s", "prompt_tokens", "cached_tokens"],
        (pl.col("kind") == KIND) & pl.col("turn").is_not_null(),
    )
    ttft = _turns(df, "ttft_ms")
    decode = _turns(df, "decode_tok_s")
    sec = Section("Agentic sessions")
    sec.add(
        Para(
            text(
                "Multi-turn sessions whose context grows by each answer and a tool output. "
                "The unit is a session: n is the number of sessions. Decode tok/s is "
                f"{DECODE_DEFINITION} ",
                MARKS_EXPLAINED,
            )
        )
    )
    parts = sorted(cmp.partition_by("workload", as_dict=True).items())
    for (workload,), wpart in parts:
        wsec = workload_section(sec, workload, len(parts))
        for r0 in sorted(
            {(r["host"], r["tp"]) for r in wpart.to_dicts()}, key=lambda k: (k[0], k[1])
        ):
            host, tp = r0
            rows = [r for r in wpart.to_dicts() if (r["host"], r["tp"]) == r0]
            for r in rows:
                turns = ttft.get((host, tp, workload, r["config"]), [])
                first, last = (turns[0], turns[-1]) if turns else ({}, {})
                r["ttft_first"] = first["mean"].mean if first else None
                r["ttft_last"] = last["mean"].mean if last else None
                r["context_last"] = round(last["context"]) if last else None
                r["cached_last"] = last.get("cached") if last else None
            cols = [*SESSION_COLUMNS, *C.with_energy(rows, *C.ENERGY), C.blank()]
            caption = f"Agentic sessions, {workload}, TP {tp} on {host}"
            wsec.add(C.table(caption, cols, rows, small=True))
            scope = (host, tp, workload)
            where = f"TP {tp} ({workload}, {host})"
            wsec.add(
                Charts(
                    [
                        _chart(
                            inp,
                            ttft,
                            scope,
                            title=f"TTFT per turn (mean over sessions), {where}",
                            ylabel=figure_axis("ttft_s"),
                            ymin=0.0,
                        ),
                        _chart(
                            inp,
                            decode,
                            scope,
                            title=f"Decode tok/s per turn (token-weighted over sessions), {where}",
                            ylabel=figure_axis("decode_tok_s_total"),
                            ymin=0.0,
                        ),
                    ]
                )
            )
    return sec

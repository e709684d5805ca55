"""Single-stream decoding: one table per host and TP size, the speed-up chart, the speed-up by
prompt set and output length, and the tree-budget curves of parametrized configs."""

from __future__ import annotations

from typing import Any

import polars as pl

from specbench_tui.bench.figures import FIGURE_NAMES, figure_axis
from specbench_tui.report import format as f
from specbench_tui.report.blocks import (
    Cell,
    Chart,
    Charts,
    Column,
    Para,
    Point,
    Section,
    Series,
    Table,
    text,
)
from specbench_tui.report.frames import (
    ACCEPT_COLUMNS,
    SCOPE,
    accept_frame,
    baseline,
    config_rank,
    label,
    marked,
    rank_decode,
    subset,
)
from specbench_tui.report.inputs import Inputs
from specbench_tui.report.sections import columns as C
from specbench_tui.report.sections.common import (
    DECODE_DEFINITION,
    FIELLER_BARS,
    MARKS_EXPLAINED,
    MEAN_BARS,
    compared,
    interval_bars,
    workload_section,
)
from specbench_tui.report.stats import mean_ci


def _extra(inp: Inputs, kind: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    """TTFT median, end-to-end tok/s and the prefix-cache share per comparison key."""
    keys = [*SCOPE, "config"]
    cols = ["ttft_s", "output_tokens", "e2e_s", "cached_tokens", "prompt_tokens"]
    df = subset(inp, [*keys, *cols], pl.col("kind") == kind)
    if df.height == 0:
        return {}
    agg = df.group_by(keys).agg(
        pl.col("ttft_s").median().alias("ttft_p50"),
        # Token-weighted, as decode tok/s is: all tokens over all end-to-end time.
        (pl.col("output_tokens").sum() / pl.col("e2e_s").sum()).alias("e2e_tok_s"),
        (
            pl.col("cached_tokens").sum().cast(pl.Float64)
            / pl.col("prompt_tokens").sum().cast(pl.Float64)
        ).alias("cached_share"),
    )
    return {tuple(r[k] for k in keys): r for r in agg.to_dicts()}


#: The single-stream table's columns (energy where the table has some).
TP_COLUMNS = (
    C.CONFIG,
    C.N,
    C.REQUESTS,
    C.DECODE_CI,
    C.SPEEDUP_CI,
    C.ACCEPT,
    C.ACCEPT_REQ_MEAN,
    C.TTFT_P50,
    C.E2E,
)


def tp_table(inp: Inputs, rows: list[dict[str, Any]], kind: str, caption: str) -> Table:
    """The comparison rows of one scope: the figure a paper quotes, with its interval."""
    extra = _extra(inp, kind)
    keys = [*SCOPE, "config"]
    full = [{**r, **extra.get(tuple(r[k] for k in keys), {})} for r in rows]
    cols = [*TP_COLUMNS, *C.with_energy(rows, *C.ENERGY), C.blank()]
    return C.table(caption, cols, full, small=True)


def speedup_chart(rows: list[dict[str, Any]], title: str, inp: Inputs) -> Chart:
    """Speed-up per config (bars) per TP (one series each), with 95% intervals."""
    base = baseline(inp)
    order = config_rank(inp)
    configs = sorted(
        {r["config"] for r in rows if r["config"] != base},
        key=lambda c: (order.get(c, len(order)), c),
    )
    index = {c: i for i, c in enumerate(configs)}
    tps = sorted({r["tp"] for r in rows})
    series = []
    for i, tp in enumerate(tps):
        pts = [
            Point(index[r["config"]], r["speedup"], r["speedup_lo"], r["speedup_hi"])
            for r in rows
            if r["tp"] == tp and r["config"] in index and r["speedup"] is not None
        ]
        series.append(Series(f"TP {tp}", sorted(pts, key=lambda p: p.x), color=i))
    return Chart(
        title=title,
        kind="bars",
        xlabel="",
        ylabel=f"{figure_axis('speedup')} over " + (label(inp, base) if base else "the baseline"),
        series=series,
        categories=[marked(inp, c, rows[0]["host"], tps) for c in configs] if rows else [],
        hline=1.0,
        ymin=0.0,
        wide=True,
        bars=interval_bars(FIELLER_BARS, (r.get("n") for r in rows)),
    )


def _point_table(inp: Inputs, df: pl.DataFrame, host: str, tp: int, workload: str) -> Table | None:
    """Speed-up by prompt set and by output length: point estimates, one column each."""
    part = df.filter(
        (pl.col("host") == host) & (pl.col("tp") == tp) & (pl.col("workload") == workload)
    )
    if part.height == 0:
        return None
    sets = sorted({str(s) for s in part["prompt_set"].drop_nulls().unique().to_list()})
    lengths = sorted({int(m) for m in part["max_tokens"].drop_nulls().unique().to_list()})
    if len(sets) + len(lengths) <= 2:
        return None
    values: dict[tuple[str, str], float | None] = {}
    for col, names in (("prompt_set", sets), ("max_tokens", lengths)):
        if len(names) < 2:
            continue
        ranked = rank_decode(part, [*SCOPE, col], inp)
        for it in ranked:
            if it.speedup is not None:
                values[(it.key["config"], f"{col}:{it.key[col]}")] = it.speedup.value
    if not values:
        return None  # no point has a speed-up (untimed, or no baseline there)
    order = config_rank(inp)
    base = baseline(inp)
    configs = sorted(
        {c for c, _ in values if c != base}, key=lambda c: (order.get(c, len(order)), c)
    )
    heads = [f"prompt_set:{s}" for s in sets] if len(sets) > 1 else []
    heads += [f"max_tokens:{m}" for m in lengths] if len(lengths) > 1 else []
    cols = [Column("Config", "l")] + [
        Column(h.split(":", 1)[1] if h.startswith("prompt_set") else h.split(":", 1)[1] + " tok")
        for h in heads
    ]
    rows = [
        [Cell(marked(inp, c, host, [tp]))] + [Cell(f.speedup(values.get((c, h)))) for h in heads]
        for c in configs
    ]
    return Table(
        f"Speed-up by prompt set and by max output tokens, {workload}, TP {tp} on {host} "
        "(point estimates; intervals of the pooled figure in the table above)",
        cols,
        rows,
        small=True,
    )


def budget_params(inp: Inputs) -> dict[str, tuple[str, str, float]]:
    """Config -> (base name, parameter, value) for configs expanded from one numeric parameter
    (``params = { budget = [...] }``), as the planned cells in ``campaign_started`` carry it."""
    out: dict[str, tuple[str, str, float]] = {}
    for c in inp.state.cells.values():
        if c.cell is None or c.config in out or len(c.cell.params) != 1 or c.config in inp.forced:
            continue
        ((key, value),) = c.cell.params
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        parts = c.config.rsplit("-", 1)
        base = parts[0] if len(parts) == 2 else c.config
        out[c.config] = (base, str(key), float(value))
    bases: dict[tuple[str, str], set[float]] = {}
    for base, key, value in out.values():
        bases.setdefault((base, key), set()).add(value)
    return {c: v for c, v in out.items() if len(bases[(v[0], v[1])]) >= 2}


def budget_charts(inp: Inputs, rows: list[dict[str, Any]], host: str, workload: str) -> list[Chart]:
    """Accept length and speed-up against the parameter (the tree budget), one series per TP:
    the curve that peaks at a middle budget."""
    params = budget_params(inp)
    if not params:
        return []
    cols = ["host", "workload", "kind", "tp", "config", "cell_id", "unit", *ACCEPT_COLUMNS]
    df = subset(inp, cols).filter(
        (pl.col("kind") == "single")
        & (pl.col("host") == host)
        & (pl.col("workload") == workload)
        & pl.col("config").is_in(list(params))
    )
    acc = {}
    if df.height:
        # Each repeat's accept length as the engine defines it, then the mean over repeats.
        per_unit: dict[tuple[int, str], list[float]] = {}
        for r in accept_frame(df, ["tp", "config", "unit"]).to_dicts():
            if r["accept_len_weighted"] is not None:
                per_unit.setdefault((r["tp"], r["config"]), []).append(r["accept_len_weighted"])
        for k, values in per_unit.items():
            m = mean_ci(values)
            if m is not None:
                acc[k] = m
    charts = []
    for base, key in sorted({(b, k) for b, k, _ in params.values()}):
        members = {c: v for c, (b, k, v) in params.items() if (b, k) == (base, key)}
        tps = sorted({r["tp"] for r in rows if r["config"] in members})
        sp, al = [], []
        for i, tp in enumerate(tps):
            pts = [
                Point(members[r["config"]], r["speedup"], r["speedup_lo"], r["speedup_hi"])
                for r in rows
                if r["tp"] == tp and r["config"] in members and r["speedup"] is not None
            ]
            sp.append(Series(f"TP {tp}", sorted(pts, key=lambda p: p.x), color=i))
            apts = []
            for c, v in members.items():
                m = acc.get((tp, c))
                if m is not None:
                    apts.append(Point(v, m.mean, m.lo, m.hi))
            al.append(Series(f"TP {tp}", sorted(apts, key=lambda p: p.x), color=i))
        flagged = sorted(
            {marked(inp, c, host, tps) for c in members} - {label(inp, c) for c in members}
        )
        said = f"; {', '.join(flagged)}" if flagged else ""
        charts.append(
            Chart(
                f"{base}: accept length against {key} ({workload}, {host}){said}",
                "lines",
                key,
                figure_axis("accept_length"),
                al,
                xlog=True,
                bars=interval_bars(MEAN_BARS, (m.n for m in acc.values())),
            )
        )
        charts.append(
            Chart(
                f"{base}: speed-up against {key} ({workload}, {host}){said}",
                "lines",
                key,
                f"{figure_axis('speedup')} ({FIGURE_NAMES['decode_tok_s_total']})",
                sp,
                xlog=True,
                hline=1.0,
                bars=interval_bars(
                    FIELLER_BARS, (r.get("n") for r in rows if r["config"] in members)
                ),
            )
        )
    return [c for c in charts if c.has_points]


def build(inp: Inputs) -> Section | None:
    cmp = compared(inp).filter(pl.col("kind") == "single")
    if cmp.height == 0:
        return None
    sec = Section("Single-stream decoding")
    sec.add(
        Para(
            text(
                "One request at a time. The unit is a repeat (one pass over the workload's "
                "prompts and output lengths): n is the number of repeats, and the interval is "
                "the 95% Student-t interval of the mean over them. Decode tok/s is "
                f"{DECODE_DEFINITION} Speed-up is the ratio to the baseline's mean at the same "
                "host, TP and workload. ",
                MARKS_EXPLAINED,
            )
        )
    )
    point_cols = [
        *SCOPE,
        "config",
        "prompt_set",
        "max_tokens",
        "cell_id",
        "unit",
        "decode_tok_s",
        *ACCEPT_COLUMNS,
    ]
    req = subset(inp, point_cols, pl.col("kind") == "single")
    parts = sorted(cmp.partition_by("workload", as_dict=True).items())
    for (workload,), wpart in parts:
        wsec = workload_section(sec, workload, len(parts))
        for (host,), hpart in sorted(wpart.partition_by("host", as_dict=True).items()):
            rows_all = hpart.to_dicts()
            for tp in sorted({r["tp"] for r in rows_all}):
                rows = [r for r in rows_all if r["tp"] == tp]
                cap = f"Single-stream decode speed, {workload}, TP {tp} on {host}"
                wsec.add(tp_table(inp, rows, "single", cap))
                point = _point_table(inp, req, host, tp, workload)
                if point is not None:
                    wsec.add(point)
            chart = speedup_chart(rows_all, f"Speed-up per config and TP ({workload}, {host})", inp)
            charts = [chart] if chart.has_points else []
            charts += budget_charts(inp, rows_all, host, workload)
            if charts:
                wsec.add(Charts(charts))
    return sec

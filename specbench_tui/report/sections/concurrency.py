"""Concurrency: per host and TP, cell throughput, TTFT, TPOT and ITL against the number of
clients, the speed-up under load, and the Pareto view (tok/s per user against tok/s per GPU).

Each level is one cell, one unit: its requests overlap and are not independent samples, so the
figures have no interval and no config is marked best here; percentiles are over the cell's
requests. ITL per token comes from the cell's summary where the client recorded tokens per
chunk; otherwise only the chunk gap (per SSE event) is known, and the report says so.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from specbench_tui.bench.figures import (
    FIGURE_NAMES,
    defined,
    figure_axis,
    figure_name,
    figure_title,
)
from specbench_tui.report import format as f
from specbench_tui.report.blocks import (
    Cell,
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
    baseline,
    cell_energy,
    cell_figures,
    config_rank,
    marked,
    subset,
)
from specbench_tui.report.inputs import Inputs
from specbench_tui.report.sections import columns as C
from specbench_tui.report.sections.common import workload_section
from specbench_tui.report.stats import from_moments

KIND = "concurrency"
_KEYS = ["host", "tp", "workload", "config", "concurrency"]
#: The figures of each cell's own summary that the level table reads.
_CELL_FIGURES = (
    "throughput_tok_s",
    "itl_token_s_p50",
    "itl_token_s_p99",
    "itl_s_p50",
    "itl_s_p99",
    "coalesced_gap_share",
)


def level_frame(inp: Inputs) -> pl.DataFrame:
    """One row per concurrency level of a config: the client's percentiles over each cell's
    requests, its errors, and the cell summary's throughput and inter-token figures; with
    the plan's ``runs``, the mean over the level's cells (one per run, ``runs``) and the 95%
    interval of the cell throughput over them."""
    if "concurrency" in inp.cache:
        return inp.cache["concurrency"]
    cols = ["cell_id", "ttft_s", "tpot_s", "decode_tok_s", "output_tokens", "started_at", "e2e_s"]
    df = subset(inp, [*_KEYS, "kind", *cols], pl.col("kind") == KIND)
    if df.height == 0:
        inp.cache["concurrency"] = df
        return df
    q = pl.col
    agg = df.group_by("cell_id", *_KEYS).agg(
        pl.len().alias("ok"),
        q("ttft_s").quantile(0.5, "linear").alias("ttft_p50"),
        q("ttft_s").quantile(0.99, "linear").alias("ttft_p99"),
        q("tpot_s").quantile(0.5, "linear").alias("tpot_p50"),
        q("tpot_s").quantile(0.99, "linear").alias("tpot_p99"),
        # Token-weighted over the cell's requests (bench/figures.py), as its decode_tok_s_total.
        (q(DECODE_PARTS[0]).sum() / q(DECODE_PARTS[1]).sum()).alias("decode_tok_s"),
        q("output_tokens").sum().alias("tokens"),
        ((q("started_at") + q("e2e_s")).max() - q("started_at").min()).alias("span_s"),
    )
    errs = (
        inp.requests.filter(pl.col("kind") == KIND)
        .group_by("cell_id")
        .agg(
            pl.len().alias("sent"),
            (pl.col("error").is_not_null() & (pl.col("error") != "")).sum().alias("errors"),
        )
    )
    agg = agg.join(errs, on="cell_id", how="left")
    cells = cell_figures(inp)
    want = [c for c in _CELL_FIGURES if c in cells.columns]
    if cells.height and want:
        figs = cells.select(pl.col("cell_id").cast(pl.Categorical), *want)
        agg = agg.join(figs, on="cell_id", how="left")
    for c in _CELL_FIGURES:
        if c not in agg.columns:
            agg = agg.with_columns(pl.lit(None, dtype=pl.Float64).alias(c))
    # Cell throughput from the cell's summary; tokens over the requests' span where it has none.
    agg = agg.with_columns(
        pl.coalesce("throughput_tok_s", q("tokens") / q("span_s")).alias("throughput_tok_s"),
    )
    agg = _over_runs(agg).with_columns((q("throughput_tok_s") / q("tp")).alias("tok_s_per_gpu"))
    base = baseline(inp)
    if base:
        ref = agg.filter(q("config") == base).select(
            "host", "tp", "workload", "concurrency", q("throughput_tok_s").alias("_base")
        )
        agg = agg.join(ref, on=["host", "tp", "workload", "concurrency"], how="left")
        agg = agg.with_columns((q("throughput_tok_s") / q("_base")).alias("load_speedup"))
    else:
        agg = agg.with_columns(pl.lit(None, dtype=pl.Float64).alias("load_speedup"))
    inp.cache["concurrency"] = agg
    return agg


_SUMMED = ("ok", "sent", "errors", "tokens")


def _over_runs(per_cell: pl.DataFrame) -> pl.DataFrame:
    """A level's cells (one per run) as one row: counts summed, figures averaged, and the
    cell throughput's 95% interval over the cells where there are two or more."""
    figures = [c for c in per_cell.columns if c not in (*_KEYS, "cell_id", *_SUMMED)]
    out = per_cell.group_by(_KEYS).agg(
        pl.col("cell_id").first(),
        pl.len().alias("runs"),
        *(pl.col(c).sum() for c in _SUMMED if c in per_cell.columns),
        *(pl.col(c).mean() for c in figures),
        pl.col("throughput_tok_s").std().alias("_sd"),
    )
    rows = out.to_dicts()
    lo, hi = [], []
    for r in rows:
        m = (
            from_moments(r["throughput_tok_s"], r["_sd"], r["runs"])
            if r["throughput_tok_s"] is not None
            else None
        )
        lo.append(m.lo if m else None)
        hi.append(m.hi if m else None)
    return out.drop("_sd").with_columns(
        pl.Series("throughput_tok_s_lo", lo, dtype=pl.Float64),
        pl.Series("throughput_tok_s_hi", hi, dtype=pl.Float64),
    )


def _itl_name(rows: list[dict[str, Any]]) -> tuple[str, str]:
    """ITL per token where every cell has it, else the chunk gap: never one under the other's
    name. The cells' column stem and the figure's key."""
    if rows and all(r.get("itl_token_s_p50") is not None for r in rows):
        return "itl_token_s", "itl_token_s"
    return "itl_s", "chunk_gap_s"


def _gap_column(stem: str, figure: str, stat: str) -> C.Col:
    """The ITL or chunk-gap percentile's column."""
    return C.Col(
        f"{figure}_{stat}",
        figure_title(figure, stat=stat),
        lambda r: Cell(_gap(r, f"{stem}_{stat}")),
    )


#: The level table's columns before the inter-token ones.
LEVEL_COLUMNS = (
    C.CONFIG,
    C.CLIENTS,
    C.field("requests", "Requests", f.count, at="sent"),
    C.Col("errors", "Errors", lambda r: Cell(f.count(r.get("errors")), bold=bool(r.get("errors")))),
    C.THROUGHPUT_CI,
    C.LOAD_SPEEDUP,
    C.DECODE,
    C.TTFT_P50,
    C.TTFT_P99,
    C.TPOT_P50,
)


def _gap(r: dict[str, Any], key: str) -> str:
    """A chunk-gap or ITL figure in ms; "coalesced" where every gap of the cell fell inside one
    read (none was measured), never a 0.00 ms that no wire saw."""
    if r.get(key) is None and (r.get("coalesced_gap_share") or 0) > 0:
        return "coalesced"
    return f.ms(r.get(key))


def _coalesced_note(rows: list[dict[str, Any]]) -> list[str]:
    """Which cells had chunks that came several to a read: their gaps were not measured and
    are left out of the gap percentiles (ITL per token counts such chunks as one arrival)."""
    hit = [r for r in rows if (r.get("coalesced_gap_share") or 0) > 0]
    if not hit:
        return []
    worst = max(hit, key=lambda r: r["coalesced_gap_share"])
    return [
        f"In {f.plural(len(hit), 'cell')} some SSE events came in one read with the one before "
        f"(up to {f.share(worst['coalesced_gap_share'])} of the gaps, {worst['config']} at "
        f"{worst['concurrency']} clients): such gaps were never on the wire, so they are left "
        "out of the gap percentiles; 'coalesced' marks a cell with none measured."
    ]


def _series(
    inp: Inputs,
    rows: list[dict[str, Any]],
    y: str,
    *,
    x: str = "concurrency",
    dashed: bool = False,
    scale: float = 1.0,
) -> list[Series]:
    """One series per config, its points in the order of the client counts (the Pareto curve
    runs from one client to the most)."""
    order = config_rank(inp)
    configs = sorted({r["config"] for r in rows}, key=lambda c: (order.get(c, len(order)), c))
    out = []
    for c in configs:
        pts = [
            Point(float(r[x]), float(r[y]) * scale)
            for r in sorted(rows, key=lambda r: r["concurrency"])
            if r["config"] == c and r.get(y) is not None and r.get(x) is not None
        ]
        mine = [r for r in rows if r["config"] == c]
        name = marked(inp, c, mine[0]["host"], {r["tp"] for r in mine}) + (" p99" if dashed else "")
        out.append(Series(name, pts, color=order.get(c, 0), dashed=dashed))
    return out


def build(inp: Inputs) -> Section | None:
    lv = level_frame(inp)
    if lv.height == 0:
        return None
    order = config_rank(inp)
    sec = Section("Concurrency")
    sec.add(
        Para(
            text(
                "Clients send requests back to back, the given number at once. "
                f"{defined('throughput_tok_s')} {defined('decode_tok_s_total')} "
                f"{defined('load_speedup')} Percentiles are over the cell's requests. Each "
                "level is a single cell (one unit), so these figures carry no interval and no "
                "config is marked best."
                + (
                    " With the plan's runs, each level has a cell per run (a fresh server "
                    "each): its figures are means over them, and cell throughput carries its "
                    "95% interval over runs."
                    if int(lv["runs"].max() or 1) > 1
                    else ""
                )
            )
        )
    )
    parts = sorted(lv.partition_by("workload", as_dict=True).items())
    energy = cell_energy(inp)
    for (workload,), wpart in parts:
        wsec = workload_section(sec, workload, len(parts))
        for host, tp in sorted({(r["host"], r["tp"]) for r in wpart.to_dicts()}):
            rows = [r for r in wpart.to_dicts() if (r["host"], r["tp"]) == (host, tp)]
            rows.sort(key=lambda r: (order.get(r["config"], len(order)), r["concurrency"]))
            stem, gap = _itl_name(rows)
            for r in rows:
                r["label"] = marked(inp, r["config"], host, [tp])
                r["j_per_token"] = energy.get(
                    (host, tp, KIND, workload, r["concurrency"], r["config"]), {}
                ).get("j_per_token")
            cols = [
                *LEVEL_COLUMNS,
                _gap_column(stem, gap, "p50"),
                _gap_column(stem, gap, "p99"),
                *C.with_energy(rows, C.J_TOKEN),
            ]
            notes = (
                []
                if stem == "itl_token_s"
                else [
                    "Only the chunk gap per SSE event was recorded for these cells; a speculative "
                    "server sends several tokens per event, so it is not ITL per token."
                ]
            )
            notes += _coalesced_note(rows)
            caption = f"Concurrency, {workload}, TP {tp} on {host}"
            wsec.add(C.table(caption, cols, rows, notes=notes, small=True))
            where = f"TP {tp} ({workload}, {host})"
            wsec.add(
                Charts(
                    [
                        Chart(
                            f"Cell throughput, {where}",
                            "lines",
                            "clients",
                            figure_axis("throughput_tok_s"),
                            _series(inp, rows, "throughput_tok_s"),
                            xlog=True,
                            ymin=0.0,
                        ),
                        Chart(
                            f"TTFT p50 (solid) and p99 (dashed), {where}",
                            "lines",
                            "clients",
                            figure_axis("ttft_s"),
                            _series(inp, rows, "ttft_p50", scale=1000)
                            + _series(inp, rows, "ttft_p99", dashed=True, scale=1000),
                            xlog=True,
                            ymin=0.0,
                        ),
                        Chart(
                            f"{figure_name(gap)} p50 (solid) and p99 (dashed), {where}",
                            "lines",
                            "clients",
                            figure_axis(gap),
                            _series(inp, rows, f"{stem}_p50", scale=1000)
                            + _series(inp, rows, f"{stem}_p99", dashed=True, scale=1000),
                            xlog=True,
                            ymin=0.0,
                        ),
                        Chart(
                            f"Pareto view, {where}",
                            "lines",
                            f"tok/s per GPU ({FIGURE_NAMES['throughput_tok_s']} / TP)",
                            f"tok/s per user ({FIGURE_NAMES['decode_tok_s_total']})",
                            _series(inp, rows, "decode_tok_s", x="tok_s_per_gpu"),
                            ymin=0.0,
                        ),
                    ]
                )
            )
    return sec

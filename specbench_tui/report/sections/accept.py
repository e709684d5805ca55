"""Accept length per host, TP and workload (a workload at several temperatures is one per
temperature, as the report names it), never pooled across them: the engine's own
definition over the counts summed over the requests (its adapter's
``accept_length_definition``: what its counters give, and what a step delivers on average)
and, beside it, the request mean (each request's accept length, averaged). The two differ
whenever short and long requests accept differently, so both are shown."""

from __future__ import annotations

import polars as pl

from specbench_tui.bench.figures import figure_title
from specbench_tui.engines.registry import adapter
from specbench_tui.report import format as f
from specbench_tui.report.blocks import Cell, Column, Para, Section, Table, text
from specbench_tui.report.frames import (
    ACCEPT_COLUMNS,
    accept_definitions,
    accept_frame,
    config_rank,
    label,
    marked,
    subset,
)
from specbench_tui.report.inputs import Inputs

KINDS = ("single", "agentic", "concurrency")


def accept_by_workload(inp: Inputs) -> pl.DataFrame:
    """Per host, TP, workload and config (speculative requests only)."""
    keys = ["host", "tp", "kind", "workload", "config"]
    df = subset(inp, [*keys, *ACCEPT_COLUMNS])
    if df.height == 0:
        return df
    # Every request counts (one that ended on its first token may add a token and no step,
    # as in the engine's counters); configs without speculation have no figure and no row.
    acc = accept_frame(df, keys)
    return acc.filter(
        pl.col("accept_len_weighted").is_not_null() | pl.col("accept_len_mean").is_not_null()
    )


def without_accept_length(inp: Inputs, acc: pl.DataFrame) -> list[str]:
    """A line for each speculative config that ran but reported no per-request accept
    length, saying why: a missing config must not read as one that was never run."""
    have = {
        (r["host"], r["tp"], r["config"]) for r in acc.select("host", "tp", "config").to_dicts()
    }
    ran = {
        (r["host"], r["tp"], r["config"])
        for r in subset(inp, ["host", "tp", "config"]).unique().to_dicts()
    }
    out = []
    for g in sorted(
        (s.group for s in inp.state.groups.values() if s.group is not None),
        key=lambda g: (g.host, g.tp, g.config),
    ):
        key = (g.host, g.tp, g.config)
        if not g.speculative or key in have or key not in ran:
            continue
        why = adapter(g.engine).missing_accept_length(g.api)
        out.append(
            f"{label(inp, g.config)} (TP {g.tp} on {g.host}): no per-request accept length; {why}."
        )
    return list(dict.fromkeys(out))


def build(inp: Inputs) -> Section | None:
    acc = accept_by_workload(inp)
    missing = without_accept_length(inp, acc)
    if acc.height == 0:
        if not missing:
            return None
        sec = Section("Accept length")
        for line in missing:
            sec.add(Para(text(line)))
        return sec
    order = config_rank(inp)
    rank = {k: i for i, k in enumerate(KINDS)}
    kinds = sorted(
        {(r["kind"], r["workload"]) for r in acc.select("kind", "workload").to_dicts()},
        key=lambda kw: (rank.get(kw[0], len(rank)), kw[1]),
    )
    kinds = [w for _, w in kinds]
    has_rate = acc["acceptance_rate"].drop_nulls().len() > 0
    sec = Section("Accept length")
    sec.add(
        Para(
            text(
                "Accepted tokens per verification step, bonus token included, from the "
                "server's own counts for each request, per TP and workload (one per temperature). "
                "Accept length: "
                "the engine's own definition over the counts summed over the requests "
                f"({accept_definitions(inp)}), "
                "which is what its counters give. Request mean: the mean of the requests' "
                "accept lengths."
                + (" Acceptance rate: accepted over drafted tokens." if has_rate else "")
            )
        )
    )
    cols = [Column("Config", "l")]
    accept = figure_title("accept_length", lead=False)
    mean = figure_title("accept_length", scope="request mean", lead=False)
    for k in kinds:
        cols += [Column(f"{k} {accept}"), Column(f"{k} {mean}")]
        if has_rate:
            cols.append(Column(f"{k} {figure_title('acceptance_rate', lead=False)}"))
    for host, tp in sorted({(r["host"], r["tp"]) for r in acc.to_dicts()}):
        part = {
            (r["config"], r["workload"]): r
            for r in acc.to_dicts()
            if (r["host"], r["tp"]) == (host, tp)
        }
        configs = sorted({c for c, _ in part}, key=lambda c: (order.get(c, len(order)), c))
        rows = []
        for c in configs:
            cells = [Cell(marked(inp, c, host, [tp]))]
            for k in kinds:
                r = part.get((c, k), {})
                cells += [
                    Cell(f.accept(r.get("accept_len_weighted"))),
                    Cell(f.accept(r.get("accept_len_mean"))),
                ]
                if has_rate:
                    cells.append(Cell(f.share(r.get("acceptance_rate"))))
            rows.append(cells)
        sec.add(
            Table(
                f"Accept length, TP {tp} on {host}",
                cols,
                rows,
                small=True,
                column_group=3 if has_rate else 2,  # a workload's figures stay together
            )
        )
    for line in missing:
        sec.add(Para(text(line)))
    return sec

"""Per-dataset tables in the papers' shape (Spec-Bench, EAGLE-3, DFlash, DDTree): per host and
TP size, one row per config, and for each dataset (a prompt set, or a category of a standard
set) the speed-up and the accept length (the papers' tau) side by side, then the mean over datasets;
a workload run at several temperatures has its rows for each, in the same table.

Figures are the report's own (report/frames.py, bench/figures.py): speed-up is the ratio of
decode tok/s to the baseline's on the same host, TP, workload and dataset, with Fieller's
interval in the CSV; accept length is the engine's over the counts pooled per dataset (the
CSV's ``tau``).
Every expansion of a parametrized config is a row: no budget is picked after the fact.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from specbench_tui.bench.figures import FIGURE_NAMES, figure_name
from specbench_tui.report import format as f
from specbench_tui.report.blocks import Cell, Column, Para, Section, Table, text
from specbench_tui.report.frames import (
    ACCEPT_COLUMNS,
    NOT_COMPARABLE_MARK,
    SCOPE,
    accept_rows,
    baseline,
    config_rank,
    label,
    marked,
    rank_decode,
    subset,
)
from specbench_tui.report.inputs import Inputs

RULE = (
    f"{figure_name('speedup')}: {FIGURE_NAMES['decode_tok_s_total']} over the baseline's on "
    "the same host, TP, workload, temperature and dataset. "
    f"{figure_name('accept_length')} (the papers' tau): accepted tokens per verify step, "
    "bonus token included, as the engine counts them, pooled over the dataset's requests. "
    "Mean: the plain mean of the row's datasets (as the papers report it). Bold marks the "
    "highest speed-up of a dataset only where Welch's test (5%) tells its decode tok/s apart "
    "from the runner-up's; nothing is marked where it cannot (one repeat leaves nothing to "
    "test), and the Mean column is never marked. Every budget of a parametrized config is a "
    "row of its own: none is chosen after the fact. Intervals are in the table's CSV. A "
    "config that failed a correctness check, that no verdict covers, or whose measurement is "
    "not comparable with the baseline's carries its mark beside its name, and is never bold."
)
KEYS = [*SCOPE, "prompt_set", "config"]
SPEEDUP, ACCEPT = FIGURE_NAMES["speedup"], FIGURE_NAMES["accept_length"]


#: Under each table: where its figures are defined, not the definitions again (the section
#: says them once, above its tables).
NOTE = (
    f"{figure_name('speedup')} and {FIGURE_NAMES['accept_length']} as the section defines "
    "them above; a mark beside a config's name as "
    "there; the intervals are in the table's CSV."
)


def _base_workloads(inp: Inputs) -> dict[str, str]:
    return {cid: c.workload for cid, c in inp.state.cells.items()}


def dataset_rows(inp: Inputs) -> list[dict[str, Any]]:
    """One row per host, TP, workload, output cap, temperature, dataset and config: the
    figures of the per-dataset tables, also what their CSV holds."""
    cols = [*KEYS, "cell_id", "unit", "max_tokens", "temperature", "decode_tok_s"]
    df = subset(inp, [*cols, *ACCEPT_COLUMNS], pl.col("kind") == "single")
    if df.height == 0:
        return []
    df = df.with_columns(
        pl.col("cell_id")
        .cast(pl.String)
        .replace_strict(_base_workloads(inp), default=None, return_dtype=pl.String)
        .alias("base_workload"),
        pl.col("prompt_set").cast(pl.String).fill_null("(all)"),
    )
    scope = [k for k in (*KEYS, "max_tokens") if k != "config"]
    keys = [*scope, "config"]  # rank_decode's order of a key
    accept = accept_rows(df, keys)
    ranked = rank_decode(df, scope, inp, accept)
    extra = {
        tuple(r[k] for k in keys): r
        for r in df.group_by(keys)
        .agg(pl.col("base_workload").first(), pl.col("temperature").first())
        .to_dicts()
    }
    base = baseline(inp)
    out = []
    for it in ranked:
        k = tuple(it.key[c] for c in keys)
        sp, a, x = it.speedup, accept.get(k, {}), extra.get(k, {})
        out.append(
            {
                "host": it.key["host"],
                "tp": it.key["tp"],
                "workload": x.get("base_workload") or it.key["workload"],
                "max_tokens": it.key["max_tokens"],
                "temperature": x.get("temperature"),
                "dataset": it.key["prompt_set"],
                "config": it.key["config"],
                "label": label(inp, it.key["config"]),
                "baseline": it.key["config"] == base,
                "units": it.n,
                "requests": it.requests,
                "decode_tok_s": it.mean,
                "speedup": sp.value if sp else None,
                "speedup_lo": sp.lo if sp else None,
                "speedup_hi": sp.hi if sp else None,
                "speedup_too_few": bool(sp and sp.too_few),
                "tau": a.get("accept_len_weighted"),
                "best": it.best,
                "failed_check": it.failed_check or None,
                "why": it.doubt or None,  # not comparable with the baseline (the audit's)
            }
        )
    return out


def _mean(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return sum(got) / len(got) if got and len(got) == len(values) else None


def _table(inp: Inputs, rows: list[dict[str, Any]], where: str) -> Table:
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    temps = sorted({r["temperature"] for r in rows if r["temperature"] is not None})
    order = config_rank(inp)
    configs = sorted({r["config"] for r in rows}, key=lambda c: (order.get(c, len(order)), c))
    by = {(r["temperature"], r["config"], r["dataset"]): r for r in rows}
    host, tp = rows[0]["host"], rows[0]["tp"]
    unlike = {(r["temperature"], r["config"]) for r in rows if r["why"]}
    cols = [Column("Config", "l")] + ([Column("T")] if len(temps) > 1 else [])
    for d in datasets:
        cols += [Column(f"{d} {SPEEDUP}"), Column(f"{d} {ACCEPT}")]
    cols += [Column(f"Mean {SPEEDUP}"), Column(f"Mean {ACCEPT}")]
    body: list[list[Cell]] = []
    csv: list[dict[str, Any]] = []
    for t in temps or [None]:
        for c in configs:
            name = marked(inp, c, host, [tp]) + (
                f" [{NOT_COMPARABLE_MARK}]" if (t, c) in unlike else ""
            )
            cells = [Cell(name)] + ([Cell(f"{t:g}")] if len(temps) > 1 else [])
            speedups, taus = [], []
            for d in datasets:
                r = by.get((t, c, d))
                value = 1.0 if r and r["baseline"] else (r or {}).get("speedup")
                speedups.append(value)
                taus.append((r or {}).get("tau"))
                cells += [
                    Cell(f.speedup(value), bold=bool(r and r["best"])),
                    Cell(f.accept(taus[-1])),
                ]
                if r:
                    csv.append(dict(r))
            cells += [Cell(f.speedup(_mean(speedups))), Cell(f.accept(_mean(taus)))]
            body.append(cells)
            first = next((r for d in datasets if (r := by.get((t, c, d)))), None)
            if first is not None:
                csv.append(
                    {
                        **{k: first[k] for k in ("host", "tp", "workload", "max_tokens")},
                        "temperature": t,
                        "dataset": "mean",
                        "config": c,
                        "speedup": _mean(speedups),
                        "tau": _mean(taus),
                        "label": first["label"],
                    }
                )
    return Table(
        f"{figure_name('speedup')} and {ACCEPT} per dataset, {where}",
        cols,
        body,
        notes=[NOTE],
        small=True,
        csv=csv,
        key_columns=2 if len(temps) > 1 else 1,
        column_group=2,  # a dataset's speed-up and accept length stay together
    )


def build(inp: Inputs) -> Section | None:
    rows = dataset_rows(inp)
    if not rows:
        return None
    sec = Section("Per-dataset speed-up and accept length")
    sec.add(Para(text(RULE)))
    scopes: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        scopes.setdefault((r["host"], r["tp"], r["workload"], r["max_tokens"]), []).append(r)
    for (host, tp, workload, mt), part in sorted(
        scopes.items(), key=lambda kv: tuple(str(v) for v in kv[0])
    ):
        sec.add(_table(inp, part, f"{workload}, up to {mt} tokens, TP {tp} on {host}"))
    return sec

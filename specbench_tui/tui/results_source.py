"""Where the console's results table comes from: the report's own aggregation, through one
adapter function, so the live table and the report can never disagree.

``comparison(root)`` is the only call into ``specbench_tui.report``. It returns one row per
(host, TP, workload, prompt set, max tokens, config) with the columns in ``COLUMNS``; the
results pane shows whatever rows and optional columns it gets (a null interval is not shown).
When the report grows its comparison frame (``report.frames.comparison``), this function's
body becomes that call and a column rename; the pane does not change.

Today's figures, all from ``report.aggregate`` (the report's single-stream table): ``tok_s``
is the median output tok/s per request and ``speedup`` its ratio to the baseline's on the
same host, TP, workload, prompt set and length, both as ``single_stream`` computes them over
the counted attempt of each finished cell. The 95% intervals come from the same function run
on each repeat's rows alone (a t-interval over the per-repeat figures), so they exist only
when a point has two repeats or more. No textual import: it runs in a worker thread.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import polars as pl

from specbench_tui.report import aggregate

COLUMNS: dict[str, pl.DataType | type[pl.DataType]] = {
    "host": pl.String,
    "tp": pl.Int64,
    "workload": pl.String,
    "prompt_set": pl.String,
    "max_tokens": pl.Int64,
    "config": pl.String,
    "label": pl.String,
    "baseline": pl.Boolean,
    "repeats": pl.Int64,  # repeats behind the interval (0: no repeat column in the rows)
    "requests": pl.Int64,
    "tok_s": pl.Float64,
    "tok_s_lo": pl.Float64,
    "tok_s_hi": pl.Float64,
    "speedup": pl.Float64,
    "speedup_lo": pl.Float64,
    "speedup_hi": pl.Float64,
    "accept_mean": pl.Float64,  # request-mean accept length
    "accept_weighted": pl.Float64,  # token-weighted (null until the report computes it)
    "failed_check": pl.String,  # why the config failed a correctness check, null if it did not
    "best": pl.Boolean,  # fastest at its point, and distinguishable from the runner-up
}

# Two-sided 95% Student t quantiles by degrees of freedom; 1.96 beyond the table.
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306}
_T95 |= {9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def _t95(df: int) -> float:
    for k in sorted(_T95):
        if df <= k:
            return _T95[k]
    return 1.96


def interval(values: list[float]) -> tuple[float | None, float | None]:
    """95% t-interval of the mean of ``values``; (None, None) with fewer than two."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    k = len(vals)
    if k < 2:
        return None, None
    mean = sum(vals) / k
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (k - 1))
    half = _t95(k - 1) * sd / math.sqrt(k)
    return mean - half, mean + half


def empty() -> pl.DataFrame:
    return pl.DataFrame(schema=COLUMNS)


def _key(workload: str, r: dict[str, Any]) -> tuple[Any, ...]:
    return (workload, r["config"], r["tp"], r["prompt_set"], r["max_tokens"])


def comparison(root: Path) -> pl.DataFrame:
    """The comparison table of the results directory ``root`` (see the module docstring)."""
    inp = aggregate.load_inputs(root)
    req = aggregate.counted_requests(inp)
    if req is None or req.height == 0:
        return empty()
    # The report's own choice of baseline, order and labels (as build_report makes it).
    known = list(inp.config_order) + [
        str(c) for c in req["config"].unique().to_list() if c is not None
    ]
    baseline = aggregate._baseline(inp.plan, known)
    order = aggregate._Order(inp.config_order, baseline)
    labels = {c: inp.labels.get(c, c) for c in known}
    checks = {
        (c.host, c.config, c.tp): c.check_failed for c in inp.state.cells.values() if c.check_failed
    }
    hosts = sorted({str(h) for h in req["host"].unique().to_list() if h is not None}) or [""]
    rows: list[dict[str, Any]] = []
    for host in hosts:
        mine = req.filter(pl.col("host") == host) if host else req
        main = aggregate.single_stream(mine, baseline, order, labels)
        per_repeat: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        if "repeat" in mine.columns:
            for rep in sorted(r for r in mine["repeat"].unique().to_list() if r is not None):
                part = mine.filter(pl.col("repeat") == rep)
                for sec in aggregate.single_stream(part, baseline, order, labels):
                    for r in sec["rows"]:
                        per_repeat.setdefault(_key(sec["workload"], r), []).append(r)
        for sec in main:
            for r in sec["rows"]:
                reps = per_repeat.get(_key(sec["workload"], r), [])
                tok_lo, tok_hi = interval([x["tok_s"] for x in reps])
                sp_lo, sp_hi = (
                    (None, None) if r["baseline"] else interval([x["speedup"] for x in reps])
                )
                rows.append(
                    {
                        "host": host,
                        "tp": r["tp"],
                        "workload": sec["workload"],
                        "prompt_set": r["prompt_set"],
                        "max_tokens": r["max_tokens"],
                        "config": r["config"],
                        "label": r["label"],
                        "baseline": r["baseline"],
                        "repeats": len(reps),
                        "requests": r["n"],
                        "tok_s": r["tok_s"],
                        "tok_s_lo": tok_lo,
                        "tok_s_hi": tok_hi,
                        "speedup": r["speedup"],
                        "speedup_lo": sp_lo,
                        "speedup_hi": sp_hi,
                        "accept_mean": r["accept_length"],
                        "accept_weighted": None,
                        "failed_check": checks.get((host, r["config"], r["tp"])),
                        "best": False,
                    }
                )
    mark_best(rows)
    return pl.DataFrame(rows, schema=COLUMNS)


def mark_best(rows: list[dict[str, Any]]) -> None:
    """At each point (host, TP, workload, prompt set, length) the fastest config that passed
    its checks is best only when its interval clears the runner-up's: a lead inside the noise
    is not a winner."""
    points: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        if r["failed_check"] or r["tok_s"] is None:
            continue
        key = (r["host"], r["tp"], r["workload"], r["prompt_set"], r["max_tokens"])
        points.setdefault(key, []).append(r)
    for group in points.values():
        if len(group) < 2:
            continue
        group.sort(key=lambda r: r["tok_s"], reverse=True)
        top, second = group[0], group[1]
        if top["tok_s_lo"] is not None and second["tok_s_hi"] is not None:
            top["best"] = top["tok_s_lo"] > second["tok_s_hi"]

"""Where the console's results table comes from: the report's own comparison frame
(``report.frames.comparison``), through this one adapter, so the live table and the report
can never disagree.

This module is the console's only way into ``specbench_tui.report``. ``comparison(root)``
returns two kinds of
row with the columns in ``COLUMNS``: per (host, TP, workload kind, workload, concurrency
level, config, prompt set, length) the figures of that point alone (``pooled`` false; a
workload run at several temperatures is one workload per temperature, ``single T=1``, as the
report names it), and the report's own pooled row per (host, TP, kind, workload, level,
config) (``pooled`` true), which the pane folds to on demand: pooling prompt sets hid a 2x
spread (translate against code) behind one figure. ``partial`` is ``done/planned`` where
fewer of the row's planned cells have finished than are planned: such a row covers only
the sets that finished, so it is never best. The figures are the report's, under the
names the pane shows. ``tok_s`` is decode tok/s (TTFT excluded, token-weighted within each
repeat), the mean over repeats with its 95% interval; ``speedup`` is its ratio to the
baseline's at the same point, with Fieller's interval (``speedup_too_few``: too few repeats
to bound it); ``accept`` is the accept length as the engine defines it, what its own
counters give; ``j_per_token`` is GPU board energy per output token (the report's
pooling, ``report/energy_pool.py``), null where the host's GPUs are not read; ``best`` is
the report's (fastest, and told apart from the runner-up). No
textual import: it runs in a worker thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from specbench_tui.report.frames import (
    SCOPE,
    accept_rows,
    baseline,
    cell_energy,
    group_kinds,
    implausible,
    label,
    rank_decode,
    requests,
    workload_names,
)
from specbench_tui.report.frames import comparison as report_comparison
from specbench_tui.report.inputs import Inputs, load_inputs
from specbench_tui.report.stats import TOO_FEW

__all__ = ["COLUMNS", "TOO_FEW", "comparison", "empty"]

COLUMNS: dict[str, pl.DataType | type[pl.DataType]] = {
    "host": pl.String,
    "tp": pl.Int64,
    "workload": pl.String,
    "prompt_set": pl.String,
    "max_tokens": pl.Int64,
    "config": pl.String,
    "label": pl.String,
    "baseline": pl.Boolean,
    "repeats": pl.Int64,  # units behind the interval: repeats, or runs where ``runs``
    "runs": pl.Boolean,  # the units are the plan's runs (a fresh server each), not repeats
    "requests": pl.Int64,
    "tok_s": pl.Float64,  # decode tok/s (token-weighted per repeat), mean over repeats
    "tok_s_lo": pl.Float64,
    "tok_s_hi": pl.Float64,
    "speedup": pl.Float64,
    "speedup_lo": pl.Float64,
    "speedup_hi": pl.Float64,
    "speedup_too_few": pl.Boolean,  # too few repeats to bound the speed-up
    "accept": pl.Float64,  # accept length as the engine defines it (its counters' figure)
    "accept_mean": pl.Float64,  # the plain mean of the requests' accept lengths
    "j_per_token": pl.Float64,  # GPU board energy per output token, where the GPUs are read
    "failed_check": pl.String,  # why the config failed a correctness check, null if it did not
    "unchecked": pl.String,  # why no verdict covers its outputs (never best), null if one does
    "implausible": pl.String,  # why the speed-up cannot be what it says (never best), else null
    "why": pl.String,  # every reason the row is not comparable with its baseline, else null
    "best": pl.Boolean,  # fastest at its point, and distinguishable from the runner-up
    "pooled": pl.Boolean,  # the report's row over every prompt set and length of the workload
    "partial": pl.String,  # "done/planned" while some of the row's planned cells are not done
}

#: What a row per point adds to the report's scope (its pooled row leaves them out).
POINT = ("prompt_set", "max_tokens")


def empty() -> pl.DataFrame:
    return pl.DataFrame(schema=COLUMNS)


def comparison(root: Path) -> pl.DataFrame:
    """The comparison table of the results directory ``root`` (see the module docstring)."""
    inp = load_inputs(root)
    frame = report_comparison(inp)
    if frame.height == 0:
        return empty()
    cells = _cell_counts(inp)
    rows: list[dict[str, Any]] = []
    for r in frame.to_dicts():
        level = r.get("concurrency") or 0
        done, planned = _counted(cells, r, pooled=True)
        rows.append(
            {
                "host": r["host"],
                "tp": r["tp"],
                "workload": r["workload"],
                "prompt_set": f"c{level}" if r["kind"] == "concurrency" else r["kind"],
                "max_tokens": None,
                "config": r["config"],
                "label": r["label"],
                "baseline": r["baseline"],
                "repeats": r["n"],
                "runs": bool(r["between_runs"]),
                "requests": r["requests"],
                "tok_s": r["decode_tok_s"],
                "tok_s_lo": r["decode_tok_s_lo"],
                "tok_s_hi": r["decode_tok_s_hi"],
                "speedup": r["speedup"],
                "speedup_lo": r["speedup_lo"],
                "speedup_hi": r["speedup_hi"],
                "speedup_too_few": bool(r["speedup_too_few"]),
                "accept": r["accept_len_weighted"],
                "accept_mean": r["accept_len_mean"],
                "j_per_token": r["j_per_token"],
                "failed_check": (r["check_reason"] or "failed a check")
                if r["failed_check"]
                else None,
                "unchecked": (r["check_reason"] or "unchecked") if r["unchecked"] else None,
                "implausible": r["implausible"],
                "why": r["why"],
                "best": bool(r["best"]) and done >= planned,
                "pooled": True,
                "partial": f"{done}/{planned}" if done < planned else None,
            }
        )
    rows.extend(_point_rows(inp, cells))
    return pl.DataFrame(rows, schema=COLUMNS)


def _point_rows(inp: Inputs, cells: dict[tuple[Any, ...], list[int]]) -> list[dict[str, Any]]:
    """One row per point: the report's own statistics (per-unit moments, the ranking with
    its speed-up interval and best, the engine's accept length) over a scope that keeps the
    prompt set and the length apart."""
    df = requests(inp)
    scope = [*SCOPE, *POINT]
    keys = [*scope, "config"]
    if df.height == 0:
        return []
    acc = accept_rows(df, keys)
    ranked = rank_decode(df, scope, inp, acc)
    runs = df.group_by(keys).agg(pl.col("between_runs").any())
    across = {tuple(r[k] for k in keys): bool(r["between_runs"]) for r in runs.to_dicts()}
    base = baseline(inp)
    energy = cell_energy(inp, POINT)
    out: list[dict[str, Any]] = []
    for it in ranked:
        k = tuple(it.key[c] for c in keys)
        a = acc.get(k, {})
        sp = it.speedup
        key = dict(it.key)
        done, planned = _counted(cells, key, pooled=False)
        level = key.get("concurrency") or 0
        point = key["prompt_set"]
        if key["kind"] == "concurrency":  # the level is what tells its rows apart
            point = f"c{level}"
        elif point is None:
            point = key["kind"]
        out.append(
            {
                "host": key["host"],
                "tp": key["tp"],
                "workload": key["workload"],
                "prompt_set": str(point),
                "max_tokens": key["max_tokens"],
                "config": key["config"],
                "label": label(inp, key["config"]),
                "baseline": key["config"] == base,
                "repeats": it.n,
                "runs": across.get(k, False),
                "requests": it.requests,
                "tok_s": it.mean,
                "tok_s_lo": it.lo,
                "tok_s_hi": it.hi,
                "speedup": sp.value if sp else None,
                "speedup_lo": sp.lo if sp else None,
                "speedup_hi": sp.hi if sp else None,
                "speedup_too_few": bool(sp and sp.too_few),
                "accept": a.get("accept_len_weighted"),
                "accept_mean": a.get("accept_len_mean"),
                "j_per_token": energy.get(
                    tuple(key[c] for c in (*SCOPE, "config", *POINT)), {}
                ).get("j_per_token"),
                "failed_check": it.failed_check or None,
                "unchecked": it.unchecked or None,
                "implausible": implausible(sp, a.get("accept_len_weighted")) or None,
                "why": it.doubt or None,
                "best": it.best and done >= planned,
                "pooled": False,
                "partial": f"{done}/{planned}" if done < planned else None,
            }
        )
    return out


def _cell_counts(inp: Inputs) -> dict[tuple[Any, ...], list[int]]:
    """Planned and done cells per point key (host, TP, kind, workload as the report names
    it, level, config, prompt set, length): cells held out of this run are not planned,
    a pack control's cells are no row's."""
    names = workload_names(inp)
    _, controls = group_kinds(inp)
    out: dict[tuple[Any, ...], list[int]] = {}
    for cid, c in inp.state.cells.items():
        cell = c.cell
        if cell is None or cell.group in controls:
            continue
        if not c.selected and c.status == "pending":
            continue  # left out of this run: not what the row waits for
        key = (
            cell.host,
            cell.tp,
            cell.kind,
            names.get(cid, cell.workload),
            cell.concurrency or 0,
            cell.config,
            cell.prompt_set,
            cell.max_tokens,
        )
        n = out.setdefault(key, [0, 0])
        n[0] += c.status == "done"
        n[1] += 1
    return out


def _counted(
    cells: dict[tuple[Any, ...], list[int]], r: dict[str, Any], *, pooled: bool
) -> tuple[int, int]:
    """(done, planned) cells of a row: its point's, or every point of its workload."""
    head = (
        str(r["host"]),
        r["tp"],
        str(r["kind"]),
        str(r["workload"]),
        r.get("concurrency") or 0,
        str(r["config"]),
    )
    done = planned = 0
    for key, (d, n) in cells.items():
        if (str(key[0]), key[1], str(key[2]), str(key[3]), key[4], str(key[5])) != head:
            continue
        if not pooled and (key[6], key[7]) != (r.get("prompt_set"), r.get("max_tokens")):
            continue
        done, planned = done + d, planned + n
    return done, planned

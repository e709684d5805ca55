"""``comparisons.parquet``: one row per comparison the report makes, with its audit.

Each row is a config against its baseline in one scope (host, TP, workload kind, workload,
concurrency level) for one figure: the decode speed-up (``decode_tok_s`` over the
baseline's, Fieller's interval) and, where both sides' GPU energy is valid, the energy ratio
(J per output token over the baseline's; no interval); and, for a config with a control
(``[configs.NAME] control``), its decode speed-up over the control (``baseline`` names the
control then). ``comparable`` and ``why`` are the
comparability audit's (``report/comparability.py``) for the pair, the same for every figure
of it; ``temperature`` is the sampling temperature the pair's cells share, null where they
mix several.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import polars as pl

from specbench_tui.report.frames import (
    SCOPE,
    audit,
    baseline,
    cell_figures,
    comparison,
    known_configs,
)
from specbench_tui.report.inputs import Inputs, load_inputs
from specbench_tui.report.stats import from_moments, ratio_ci
from specbench_tui.results.cells import baseline_config
from specbench_tui.results.files import write_bytes_atomic

FILE = "comparisons.parquet"

SPEEDUP = "decode speed-up"
ENERGY_RATIO = "energy per token ratio"

SCHEMA: dict[str, Any] = {
    "host": pl.String,
    "config": pl.String,
    "baseline": pl.String,
    "tp": pl.Int64,
    "kind": pl.String,
    "workload": pl.String,
    "level": pl.Int64,
    "temperature": pl.Float64,
    "figure": pl.String,
    "ratio": pl.Float64,
    "lo": pl.Float64,
    "hi": pl.Float64,
    "comparable": pl.Boolean,
    "why": pl.String,
}


def _temperatures(inp: Inputs) -> dict[tuple[Any, ...], float | None]:
    cells = cell_figures(inp)
    if cells.height == 0 or "temperature" not in cells.columns:
        return {}
    keys = [*SCOPE, "config"]
    out: dict[tuple[Any, ...], float | None] = {}
    for r in cells.group_by(keys).agg(pl.col("temperature").unique()).to_dicts():
        temps = [t for t in r["temperature"] if t is not None]
        out[tuple(r[k] for k in keys)] = temps[0] if len(temps) == 1 else None
    return out


def controls(inp: Inputs) -> dict[str, str]:
    """Each config's control (``[configs.NAME] control``; an expansion takes its family's),
    by config, where the control ran."""
    known = known_configs(inp)
    table = inp.plan.get("configs") or {}
    out = {}
    for name in known:
        entry = table.get(name) or next(
            (v for base, v in table.items() if name.startswith(f"{base}-")), None
        )
        ref = entry.get("control") if isinstance(entry, dict) else None
        got = baseline_config(str(ref), known) if ref else None
        if got is not None and got != name and got in known:
            out[name] = got
    return out


def _against_controls(inp: Inputs, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Decode speed-up of each config over its control, scope by scope, with its audit."""
    ctl = controls(inp)
    if not ctl:
        return []
    temps = _temperatures(inp)
    check = audit(inp)
    by_key = {(*(r[k] for k in SCOPE), r["config"]): r for r in rows}
    out = []
    for r in rows:
        control = ctl.get(r["config"])
        theirs = by_key.get((*(r[k] for k in SCOPE), control)) if control else None
        if theirs is None or r["decode_tok_s"] is None or theirs["decode_tok_s"] is None:
            continue
        q = ratio_ci(
            from_moments(r["decode_tok_s"], r["decode_tok_s_sd"], r["n"]),
            from_moments(theirs["decode_tok_s"], theirs["decode_tok_s_sd"], theirs["n"]),
        )
        why = check.why({**{k: r[k] for k in SCOPE}, "config": r["config"]}, str(control))
        out.append(
            {
                "host": r["host"],
                "config": r["config"],
                "baseline": control,
                "tp": r["tp"],
                "kind": r["kind"],
                "workload": r["workload"],
                "level": r["concurrency"],
                "temperature": temps.get(tuple(r[k] for k in (*SCOPE, "config"))),
                "figure": SPEEDUP,
                "ratio": q.value if q else None,
                "lo": q.lo if q else None,
                "hi": q.hi if q else None,
                "comparable": not why,
                "why": "; ".join(why) or None,
            }
        )
    return out


def comparisons(inp: Inputs, cmp: pl.DataFrame | None = None) -> pl.DataFrame:
    """Every comparison of ``inp`` (the comparison frame ``cmp`` where the caller has it),
    made once per read: the report's section and ``comparisons.parquet`` share it."""
    if "comparisons" not in inp.cache:
        inp.cache["comparisons"] = _comparisons(inp, comparison(inp) if cmp is None else cmp)
    return inp.cache["comparisons"]


def _comparisons(inp: Inputs, cmp: pl.DataFrame) -> pl.DataFrame:
    base = baseline(inp)
    if cmp.height == 0 or base is None:
        return pl.DataFrame(schema=SCHEMA)
    temps = _temperatures(inp)
    rows = cmp.to_dicts()
    base_energy = {
        tuple(r[k] for k in SCOPE): r["j_per_token"] for r in rows if r["config"] == base
    }
    out = []
    for r in rows:
        if r["config"] == base or r["speedup"] is None:
            continue
        head = {
            "host": r["host"],
            "config": r["config"],
            "baseline": base,
            "tp": r["tp"],
            "kind": r["kind"],
            "workload": r["workload"],
            "level": r["concurrency"],
            "temperature": temps.get(tuple(r[k] for k in (*SCOPE, "config"))),
            "comparable": bool(r["comparable"]),
            "why": r["why"],
        }
        out.append(
            {
                **head,
                "figure": SPEEDUP,
                "ratio": r["speedup"],
                "lo": r["speedup_lo"],
                "hi": r["speedup_hi"],
            }
        )
        theirs = base_energy.get(tuple(r[k] for k in SCOPE))
        if r["j_per_token"] is not None and theirs:
            ratio = r["j_per_token"] / theirs
            out.append({**head, "figure": ENERGY_RATIO, "ratio": ratio, "lo": None, "hi": None})
    out.extend(_against_controls(inp, rows))
    return pl.DataFrame(out, schema=SCHEMA, orient="row")


def write_comparisons(root: Path, inp: Inputs, cmp: pl.DataFrame | None = None) -> Path:
    """Write ``comparisons.parquet`` into the results directory, whole (a reader sees the
    file before or after, never half of it)."""
    path = root / FILE
    data = io.BytesIO()
    comparisons(inp, cmp).write_parquet(data)
    write_bytes_atomic(path, data.getvalue())
    return path


def unlike(root: Path) -> list[tuple[tuple[Any, ...], str]]:
    """The speed-ups of ``root`` that are not like with like, one line per config, baseline
    (or control), host and TP size, keyed by those and the workloads it covers: what the
    headless line and the console say as a group ends (the engine passes the key it said
    last, so a line comes again only when a workload joins it)."""
    frame = comparisons(load_inputs(root))
    rows = frame.filter((pl.col("figure") == SPEEDUP) & ~pl.col("comparable")).to_dicts()
    by_pair: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        by_pair.setdefault((r["host"], r["config"], r["baseline"], r["tp"]), []).append(r)
    out = []
    for (host, config, base, tp), got in sorted(by_pair.items(), key=lambda kv: str(kv[0])):
        points = []
        for r in got:
            where = r["workload"] + (f" c{r['level']}" if r["level"] else "")
            ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
            points.append((where, f"{where} {ratio} ({r['why']})"))
        out.append(
            (
                (host, config, base, tp, *sorted(w for w, _ in points)),
                f"{config} against {base} at TP {tp} on {host}, speed-up not comparable: "
                + " | ".join(text for _, text in points),
            )
        )
    return out

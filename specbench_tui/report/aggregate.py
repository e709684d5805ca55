"""Turn a results directory into the figures of the report.

Everything here reads the results-layout contract (specs/cli-and-results.md) and nothing else, so
that a report can be rendered again at any time, from a finished, running or aborted campaign,
on a machine that never ran it. Any input file may be missing, empty or unreadable: each
section then comes back empty and a note says why, instead of the whole report failing.

Only the attempt of each cell that ``cells.parquet`` lists, and only cells that finished, are
aggregated: an earlier attempt's rows stay in ``requests.parquet`` for the record, but counting
them would mix a broken run into the figures the rerun was meant to replace.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from specbench_tui.bench.greedy import Divergence, Output, first_divergence
from specbench_tui.errors import InputError
from specbench_tui.results.events import iso_utc
from specbench_tui.results.files import read_events
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.state import CampaignState
from specbench_tui.results.views import (
    cells_frame,
    concat_requests,
    concat_telemetry,
    counted_attempts,
    part_files,
    telemetry_files,
    view_status,
)

# Request columns that identify a measurement; nulls in them are filled with a sentinel before
# joins, because polars never matches a null key.
_NULL_KEY = -1
_NULL_TEXT = ""


@dataclass
class Inputs:
    """A results directory read through the results contract; each file may be absent."""

    root: Path
    layout: ResultsLayout
    plan: dict[str, Any]
    state: CampaignState
    requests: pl.DataFrame | None
    cells: pl.DataFrame | None
    telemetry: pl.DataFrame | None
    labels: dict[str, str]
    config_order: list[str]
    live: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass
class Report:
    """What the templates show. Numbers stay numbers; formatting belongs to the templates."""

    title: str
    campaign: str
    simulated: bool
    baseline: str | None
    baseline_label: str | None
    status: str
    plan_hash: str
    started: str
    finished: str
    counts: dict[str, int]
    notes: list[str]
    configs: list[dict[str, Any]]
    single: list[dict[str, Any]]
    speedup_summary: list[dict[str, Any]]
    accept: dict[str, Any]
    agentic: list[dict[str, Any]]
    concurrency: list[dict[str, Any]]
    problems: list[dict[str, Any]]
    telemetry: list[dict[str, Any]]
    greedy: dict[str, Any]
    gpu_telemetry: list[str] = field(default_factory=list)  # per host: source, unverified starts
    lagged: list[str] = field(default_factory=list)  # cells measured while the client lagged


# -- reading ---------------------------------------------------------------------------------


def _read_parquet(path: Path, notes: list[str]) -> pl.DataFrame | None:
    """A parquet view of the store, or None with a note: a report must survive any of them."""
    if not path.exists():
        notes.append(f"{path.name} is missing")
        return None
    try:
        df = pl.read_parquet(path)
    except Exception as exc:  # any unreadable file becomes a note, not a crash
        notes.append(f"{path.name} could not be read ({type(exc).__name__}: {exc})")
        return None
    if df.height == 0:
        notes.append(f"{path.name} has no rows yet")
    return df


def _read_plan(path: Path, notes: list[str]) -> dict[str, Any]:
    if not path.exists():
        notes.append("plan.toml is missing: the baseline and checks are unknown")
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        notes.append(f"plan.toml could not be read ({exc})")
        return {}


def _labels(state: CampaignState) -> tuple[dict[str, str], list[str]]:
    """Config name -> label, in plan order, as the log's service groups recorded them."""
    labels: dict[str, str] = {}
    for g in state.groups.values():
        if g.config:
            labels.setdefault(g.config, g.label or g.config)
    return labels, list(labels)


def _live(layout: ResultsLayout) -> bool:
    """Whether a campaign process holds the directory now (it takes an exclusive flock)."""
    try:
        fd = os.open(layout.lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _requests(layout: ResultsLayout, notes: list[str]) -> pl.DataFrame | None:
    """The request rows: the view if it reads, else the parts it is built from."""
    df = _read_parquet(layout.requests, notes)
    if df is not None:
        return df
    parts = part_files(layout)
    if not parts:
        return None
    notes.append("request rows read from parts/ instead")
    return concat_requests(pl.read_parquet(p) for p in parts)


def load_inputs(root: Path) -> Inputs:
    """Read everything a report may use from ``<results>/<campaign>/``."""
    layout = ResultsLayout(root)
    notes: list[str] = []
    if not layout.events.exists():
        raise InputError(f"{root}: no campaign here (no events.jsonl)")
    plan = _read_plan(layout.plan, notes)
    state = CampaignState.from_events(read_events(layout.events), layout.rows_exist)
    labels, order = _labels(state)
    tel_parts = telemetry_files(layout)
    telemetry = (
        concat_telemetry(pl.read_parquet(p) for p in tel_parts)
        if tel_parts
        else _read_parquet(layout.telemetry, notes)
    )
    return Inputs(
        root=root,
        layout=layout,
        plan=plan,
        state=state,
        requests=_requests(layout, notes),
        cells=cells_frame(state),
        telemetry=telemetry,
        labels=labels,
        config_order=order,
        live=_live(layout),
        notes=notes,
    )


# -- helpers ---------------------------------------------------------------------------------


def _has(df: pl.DataFrame | None, *cols: str) -> bool:
    return df is not None and df.height > 0 and all(c in df.columns for c in cols)


def _num(v: Any) -> float | None:
    """A finite float or None, so templates only ever see numbers they can print."""
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _fill_keys(df: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    exprs = []
    for k in keys:
        if k not in df.columns:
            exprs.append(pl.lit(_NULL_KEY).alias(k))
        elif df.schema[k].is_numeric():
            exprs.append(pl.col(k).fill_null(_NULL_KEY))
        else:
            exprs.append(pl.col(k).cast(pl.String).fill_null(_NULL_TEXT))
    return df.with_columns(exprs)


def _key_out(v: Any) -> Any:
    """Undo the join sentinel for display."""
    return None if v in (_NULL_KEY, _NULL_TEXT) else v


class _Order:
    """Sort configs as the plan lists them (baseline first), unknown ones after, by name."""

    def __init__(self, order: list[str], baseline: str | None) -> None:
        names = ([baseline] if baseline else []) + [n for n in order if n != baseline]
        self.rank = {n: i for i, n in enumerate(names)}

    def __call__(self, name: Any) -> tuple[int, str]:
        return (self.rank.get(str(name), len(self.rank)), str(name))


def _baseline(plan: dict[str, Any], known: list[str]) -> str | None:
    """The plan's baseline; a parametrized base name stands for its first expansion."""
    ref = (plan.get("campaign") or {}).get("baseline")
    if not ref:
        return None
    ref = str(ref)
    if ref in known:
        return ref
    expanded = [n for n in known if n.startswith(ref + "-")]
    return expanded[0] if expanded else ref


# -- the attempt that counts -----------------------------------------------------------------


def counted_requests(inp: Inputs) -> pl.DataFrame | None:
    """Request rows of the attempt that counts for each finished cell (the reducer says
    which); rows of earlier attempts and of cells that did not finish are left out."""
    req = inp.requests
    if not _has(req, "cell_id", "attempt"):
        return None
    assert req is not None
    counted = counted_attempts(inp.state)
    keep = pl.DataFrame(
        {"cell_id": list(counted), "attempt": list(counted.values())},
        schema={"cell_id": pl.String, "attempt": pl.Int64},
    )
    kept = req.with_columns(pl.col("attempt").cast(pl.Int64)).join(
        keep, on=["cell_id", "attempt"], how="semi"
    )
    left = req.height - kept.height
    if left:
        inp.notes.append(
            f"{left} request rows of earlier attempts or unfinished cells were left out "
            "(only each finished cell's counted attempt is aggregated)"
        )
    return kept


def _ok(req: pl.DataFrame) -> pl.DataFrame:
    """Requests that succeeded; failed requests are counted apart, never in latency figures."""
    if "error" not in req.columns:
        return req
    return req.filter(pl.col("error").is_null() | (pl.col("error") == ""))


# -- sections --------------------------------------------------------------------------------


def single_stream(
    req: pl.DataFrame | None, baseline: str | None, order: _Order, labels: dict[str, str]
) -> list[dict[str, Any]]:
    """Median output tok/s per config x TP x workload x prompt set x max_tokens, with the
    speed-up over the baseline measured on the same TP, workload, prompt set and length."""
    keys = ["config", "tp", "workload", "prompt_set", "max_tokens"]
    if not _has(req, "kind", "config", "output_tok_s"):
        return []
    assert req is not None
    df = _ok(req.filter(pl.col("kind") == "single")).filter(pl.col("output_tok_s").is_not_null())
    if df.height == 0:
        return []
    df = _fill_keys(df, keys)
    agg = df.group_by(keys).agg(
        pl.len().alias("n"),
        pl.col("output_tok_s").median().alias("tok_s"),
        (pl.col("ttft_s").median() if "ttft_s" in df.columns else pl.lit(None)).alias("ttft_s"),
        (pl.col("accept_length").mean() if "accept_length" in df.columns else pl.lit(None)).alias(
            "accept_length"
        ),
    )
    base = agg.filter(pl.col("config") == baseline).select(
        *keys[1:], pl.col("tok_s").alias("base_tok_s")
    )
    agg = agg.join(base, on=keys[1:], how="left").with_columns(
        (pl.col("tok_s") / pl.col("base_tok_s")).alias("speedup")
    )
    rows = agg.to_dicts()
    rows.sort(
        key=lambda r: (
            str(r["workload"]),
            r["tp"],
            order(r["config"]),
            str(r["prompt_set"]),
            r["max_tokens"],
        )
    )
    sections: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        sections.setdefault(str(r["workload"]), []).append(
            {
                "config": r["config"],
                "label": labels.get(r["config"], r["config"]),
                "baseline": r["config"] == baseline,
                "tp": r["tp"],
                "prompt_set": _key_out(r["prompt_set"]),
                "max_tokens": _key_out(r["max_tokens"]),
                "n": r["n"],
                "tok_s": _num(r["tok_s"]),
                "ttft_s": _num(r["ttft_s"]),
                "accept_length": _num(r["accept_length"]),
                "speedup": _num(r["speedup"]),
            }
        )
    return [{"workload": w, "rows": rs} for w, rs in sections.items()]


def speedup_summary(
    single: list[dict[str, Any]], baseline: str | None, order: _Order
) -> list[dict[str, Any]]:
    """Geometric mean speed-up per config x TP: ratios average geometrically, not arithmetically."""
    acc: dict[tuple[str, Any], list[float]] = {}
    labels: dict[str, str] = {}
    for sec in single:
        for r in sec["rows"]:
            if r["config"] == baseline or r["speedup"] is None or r["speedup"] <= 0:
                continue
            acc.setdefault((r["config"], r["tp"]), []).append(r["speedup"])
            labels[r["config"]] = r["label"]
    out = []
    for (cfg, tp), vals in sorted(acc.items(), key=lambda kv: (kv[0][1], order(kv[0][0]))):
        out.append(
            {
                "config": cfg,
                "label": labels[cfg],
                "tp": tp,
                "points": len(vals),
                "geomean": math.exp(sum(math.log(v) for v in vals) / len(vals)),
                "min": min(vals),
                "max": max(vals),
            }
        )
    return out


def accept_lengths(
    req: pl.DataFrame | None, order: _Order, labels: dict[str, str]
) -> dict[str, Any]:
    """Mean accept length per config and prompt set, from each request's own meta_info."""
    empty: dict[str, Any] = {"prompt_sets": [], "rows": []}
    if not _has(req, "config", "accept_length"):
        return empty
    assert req is not None
    df = _ok(req).filter(pl.col("accept_length").is_not_null())
    if df.height == 0:
        return empty
    df = _fill_keys(df, ["prompt_set"])
    agg = df.group_by("config", "prompt_set").agg(
        pl.col("accept_length").mean().alias("mean"), pl.len().alias("n")
    )
    sets = sorted({str(s) for s in agg["prompt_set"].to_list()})
    table: dict[str, dict[str, float | None]] = {}
    for r in agg.to_dicts():
        table.setdefault(r["config"], {})[str(r["prompt_set"])] = _num(r["mean"])
    overall = {
        r["config"]: _num(r["mean"])
        for r in df.group_by("config").agg(pl.col("accept_length").mean().alias("mean")).to_dicts()
    }
    rows = [
        {
            "config": c,
            "label": labels.get(c, c),
            "values": [table[c].get(s) for s in sets],
            "all": overall.get(c),
        }
        for c in sorted(table, key=order)
    ]
    return {"prompt_sets": [s or "(none)" for s in sets], "rows": rows}


def agentic_turns(
    req: pl.DataFrame | None, order: _Order, labels: dict[str, str]
) -> list[dict[str, Any]]:
    """Median TTFT per turn: with prefix caching, later turns should stay flat as context grows."""
    if not _has(req, "kind", "config", "turn", "ttft_s"):
        return []
    assert req is not None
    df = _ok(req.filter(pl.col("kind") == "agentic")).filter(
        pl.col("ttft_s").is_not_null() & pl.col("turn").is_not_null()
    )
    if df.height == 0:
        return []
    keys = ["workload", "config", "tp"]
    df = _fill_keys(df, keys)
    agg = df.group_by(*keys, "turn").agg(
        pl.col("ttft_s").median().alias("ttft"), pl.len().alias("n")
    )
    out = []
    for (workload,), part in sorted(
        agg.partition_by("workload", as_dict=True).items(), key=lambda kv: str(kv[0][0])
    ):
        turns = sorted(int(t) for t in part["turn"].unique().to_list())
        grid: dict[tuple[str, int], dict[int, float | None]] = {}
        for r in part.to_dicts():
            grid.setdefault((r["config"], r["tp"]), {})[int(r["turn"])] = _num(r["ttft"])
        rows = [
            {
                "config": c,
                "label": labels.get(c, c),
                "tp": tp,
                "values": [grid[(c, tp)].get(t) for t in turns],
            }
            for c, tp in sorted(grid, key=lambda k: (k[1], order(k[0])))
        ]
        out.append({"workload": str(workload), "turns": turns, "rows": rows})
    return out


def concurrency_levels(
    req: pl.DataFrame | None, cells: pl.DataFrame | None, order: _Order, labels: dict[str, str]
) -> list[dict[str, Any]]:
    """Throughput and latency percentiles per concurrency level.

    Throughput is the engine's own ``throughput_tok_s`` (all output tokens over the cell's wall
    time) when ``cells.parquet`` has it; otherwise tokens over the span of the requests.
    """
    if not _has(req, "kind", "config", "concurrency"):
        return []
    assert req is not None
    keys = ["workload", "config", "tp", "prompt_set", "max_tokens", "concurrency"]
    df = _fill_keys(req.filter(pl.col("kind") == "concurrency"), keys)
    if df.height == 0:
        return []
    ok = _ok(df)
    has_err = "error" in df.columns
    errors = df.group_by(keys).agg(
        (pl.col("error").is_not_null() & (pl.col("error") != "")).sum().alias("errors")
        if has_err
        else pl.lit(0).alias("errors"),
        pl.len().alias("n"),
    )

    def pct(col: str, q: float) -> pl.Expr:
        if col not in ok.columns:
            return pl.lit(None, dtype=pl.Float64)
        return pl.col(col).quantile(q, interpolation="linear")

    span = pl.lit(None, dtype=pl.Float64)
    if {"started_at", "e2e_s", "output_tokens"} <= set(ok.columns):
        span = pl.col("output_tokens").sum() / (
            (pl.col("started_at") + pl.col("e2e_s")).max() - pl.col("started_at").min()
        )
    agg = ok.group_by(keys).agg(
        pct("ttft_s", 0.5).alias("ttft_p50"),
        pct("ttft_s", 0.99).alias("ttft_p99"),
        pct("e2e_s", 0.5).alias("e2e_p50"),
        pct("e2e_s", 0.99).alias("e2e_p99"),
        span.alias("span_tok_s"),
        (pl.col("cell_id").first() if "cell_id" in ok.columns else pl.lit(None)).alias("cell_id"),
    )
    agg = errors.join(agg, on=keys, how="left")
    thr: dict[str, float | None] = {}
    if _has(cells, "cell_id", "throughput_tok_s"):
        assert cells is not None
        thr = {
            str(r["cell_id"]): _num(r["throughput_tok_s"])
            for r in cells.select("cell_id", "throughput_tok_s").to_dicts()
        }
    out: dict[tuple[str, Any, Any], list[dict[str, Any]]] = {}
    for r in agg.to_dicts():
        tput = thr.get(str(r["cell_id"])) or _num(r["span_tok_s"])
        out.setdefault((str(r["workload"]), r["prompt_set"], r["max_tokens"]), []).append(
            {
                "config": r["config"],
                "label": labels.get(r["config"], r["config"]),
                "tp": r["tp"],
                "concurrency": _key_out(r["concurrency"]),
                "n": r["n"],
                "errors": r["errors"],
                "throughput": tput,
                "ttft_p50": _num(r["ttft_p50"]),
                "ttft_p99": _num(r["ttft_p99"]),
                "e2e_p50": _num(r["e2e_p50"]),
                "e2e_p99": _num(r["e2e_p99"]),
            }
        )
    sections = []
    for (w, ps, mt), rows in sorted(out.items(), key=lambda kv: tuple(map(str, kv[0]))):
        rows.sort(key=lambda r: (r["tp"], order(r["config"]), r["concurrency"] or 0))
        sections.append(
            {"workload": w, "prompt_set": _key_out(ps), "max_tokens": _key_out(mt), "rows": rows}
        )
    return sections


def problems(state: CampaignState, labels: dict[str, str]) -> list[dict[str, Any]]:
    """Cells that failed, were skipped or never ran, as the reducer of the log has them."""
    rows = []
    for c in state.cells.values():
        status = view_status(state, c.status)
        if status not in ("failed", "skipped", "never run"):
            continue
        rows.append(
            {
                "cell_id": c.id,
                "name": c.name,
                "config": c.config,
                "tp": c.tp,
                "workload": c.workload,
                "status": status,
                "attempt": c.attempt,
                "reason": c.reason or ("held: not selected" if c.held else ""),
                "label": labels.get(c.config, c.config) if c.config else None,
            }
        )
    return sorted(rows, key=lambda r: str(r["name"]))


def telemetry_summary(tel: pl.DataFrame | None) -> list[dict[str, Any]]:
    """Per host and GPU: a check that the GPUs were busy and nothing else crowded them."""
    if not _has(tel, "host", "gpu"):
        return []
    assert tel is not None

    def stat(col: str, how: str) -> pl.Expr:
        if col not in tel.columns:
            return pl.lit(None, dtype=pl.Float64).alias(f"{col}_{how}")
        e = pl.col(col).cast(pl.Float64)
        return (e.mean() if how == "mean" else e.max()).alias(f"{col}_{how}")

    agg = tel.group_by("host", "gpu").agg(
        pl.len().alias("samples"),
        stat("util_pct", "mean"),
        stat("mem_used_mib", "max"),
        stat("mem_total_mib", "max"),
        stat("power_w", "mean"),
        stat("temp_c", "max"),
    )
    rows = agg.sort("host", "gpu").to_dicts()
    return [
        {
            "host": r["host"],
            "gpu": r["gpu"],
            "samples": r["samples"],
            "util": _num(r["util_pct_mean"]),
            "mem_peak": _num(r["mem_used_mib_max"]),
            "mem_total": _num(r["mem_total_mib_max"]),
            "power": _num(r["power_w_mean"]),
            "temp_max": _num(r["temp_c_max"]),
        }
        for r in rows
    ]


def gpu_telemetry(state: CampaignState) -> list[str]:
    """Per host, how its GPUs were read and before how many server starts their freedom
    could not be verified (no telemetry)."""
    unverified: dict[str, int] = {}
    for ev in state.gpus_unverified:
        unverified[ev.host] = unverified.get(ev.host, 0) + 1
    out = []
    for host in sorted(set(state.telemetry) | set(unverified)):
        chosen = state.telemetry.get(host)
        mode = (
            "not recorded"
            if chosen is None
            else ("no GPU telemetry" if chosen.source == "none" else chosen.text or chosen.source)
        )
        line = f"{host}: {mode}"
        if unverified.get(host):
            n = unverified[host]
            line += f"; GPU freedom not verified before {n} server start{'s' if n != 1 else ''}"
        out.append(line)
    return out


def _temperatures(inp: Inputs) -> dict[str, float]:
    """Sampling temperature per cell id, from the plan as run."""
    return {c.id: c.cell.temperature for c in inp.state.cells.values() if c.cell is not None}


def _first_difference(root: Path, row: dict[str, Any]) -> Divergence | None:
    """Where a divergent output leaves the baseline's, from the texts the engine keeps beside
    the request rows (rows hold only hashes); None when either text is not on disk."""

    def output(cell: Any, attempt: Any) -> Output | None:
        try:
            path = ResultsLayout(root).texts_path(str(cell), int(attempt))
            kept = json.loads(path.read_text())
        except (OSError, ValueError, TypeError):
            return None
        pid = str(row["prompt_id"])
        raw = kept.get(f"{pid}#{row.get('repeat') or 0}", kept.get(pid))
        return Output.from_json(raw) if raw is not None else None

    ours = output(row.get("cell_id"), row.get("attempt"))
    theirs = output(row.get("base_cell"), row.get("base_attempt"))
    if ours is None or theirs is None:
        return None
    return first_divergence(ours, theirs)


def greedy_equivalence(
    inp: Inputs, req: pl.DataFrame | None, baseline: str | None, order: _Order, limit: int = 50
) -> dict[str, Any]:
    """Temperature-0 single-stream outputs compared with the baseline's, prompt by prompt.

    A lossless speculative config must reproduce the baseline's tokens exactly; a divergence
    has exposed real bugs (state leaking between requests in hybrid models).
    """
    enabled = bool((inp.plan.get("checks") or {}).get("greedy_equivalence"))
    res: dict[str, Any] = {
        "enabled": enabled,
        "note": "",
        "summary": [],
        "divergent": [],
        "more": 0,
    }
    if not enabled:
        return res
    if baseline is None:
        res["note"] = "the plan names no baseline config to compare against"
        return res
    if not _has(req, "kind", "config", "output_sha256"):
        res["note"] = "no single-stream outputs were recorded"
        return res
    assert req is not None
    df = _ok(req.filter(pl.col("kind") == "single")).filter(pl.col("output_sha256").is_not_null())
    temps = _temperatures(inp)
    wl_temp = {
        name: _num(w.get("temperature")) or 0.0
        for name, w in (inp.plan.get("workloads") or {}).items()
        if isinstance(w, dict)
    }
    by_cell = pl.DataFrame(
        {"cell_id": list(temps), "_t_cell": list(temps.values())},
        schema={"cell_id": pl.String, "_t_cell": pl.Float64},
    )
    by_workload = pl.DataFrame(
        {"workload": list(wl_temp), "_t_wl": list(wl_temp.values())},
        schema={"workload": pl.String, "_t_wl": pl.Float64},
    )
    if "cell_id" in df.columns:
        df = df.join(by_cell, on="cell_id", how="left")
    else:
        df = df.with_columns(pl.lit(None, dtype=pl.Float64).alias("_t_cell"))
    if "workload" in df.columns:
        df = df.join(by_workload, on="workload", how="left")
    else:
        df = df.with_columns(pl.lit(None, dtype=pl.Float64).alias("_t_wl"))
    # Unknown temperature: the plan default is 0, so such rows are compared.
    df = df.filter(pl.coalesce("_t_cell", "_t_wl", pl.lit(0.0)) == 0.0)
    keys = ["tp", "workload", "prompt_set", "prompt_id", "max_tokens", "repeat"]
    df = _fill_keys(df, keys)
    base = (
        df.filter(pl.col("config") == baseline)
        .group_by(keys)
        .agg(
            pl.col("output_sha256").first().alias("base_sha"),
            pl.col("cell_id").first().alias("base_cell"),
            pl.col("attempt").first().alias("base_attempt"),
        )
    )
    if base.height == 0:
        res["note"] = f"the baseline {baseline!r} has no temperature-0 single-stream outputs"
        return res
    cmp = (
        df.filter(pl.col("config") != baseline)
        .join(base, on=keys, how="inner")
        .with_columns((pl.col("output_sha256") != pl.col("base_sha")).alias("diverges"))
    )
    if cmp.height == 0:
        res["note"] = "no other config has outputs for the baseline's prompts"
        return res
    summ = cmp.group_by("config", "tp").agg(
        pl.len().alias("compared"), pl.col("diverges").sum().alias("diverged")
    )
    res["summary"] = sorted(
        (
            {
                "config": r["config"],
                "label": inp.labels.get(r["config"], r["config"]),
                "tp": r["tp"],
                "compared": r["compared"],
                "diverged": r["diverged"],
            }
            for r in summ.to_dicts()
        ),
        key=lambda r: (r["tp"], order(r["config"])),
    )
    div = cmp.filter(pl.col("diverges")).to_dicts()
    div.sort(
        key=lambda r: (
            r["tp"],
            order(r["config"]),
            str(r["workload"]),
            str(r["prompt_set"]),
            str(r["prompt_id"]),
            r["max_tokens"],
            r["repeat"],
        )
    )
    res["divergent"] = [
        {
            "config": r["config"],
            "label": inp.labels.get(r["config"], r["config"]),
            "tp": r["tp"],
            "workload": r["workload"],
            "prompt_set": _key_out(r["prompt_set"]),
            "prompt_id": _key_out(r["prompt_id"]),
            "max_tokens": _key_out(r["max_tokens"]),
            "repeat": _key_out(r["repeat"]),
            "first": _first_difference(inp.root, r),
        }
        for r in div[:limit]
    ]
    res["more"] = max(0, len(div) - limit)
    return res


# -- the whole report ------------------------------------------------------------------------


def _campaign_state(inp: Inputs) -> dict[str, Any]:
    st = inp.state
    return {
        "simulated": st.simulated,
        "plan_hash": st.plan_hash,
        "title": st.title,
        "campaign": st.campaign,
        "started": iso_utc(st.first_started_at) if st.first_started_at else "",
        "finished": iso_utc(st.finished_at) if st.finished_at else "",
        "planned": len(st.cells),
        "status": st.run_status(live=inp.live),
    }


def build_report(root: Path) -> Report:
    """Read a results directory and compute every section of the report."""
    inp = load_inputs(root)
    state = _campaign_state(inp)
    known = list(inp.config_order)
    for df in (inp.cells, inp.requests):
        if _has(df, "config"):
            assert df is not None
            known += [
                str(c)
                for c in df["config"].unique().to_list()
                if c is not None and str(c) not in known
            ]
    baseline = _baseline(inp.plan, known)
    order = _Order(inp.config_order, baseline)
    labels = {c: inp.labels.get(c, c) for c in known}
    inp.labels = labels
    cells = inp.cells
    simulated = state["simulated"] or (
        _has(cells, "simulated")
        and cells is not None
        and bool(cells["simulated"].fill_null(False).any())
    )
    req = counted_requests(inp)
    single = single_stream(req, baseline, order, labels)
    if baseline and single and not any(r["baseline"] for s in single for r in s["rows"]):
        inp.notes.append(
            f"the baseline {baseline!r} has no single-stream results yet, so no "
            "speed-ups can be computed"
        )
    probs = problems(inp.state, labels)
    n = inp.state.counts
    counts = {
        "planned": state["planned"],
        "done": n.done,
        "failed": n.failed,
        "skipped": n.skipped,
        "never_run": sum(1 for p in probs if p["status"] == "never run"),
        "requests": req.height if req is not None else 0,
        "request_errors": 0,
    }
    if req is not None and "error" in req.columns:
        counts["request_errors"] = req.filter(
            pl.col("error").is_not_null() & (pl.col("error") != "")
        ).height
    title = str(
        (inp.plan.get("campaign") or {}).get("title")
        or state["title"]
        or (inp.plan.get("campaign") or {}).get("name")
        or state["campaign"]
        or root.name
    )
    configs = [
        {"config": c, "label": labels[c], "baseline": c == baseline}
        for c in sorted(known, key=order)
    ]
    return Report(
        title=title,
        campaign=str(
            (inp.plan.get("campaign") or {}).get("name") or state["campaign"] or root.name
        ),
        simulated=bool(simulated),
        baseline=baseline,
        baseline_label=labels.get(baseline, baseline) if baseline else None,
        status=state["status"],
        plan_hash=state["plan_hash"],
        started=state["started"],
        finished=state["finished"],
        counts=counts,
        notes=inp.notes,
        configs=configs,
        single=single,
        speedup_summary=speedup_summary(single, baseline, order),
        accept=accept_lengths(req, order, labels),
        agentic=agentic_turns(req, order, labels),
        concurrency=concurrency_levels(req, cells, order, labels),
        problems=probs,
        telemetry=telemetry_summary(inp.telemetry),
        greedy=greedy_equivalence(inp, req, baseline, order),
        gpu_telemetry=gpu_telemetry(inp.state),
        lagged=lagged_cells(cells),
    )


def lagged_cells(cells: pl.DataFrame | None) -> list[str]:
    """Finished cells whose client event loop lagged past the threshold: their timings
    include the client's own delay."""
    if not _has(cells, "client_lagged", "status"):
        return []
    assert cells is not None
    name = "name" if "name" in cells.columns else "cell_id"
    hit = cells.filter((pl.col("status") == "done") & pl.col("client_lagged").fill_null(False))
    return [str(v) for v in hit[name].to_list()]

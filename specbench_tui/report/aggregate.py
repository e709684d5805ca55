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

import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from specbench_tui.bench.greedy import Divergence, first_difference

# Request columns that identify a measurement; nulls in them are filled with a sentinel before
# joins, because polars never matches a null key.
_NULL_KEY = -1
_NULL_TEXT = ""


@dataclass
class Inputs:
    """The raw contents of a results directory, each part possibly absent."""

    root: Path
    plan: dict[str, Any]
    events: list[dict[str, Any]]
    requests: pl.DataFrame | None
    cells: pl.DataFrame | None
    telemetry: pl.DataFrame | None
    labels: dict[str, str]
    config_order: list[str]
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


def _read_events(path: Path, notes: list[str]) -> list[dict[str, Any]]:
    """The event log; a torn last line (a crash mid-write) is skipped, as the store does."""
    if not path.exists():
        notes.append(f"{path.name} is missing")
        return []
    out: list[dict[str, Any]] = []
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
    return out


def _read_plan(path: Path, notes: list[str]) -> dict[str, Any]:
    if not path.exists():
        notes.append(
            "plan.toml is missing: config names stand in for labels, and the "
            "baseline and checks are unknown"
        )
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        notes.append(f"plan.toml could not be read ({exc})")
        return {}


def _labels(
    path: Path, plan: dict[str, Any], events: list[dict[str, Any]]
) -> tuple[dict[str, str], list[str]]:
    """Config name -> label, in plan order.

    The validated plan gives params-expanded names and substituted labels. It can refuse a plan
    that ran fine elsewhere (prompt files not reachable from the results directory), so the
    service groups recorded in ``campaign_started`` and then the raw TOML are fallbacks.
    """
    labels: dict[str, str] = {}
    try:
        from specbench_tui.plan.configs import resolve_configs
        from specbench_tui.plan.loader import load_plan

        for cfg in resolve_configs(load_plan(path).spec):
            labels[cfg.name] = cfg.label
    except Exception:  # InputError or anything else: fall back, never fail
        labels = {}
    for ev in events:
        if ev.get("event") == "campaign_started":
            for g in ev.get("groups") or []:
                if isinstance(g, dict) and g.get("config"):
                    labels.setdefault(str(g["config"]), str(g.get("label") or g["config"]))
    for name, cfg in (plan.get("configs") or {}).items():
        if isinstance(cfg, dict) and not cfg.get("params"):
            labels.setdefault(name, str(cfg.get("label") or name))
    return labels, list(labels)


def load_inputs(root: Path) -> Inputs:
    """Read everything a report may use from ``<results>/<campaign>/``."""
    notes: list[str] = []
    plan = _read_plan(root / "plan.toml", notes)
    events = _read_events(root / "events.jsonl", notes)
    requests = _read_parquet(root / "requests.parquet", notes)
    cells = _read_parquet(root / "cells.parquet", notes)
    telemetry = _read_parquet(root / "telemetry.parquet", notes)
    labels, order = _labels(root / "plan.toml", plan, events)
    return Inputs(
        root=root,
        plan=plan,
        events=events,
        requests=requests,
        cells=cells,
        telemetry=telemetry,
        labels=labels,
        config_order=order,
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
    """Request rows of each cell's latest finished attempt, as ``cells.parquet`` lists it."""
    req = inp.requests
    if not _has(req, "cell_id"):
        return None
    assert req is not None
    if "attempt" not in req.columns:
        req = req.with_columns(pl.lit(1).alias("attempt"))
    req = req.with_columns(pl.col("attempt").cast(pl.Int64))
    cells = inp.cells
    if _has(cells, "cell_id", "attempt"):
        assert cells is not None
        listed = cells.select(
            pl.col("cell_id").cast(pl.String),
            pl.col("attempt").cast(pl.Int64),
            (pl.col("status") if "status" in cells.columns else pl.lit("done")).alias("status"),
        )
        done = listed.filter(pl.col("status") == "done").select("cell_id", "attempt")
        kept = req.join(done, on=["cell_id", "attempt"], how="semi")
        unlisted = req.join(listed.select("cell_id"), on="cell_id", how="anti").height
        failed = req.join(
            listed.filter(pl.col("status") != "done").select("cell_id"), on="cell_id", how="semi"
        ).height
        earlier = req.height - kept.height - unlisted - failed
        if earlier:
            inp.notes.append(
                f"{earlier} request rows of earlier attempts were left out "
                "(only each cell's latest attempt counts)"
            )
        if failed:
            inp.notes.append(f"{failed} request rows of failed cells were left out")
        if unlisted:
            inp.notes.append(
                f"{unlisted} request rows belong to cells not yet in "
                "cells.parquet and were left out"
            )
        return kept
    latest = req.group_by("cell_id").agg(pl.col("attempt").max())
    kept = req.join(latest, on=["cell_id", "attempt"], how="semi")
    inp.notes.append(
        "without cells.parquet, each cell's highest attempt in requests.parquet "
        "is counted, whether or not it finished"
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


def problems(
    events: list[dict[str, Any]], cells: pl.DataFrame | None, labels: dict[str, str]
) -> list[dict[str, Any]]:
    """Cells that failed or were skipped, as their last word in the log (or cells.parquet) says.

    A cell that failed and was then rerun successfully is not a problem any more, so the log is
    replayed in order rather than searched for failures.
    """
    last: dict[str, dict[str, Any]] = {}
    info: dict[str, dict[str, Any]] = {}
    for ev in events:
        name = ev.get("event")
        if name == "campaign_started":
            for c in ev.get("cells") or []:
                if isinstance(c, dict) and c.get("id"):
                    info[str(c["id"])] = c
        cid = ev.get("cell_id")
        if cid is None:
            continue
        if name in ("cell_finished", "cell_failed", "cell_skipped", "cell_queued", "cell_started"):
            last[str(cid)] = ev
    out: dict[str, dict[str, Any]] = {}
    for cid, ev in last.items():
        status = {"cell_failed": "failed", "cell_skipped": "skipped"}.get(str(ev.get("event")))
        if status:
            c = info.get(cid, {})
            out[cid] = {
                "cell_id": cid,
                "name": ev.get("cell") or c.get("name") or cid,
                "config": c.get("config"),
                "tp": c.get("tp"),
                "workload": c.get("workload"),
                "status": status,
                "attempt": ev.get("attempt"),
                "reason": ev.get("reason") or "",
            }
    if _has(cells, "cell_id", "status"):
        assert cells is not None
        for r in cells.filter(pl.col("status") == "failed").to_dicts():
            cid = str(r["cell_id"])
            if cid in out or (cid in last and last[cid].get("event") != "cell_failed"):
                continue
            out[cid] = {
                "cell_id": cid,
                "name": r.get("name") or cid,
                "config": r.get("config"),
                "tp": r.get("tp"),
                "workload": r.get("workload"),
                "status": "failed",
                "attempt": r.get("attempt"),
                "reason": r.get("reason") or "",
            }
    rows = sorted(out.values(), key=lambda r: str(r["name"]))
    for r in rows:
        r["label"] = labels.get(str(r["config"]), r["config"]) if r["config"] else None
    return rows


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


def _temperatures(inp: Inputs) -> dict[str, float]:
    """Sampling temperature per cell id from the plan as run (``campaign_started`` cells)."""
    out: dict[str, float] = {}
    for ev in inp.events:
        if ev.get("event") == "campaign_started":
            for c in ev.get("cells") or []:
                if isinstance(c, dict) and c.get("id") is not None:
                    t = _num(c.get("temperature"))
                    out[str(c["id"])] = t if t is not None else 0.0
    return out


def _first_difference(root: Path, row: dict[str, Any]) -> Divergence | None:
    """Where a divergent output leaves the baseline's, from the texts the engine keeps beside
    the request rows (rows hold only hashes); None when either text is not on disk."""

    def text(cell: Any, attempt: Any) -> str | None:
        try:
            path = root / "parts" / f"{cell}.a{int(attempt)}.texts.json"
            return json.loads(path.read_text()).get(str(row["prompt_id"]))
        except (OSError, ValueError, TypeError):
            return None

    ours = text(row.get("cell_id"), row.get("attempt"))
    theirs = text(row.get("base_cell"), row.get("base_attempt"))
    if ours is None or theirs is None:
        return None
    return first_difference(ours, theirs)


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


def _campaign_state(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the campaign stands, judged from its latest start: a resumed campaign that has
    not finished again is still running, whatever an earlier run concluded."""
    starts = [i for i, e in enumerate(events) if e.get("event") == "campaign_started"]
    last = starts[-1] if starts else -1
    first_start = events[starts[0]] if starts else {}
    last_start = events[last] if starts else {}
    after = events[last + 1 :] if starts else events
    finished = [e for e in after if e.get("event") == "campaign_finished"]
    state: dict[str, Any] = {
        "simulated": any(bool(events[i].get("simulated")) for i in starts),
        "plan_hash": str(last_start.get("plan_hash") or ""),
        "title": str(last_start.get("title") or ""),
        "campaign": str(last_start.get("campaign") or ""),
        "started": str(first_start.get("ts") or ""),
        "finished": str(finished[-1].get("ts") or "") if finished else "",
        "planned": len(last_start.get("cells") or []),
    }
    if finished:
        state["status"] = "finished"
    elif any(e.get("event") == "aborted" for e in after):
        state["status"] = "aborted"
    elif starts:
        state["status"] = "running or interrupted (no campaign_finished event yet)"
    else:
        state["status"] = "not started (no campaign_started event)"
    return state


def build_report(root: Path) -> Report:
    """Read a results directory and compute every section of the report."""
    inp = load_inputs(root)
    state = _campaign_state(inp.events)
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
    probs = problems(inp.events, cells, labels)
    counts = {
        "planned": state["planned"],
        "done": 0,
        "failed": 0,
        "skipped": sum(1 for p in probs if p["status"] == "skipped"),
        "requests": req.height if req is not None else 0,
        "request_errors": 0,
    }
    if _has(cells, "status"):
        assert cells is not None
        counts["done"] = cells.filter(pl.col("status") == "done").height
    else:  # cells.parquet lags or is gone: the event log still knows which cells finished
        last: dict[str, str] = {}
        for ev in inp.events:
            if ev.get("cell_id") is not None and str(ev.get("event", "")).startswith("cell_"):
                last[str(ev["cell_id"])] = str(ev.get("event"))
        counts["done"] = sum(1 for name in last.values() if name == "cell_finished")
    counts["failed"] = sum(1 for p in probs if p["status"] == "failed")
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

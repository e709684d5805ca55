"""The polars tables every section of the report, and the console's live results table, are
built from: one code path, so the console and the paper never disagree.

Figures, named once (specs/cli-and-results.md) and nowhere else under another name:

- **TTFT** (``ttft_s``): request sent to first token.
- **decode tok/s**: token-weighted, sum(output_tokens - 1) / sum(e2e_s - ttft_s) over the
  requests of a unit that have a decode window (``bench/figures.py`` defines it, and which
  requests it leaves out); per-request rates only as a distribution.
- **end-to-end tok/s** per request: ``output_tokens / e2e_s``, TTFT included.
- **cell throughput**: all output tokens of a cell over its measured window
  (``throughput_tok_s`` of the cell's summary).
- **TPOT**, **ITL per token** and **chunk gap per SSE event** (the cell's summary; ITL per token
  where the client recorded token counts per chunk, else only the chunk gap, named as such).
- **accept length**: the engine's own definition (``engines/registry.py``) over the counts
  summed per host, TP, workload kind and config (never pooled across them), and the request
  mean beside it.

Statistics (report/stats.py): the unit is a repeat. A single-stream repeat is one pass over
the workload's prompts (the ``repeat`` column); an agentic unit is a session; a concurrency
cell is one unit (its requests overlap, so they are not independent). Where the plan's
``[campaign] runs`` gave a comparison key cells of two or more runs (a fresh server each),
the unit is the run instead, so the interval spans run-to-run variation. A config's figure is the
mean over its units of each unit's token-weighted decode tok/s, with a Student-t 95% interval;
a speed-up is the ratio of two such means with Fieller's interval, against the baseline config
on the same host, TP, workload and (for concurrency) level. Results of different hosts are
never pooled. A config that failed a correctness check, or whose outputs no check covers
(unchecked, bench/greedy_judge.py), is never best.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from specbench_tui.bench.figures import DecodeTotal, decode_parts_expr
from specbench_tui.engines.adapter import EngineAdapter
from specbench_tui.engines.registry import DEFAULT_ENGINE, accept_length, adapter
from specbench_tui.report.comparability import Audit
from specbench_tui.report.energy_pool import energy_valid, pool_energy
from specbench_tui.report.inputs import Inputs
from specbench_tui.report.inputs import known_configs as known_configs_of
from specbench_tui.report.stats import Mean, Ratio, distinguishable, from_moments, ratio_ci

#: The keys a comparison is made within: results of different hosts, TP sizes, workloads and
#: concurrency levels are never pooled.
SCOPE: tuple[str, ...] = ("host", "tp", "kind", "workload", "concurrency")

# -- requests ----------------------------------------------------------------------------------


def baseline(inp: Inputs) -> str | None:
    """The plan's baseline config; a parametrized base name stands for its first expansion."""
    return inp.baseline


def known_configs(inp: Inputs) -> list[str]:
    """Every config the log or the rows name, in plan order (the baseline first)."""
    return known_configs_of(inp.config_order, inp.state, inp.requests)


def label(inp: Inputs, config: str) -> str:
    return inp.labels.get(config, config)


def config_rank(inp: Inputs) -> dict[str, int]:
    """Plan order with the baseline first: the order of rows in every table and legend."""
    base = baseline(inp)
    names = ([base] if base else []) + [n for n in known_configs(inp) if n != base]
    return {n: i for i, n in enumerate(names)}


def group_kinds(inp: Inputs) -> tuple[set[str], set[str]]:
    """The ids of the groups that ran packed (beside other servers on the host's free GPUs)
    and of the controls (``pack_control``'s ``.solo`` groups: a packed group once more, alone
    on the host)."""
    packed, controls = set(), set()
    for gid, g in inp.state.groups.items():
        if g.group is not None and g.group.packed:
            packed.add(gid)
        if g.group is not None and g.group.exclusive:
            controls.add(gid)
    return packed, controls


def requests(inp: Inputs) -> pl.DataFrame:
    """Successful requests of counted attempts, with the figures derived once: ``decode_tok_s``,
    ``e2e_tok_s`` (the client's own columns where present, else computed) and ``unit`` (the
    independent unit the statistics run over). A packed campaign's controls are left out: they
    measure the packing, not the configs, and are never pooled with the packed cells
    (``packing_effect`` compares the two)."""
    if "requests" in inp.cache:
        return inp.cache["requests"]
    out = all_requests(inp).filter(~pl.col("control"))
    inp.cache["requests"] = out
    return out


def all_requests(inp: Inputs) -> pl.DataFrame:
    """``requests`` with the controls, and two columns more: ``packed`` (the request's group
    ran packed) and ``control`` (it is a control group's)."""
    if "all_requests" in inp.cache:
        return inp.cache["all_requests"]
    packed, controls = group_kinds(inp)
    df = inp.requests
    ok = df.filter(pl.col("error").is_null() | (pl.col("error") == ""))
    n, e2e, ttft = pl.col("output_tokens"), pl.col("e2e_s"), pl.col("ttft_s")
    decode = pl.when((n > 1) & (e2e > ttft)).then((n - 1) / (e2e - ttft))
    e2e_rate = pl.when(e2e > 0).then(n / e2e)
    # The unit within a comparison key: a repeat, a session, or the one cell of a level.
    kind = pl.col("kind")
    unit = (
        pl.when(kind == "agentic")
        .then(pl.col("session"))
        .when(kind == "concurrency")
        .then(pl.lit(0, dtype=pl.Int64))
        .otherwise(pl.col("repeat"))
    )
    tokens, seconds = decode_parts_expr()
    engines = group_engines(inp)
    cell = pl.col("cell_id").cast(pl.String)
    named = cell.replace_strict(workload_names(inp), default=None, return_dtype=pl.String)
    ok = ok.with_columns(
        pl.coalesce(named, pl.col("workload").cast(pl.String))
        .cast(pl.Categorical)
        .alias("workload"),
        cell.replace_strict(cell_temperatures(inp), default=None, return_dtype=pl.Float64).alias(
            "temperature"
        ),
    )
    out = ok.with_columns(
        pl.coalesce(pl.col("decode_tok_s"), decode).alias("decode_tok_s"),
        tokens.alias(DECODE_PARTS[0]),
        seconds.alias(DECODE_PARTS[1]),
        pl.col("group")
        .cast(pl.String)
        .replace_strict(engines, default=DEFAULT_ENGINE, return_dtype=pl.String)
        .cast(pl.Categorical)
        .alias("engine"),
        pl.coalesce(pl.col("e2e_tok_s"), e2e_rate, pl.col("output_tok_s")).alias("e2e_tok_s"),
        unit.fill_null(0).alias("unit"),
        (ttft * 1000).alias("ttft_ms"),
        pl.col("concurrency").fill_null(0),
        pl.col("group").cast(pl.String).is_in(list(packed)).alias("packed"),
        pl.col("group").cast(pl.String).is_in(list(controls)).alias("control"),
        _run_of(inp).alias("run"),
    )
    # Where a comparison key has rows of two or more of the plan's ``runs``, the unit is the
    # run (a fresh server each): its interval is the run-to-run variation, which the repeats
    # inside one run cannot show.
    runs = pl.col("run").n_unique().over([*SCOPE, "config"])
    out = out.with_columns(
        (runs >= 2).alias("between_runs"),
    ).with_columns(
        pl.when(pl.col("between_runs")).then(pl.col("run")).otherwise(pl.col("unit")).alias("unit")
    )
    inp.cache["all_requests"] = out
    return out


def cell_temperatures(inp: Inputs) -> dict[str, float]:
    """Cell id -> the temperature its requests were sampled at."""
    return {cid: c.cell.temperature for cid, c in inp.state.cells.items() if c.cell is not None}


def workload_names(inp: Inputs) -> dict[str, str]:
    """Cell id -> the workload as the report names it: a workload that ran at several
    temperatures is one workload per temperature (``single T=1``), so every table and chart
    splits by it and never pools sampled with greedy requests."""
    temps: dict[str, set[float]] = {}
    for c in inp.state.cells.values():
        if c.cell is not None:
            temps.setdefault(c.workload, set()).add(c.cell.temperature)
    out = {}
    for cid, c in inp.state.cells.items():
        several = c.cell is not None and len(temps.get(c.workload, ())) > 1
        out[cid] = f"{c.workload} T={c.cell.temperature:g}" if several and c.cell else c.workload
    return out


def _run_of(inp: Inputs) -> pl.Expr:
    """Which of the plan's ``[campaign] runs`` each request's cell belongs to (1 without)."""
    cells = inp.state.cells.items()
    later = {cid: c.cell.run for cid, c in cells if c.cell is not None and c.cell.run > 1}
    if not later:
        return pl.lit(1, dtype=pl.Int64)
    return pl.col("cell_id").cast(pl.String).replace_strict(later, default=1, return_dtype=pl.Int64)


def group_engines(inp: Inputs) -> dict[str, str]:
    """Group id -> the engine its server ran (as it reported itself, else the plan's)."""
    out = {}
    for gid, g in inp.state.groups.items():
        out[gid] = g.engine or (g.group.engine if g.group is not None else "") or DEFAULT_ENGINE
    return out


def ran_adapters(inp: Inputs) -> list[EngineAdapter]:
    """The adapters of the engines this campaign ran, by name: what the report's prose names
    when it says how an engine counts (the default engine where none is recorded)."""
    return [adapter(e) for e in sorted(set(group_engines(inp).values()) or {DEFAULT_ENGINE})]


def accept_definitions(inp: Inputs) -> str:
    """Each engine's own accept-length definition, for the engines this campaign ran:
    ``"<label>: <definition>"``, one per engine, joined by ``; ``."""
    return "; ".join(f"{a.label}: {a.accept_length_definition}" for a in ran_adapters(inp))


#: The per-request columns behind the token-weighted decode rate: n - 1 and the decode window
#: of each request that counts, null for the others (bench/figures.py ``decode_parts_expr``).
DECODE_PARTS: tuple[str, str] = ("decode_tokens", "decode_seconds")


def decode_left_out_by_kind(inp: Inputs) -> dict[str, str]:
    """Per workload kind, the successful requests that decode tok/s leaves out and why, in
    words (bench/figures.py: one token, a zero decode window, or a burst read); kinds with
    none are not listed."""
    df = requests(inp)
    if df.height == 0:
        return {}
    n = pl.col("output_tokens")
    burst = pl.col("burst_read").fill_null(False)
    agg = (
        df.group_by("kind")
        .agg(
            (n < 2).sum().alias("one"),
            ((n >= 2) & pl.col(DECODE_PARTS[1]).is_null() & ~burst).sum().alias("zero"),
            ((n >= 2) & burst).sum().alias("burst"),
            pl.len().alias("all"),
        )
        .sort("kind")
    )
    out = {}
    for r in agg.to_dicts():
        total = DecodeTotal(
            0, 0.0, 0, int(r["one"] or 0), int(r["zero"] or 0), int(r["burst"] or 0)
        )
        if total.left_out():
            out[str(r["kind"])] = f"{total.left_out()} of {r['all']} requests"
    return out


#: The columns ``accept_frame`` reads besides its keys.
ACCEPT_COLUMNS: tuple[str, ...] = (
    "engine",
    "accept_length",
    "output_tokens",
    "spec_verify_ct",
    "spec_accepted_tokens",
    "spec_draft_tokens",
)


def subset(inp: Inputs, columns: Iterable[str], where: pl.Expr | None = None) -> pl.DataFrame:
    """Some columns of ``requests``, filtered: select first, so that a filter over a million
    rows copies only the columns a section reads. Asking for ``decode_tok_s`` brings the
    columns its token-weighted form is built from."""
    cols = list(dict.fromkeys(columns))
    if "decode_tok_s" in cols:
        cols += [c for c in DECODE_PARTS if c not in cols]
    df = requests(inp).select(cols)
    return df if where is None else df.filter(where)


def request_errors(inp: Inputs) -> int:
    df = inp.requests
    return df.filter(pl.col("error").is_not_null() & (pl.col("error") != "")).height


def failed_checks(inp: Inputs) -> dict[tuple[str, str, int], str]:
    """(host, config, tp) -> why that config failed a correctness check."""
    out: dict[tuple[str, str, int], str] = {}
    for v in inp.state.failed_checks():
        out.setdefault((v.host, v.config, v.tp), v.text or f"failed the {v.check} check")
    return out


def unchecked(inp: Inputs) -> dict[tuple[str, str, int], str]:
    """(host, config, tp) -> why no verdict covers that config's outputs (it failed none)."""
    failed = failed_checks(inp)
    return {
        (v.host, v.config, v.tp): v.text
        for v in inp.state.unchecked()
        if (v.host, v.config, v.tp) not in failed
    }


#: The mark of a config that failed a correctness check, and of one no verdict covers: said
#: beside its name in every table and chart.
FAILED_MARK = "failed check"
UNCHECKED_MARK = "unchecked"
#: The mark of a row whose config ran but has no decode window measured (``untimed``).
UNTIMED_MARK = "decode not timed"


def check_marks(inp: Inputs) -> dict[tuple[str, str, int], str]:
    """(host, config, tp) -> ``FAILED_MARK`` or ``UNCHECKED_MARK``; absent: checked and
    passed, or no check applies."""
    if "check_marks" not in inp.cache:
        marks = dict.fromkeys(unchecked(inp), UNCHECKED_MARK)
        marks.update(dict.fromkeys(failed_checks(inp), FAILED_MARK))
        inp.cache["check_marks"] = marks
    return inp.cache["check_marks"]


def marked(inp: Inputs, config: str, host: str, tps: Iterable[int]) -> str:
    """A config's label with its check mark, where it has one at any of ``tps`` on ``host``
    (naming the TP sizes when not all of them): ``DFlash [failed check]``,
    ``DDTree [failed check at TP 4]``."""
    tps = sorted(set(tps))
    marks = check_marks(inp)
    name = label(inp, config)
    for mark in (FAILED_MARK, UNCHECKED_MARK):
        at = [tp for tp in tps if marks.get((host, config, tp)) == mark]
        if at:
            where = "" if len(at) == len(tps) else " at TP " + ", ".join(map(str, at))
            return f"{name} [{mark}{where}]"
    return name


def cell_figures(inp: Inputs) -> pl.DataFrame:
    """One row per finished cell: identity and the figures of its summary (cell throughput,
    TPOT, chunk gap, ITL per token where recorded, counter deltas where recorded)."""
    if "cells" in inp.cache:
        return inp.cache["cells"]
    rows = []
    names = workload_names(inp)
    for c in inp.state.cells.values():
        if c.status != "done" or c.config in inp.forced:  # forced cells: sections/forced.py
            continue
        planned = c.cell
        rows.append(
            {
                "cell_id": c.id,
                "group": c.group,
                "host": c.host,
                "config": c.config,
                "tp": c.tp,
                "workload": names.get(c.id, c.workload),
                "temperature": planned.temperature if planned else None,
                "kind": c.kind,
                "prompt_set": planned.prompt_set if planned else None,
                "max_tokens": planned.max_tokens if planned else None,
                "concurrency": (planned.concurrency if planned else None) or 0,
                "started_at": c.started_at,
                "ended_at": c.ended_at,
                **{k: v for k, v in c.figures.items() if isinstance(v, int | float | bool)},
            }
        )
    df = pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()
    inp.cache["cells"] = df
    return df


# -- comparing configs -------------------------------------------------------------------------


#: Keys every request of a cell shares: grouping by the cell first and by these after costs a
#: fraction of the memory of grouping a million rows by all of them at once.
CELL_KEYS = frozenset(
    {"host", "tp", "kind", "workload", "concurrency", "config", "group", "prompt_set", "max_tokens"}
)


def unit_moments(
    df: pl.DataFrame, keys: Sequence[str], value: str = "decode_tok_s"
) -> pl.DataFrame:
    """Per ``keys``: the mean, standard deviation and count of the per-unit figures of
    ``value``, each unit's figure first, so a unit weighs once whatever its size. For
    ``decode_tok_s`` a unit's figure is its token-weighted decode rate (``DECODE_PARTS``
    summed: all its decode tokens over all its decode time); for any other column, the mean
    over the unit's requests."""
    keys = list(keys)
    per_cell = [k for k in keys if k in CELL_KEYS]
    per_request = [k for k in keys if k not in CELL_KEYS]
    if value == "decode_tok_s":
        num, den = pl.col(DECODE_PARTS[0]), pl.col(DECODE_PARTS[1])
        picked = df.select("cell_id", "unit", *keys, *DECODE_PARTS).filter(den.is_not_null())
        sums = (num.sum().alias("_s"), den.sum().alias("_d"), pl.len().alias("_r"))
    else:
        picked = df.select("cell_id", "unit", *keys, value).filter(pl.col(value).is_not_null())
        sums = (pl.col(value).sum().alias("_s"), pl.len().alias("_d"), pl.len().alias("_r"))
    partial = picked.group_by("cell_id", "unit", *per_request).agg(
        *(pl.col(k).first() for k in per_cell), *sums
    )
    per_unit = (
        partial.group_by(*keys, "unit")
        .agg((pl.col("_s").sum() / pl.col("_d").sum()).alias("_v"), pl.col("_r").sum())
        .filter(pl.col("_v").is_finite())
    )
    return per_unit.group_by(keys).agg(
        pl.col("_v").mean().alias("mean"),
        pl.col("_v").std().alias("sd"),
        pl.len().alias("n"),
        pl.col("_r").sum().alias("requests"),
    )


@dataclass
class Ranked:
    """One config's figure within one scope, compared with the baseline and the others."""

    key: dict[str, Any]  # the scope's key values and ``config``
    figure: Mean | None  # None: the config ran here, but no unit has a measured figure
    speedup: Ratio | None = None
    failed_check: str = ""
    unchecked: str = ""  # why no verdict covers it (no check failed)
    best: bool = False  # the highest mean, told apart from the runner-up
    top_tie: bool = False  # cannot be told apart from the highest mean at this sample size
    requests: int = 0
    # Why the speed-up cannot be what it says (``implausible``); "" when it can.
    doubt: str = ""

    @property
    def untimed(self) -> bool:
        """The config ran in this scope but none of its requests has a decode window (each
        came whole in one read of the socket): it keeps its row, with no figure."""
        return self.figure is None

    @property
    def n(self) -> int:
        return 0 if self.figure is None else self.figure.n

    @property
    def mean(self) -> float | None:
        return None if self.figure is None else self.figure.mean

    @property
    def lo(self) -> float | None:
        """The interval's lower bound, cut at zero (a rate is never negative)."""
        lo = None if self.figure is None else self.figure.lo
        return None if lo is None else max(lo, 0.0)

    @property
    def hi(self) -> float | None:
        return None if self.figure is None else self.figure.hi

    @property
    def sd(self) -> float | None:
        return None if self.figure is None else self.figure.sd


def rank_decode(
    df: pl.DataFrame,
    scope: Sequence[str],
    inp: Inputs,
    acc: Mapping[tuple[Any, ...], Mapping[str, Any]] | None = None,
) -> list[Ranked]:
    """:func:`rank` of decode tok/s per ``scope`` and config over request rows. A config with
    successful requests in a scope but no measured decode window among them (a lagging
    client read every token of each in one read) keeps its row, untimed, instead of leaving
    the table: it ran, and its other figures (accept length) stand."""
    keys = [*scope, "config"]
    moments = unit_moments(df, keys)
    timed = {tuple(r[k] for k in keys) for r in moments.select(keys).to_dicts()}
    ran = df.select(keys).unique().to_dicts()
    untimed = [
        {**r, "mean": None, "sd": None, "n": 0, "requests": 0}
        for r in ran
        if tuple(r[k] for k in keys) not in timed
    ]
    if untimed:
        extra = pl.DataFrame(untimed, schema=moments.schema, orient="row")
        moments = pl.concat([moments, extra], how="vertical_relaxed")
    if acc is None:  # the caller's accept frame by key, where it has one already
        have = set(ACCEPT_COLUMNS) <= set(df.columns)  # decode columns alone: no doubt
        acc = accept_rows(df, keys) if have else {}
    check, base = audit(inp), baseline(inp)

    def doubt(it: Ranked) -> str:
        row = acc.get(tuple(it.key[k] for k in keys)) or {}
        reasons = check.why(it.key, base) if base is not None and it.speedup else []
        said = implausible(it.speedup, row.get("accept_len_weighted"))
        return "; ".join([*reasons, said] if said else reasons)

    return rank(moments, scope, inp, doubt=doubt)


def audit(inp: Inputs) -> Audit:
    """The comparability audit of ``inp`` (``report/comparability.py``), made once."""
    if "audit" not in inp.cache:
        packed, controls = group_kinds(inp)
        cells = cell_figures(inp)
        if controls and cells.height:  # a control's cells are compared in packing_effect
            cells = cells.filter(~pl.col("group").is_in(list(controls)))
        inp.cache["audit"] = Audit(inp, cells, packed, packing_effect(inp), _tokens_in_flight(inp))
    return inp.cache["audit"]


def _tokens_in_flight(inp: Inputs) -> dict[tuple[Any, ...], int]:
    """The most tokens a scope's requests can hold in a server's KV pool at once: its level
    (1 for one request at a time) times its longest request, prompt and output."""
    df = requests(inp)
    if df.height == 0:
        return {}
    longest = (pl.col("prompt_tokens").fill_null(0) + pl.col("output_tokens").fill_null(0)).max()
    got = df.group_by(list(SCOPE)).agg(longest.alias("tokens"))
    return {
        tuple(r[k] for k in SCOPE): int(r["tokens"] or 0) * max(int(r["concurrency"] or 0), 1)
        for r in got.to_dicts()
    }


#: How far above its config's accept length a decode speed-up's interval may start before the
#: speed-up is implausible. A verify step that yields L tokens on average costs at least one
#: plain decode step, so decoding cannot be more than about L times faster; the margin covers
#: a verify step that happens to run a little faster than the baseline's step (a smaller
#: batch's kernels, a warmer cache) and what the interval's bound leaves of noise.
PLAUSIBLE_MARGIN = 0.10
#: The mark of an implausible speed-up, in every table beside the figure.
IMPLAUSIBLE_MARK = "implausible"
#: The mark of a speed-up measured under conditions unlike its baseline's (``why``).
NOT_COMPARABLE_MARK = "not comparable"


def implausible(speedup: Ratio | None, accept: float | None) -> str:
    """Why a decode speed-up cannot be what it says ("" when it can): its interval (or, with
    none, its value) lies above ``accept`` by more than ``PLAUSIBLE_MARGIN``. Then the two
    sides were measured under different conditions (the baseline under load, say), and the
    ratio is not the config's to claim."""
    if speedup is None or accept is None or accept <= 0:
        return ""
    low = speedup.lo if speedup.lo is not None else speedup.value
    if low <= accept * (1 + PLAUSIBLE_MARGIN):
        return ""
    return (
        f"decode speed-up {speedup.value:.2f}x above the accept length {accept:.2f}: a verify "
        f"step yielding {accept:.2f} tokens cannot make decoding more than about {accept:.2f}x "
        "faster, so the two sides were measured under different conditions"
    )


def rank(
    moments: pl.DataFrame,
    scope: Sequence[str],
    inp: Inputs,
    *,
    higher_is_better: bool = True,
    doubt: Callable[[Ranked], str] | None = None,
) -> list[Ranked]:
    """Turn per-config moments into ranked rows, scope by scope.

    Within each scope, the speed-up is the ratio to the baseline config's mean; the best is
    the config with the highest mean that did not fail a check, marked only when Welch's test
    tells it apart from the runner-up; the configs that cannot be told apart from it are
    marked as tied. A config that failed a check, or that no check covers, is never best and
    never ranked.
    """
    base = baseline(inp)
    order = config_rank(inp)
    checks = failed_checks(inp)
    open_checks = unchecked(inp)
    scoped: dict[tuple[Any, ...], list[Ranked]] = {}
    for r in moments.to_dicts():
        key = {k: r[k] for k in (*scope, "config")}
        key["config"] = str(key["config"])
        where = (str(r.get("host") or ""), key["config"], r.get("tp"))
        item = Ranked(
            key=key,
            figure=from_moments(float(r["mean"]), r["sd"], int(r["n"])) if r["n"] else None,
            failed_check=checks.get(where, ""),
            unchecked=open_checks.get(where, ""),
            requests=int(r.get("requests") or 0),
        )
        scoped.setdefault(tuple(r[k] for k in scope), []).append(item)
    out: list[Ranked] = []
    for _, items in sorted(scoped.items(), key=lambda kv: tuple(map(_sort_key, kv[0]))):
        items.sort(key=lambda it: (order.get(it.key["config"], len(order)), it.key["config"]))
        ref = next((it for it in items if it.key["config"] == base), None)
        for it in items:
            if ref is not None and ref.figure is not None and it.figure is not None:
                it.speedup = ratio_ci(it.figure, ref.figure)
            if doubt is not None:
                it.doubt = doubt(it)
        eligible = [
            (it, it.figure)
            for it in items
            if it.figure is not None and not (it.failed_check or it.unchecked or it.doubt)
        ]
        if len(eligible) >= 2:
            eligible.sort(key=lambda p: p[1].mean, reverse=higher_is_better)
            (top, best), (_, second) = eligible[0], eligible[1]
            if distinguishable(best, second):
                top.best = True
            else:
                for it, fig in eligible:
                    if it is top or not distinguishable(best, fig):
                        it.top_tie = True
        out.extend(items)
    return out


def _sort_key(v: Any) -> tuple[int, Any]:
    return (0, v) if isinstance(v, int | float) else (1, str(v))


COMPARISON_COLUMNS: tuple[str, ...] = (
    "host",
    "tp",
    "kind",
    "workload",
    "concurrency",
    "config",
    "label",
    "baseline",
    "n",
    "requests",
    "decode_tok_s",
    "decode_tok_s_lo",
    "decode_tok_s_hi",
    "decode_tok_s_sd",
    "speedup",
    "speedup_lo",
    "speedup_hi",
    "speedup_too_few",
    "untimed",
    "implausible",
    "comparable",
    "why",
    "accept_len_mean",
    "accept_len_weighted",
    "acceptance_rate",
    "cell_throughput_tok_s",
    "j_per_token",
    "j_per_token_above_idle",
    "failed_check",
    "unchecked",
    "check_reason",
    "best",
    "top_tie",
    "packed",
    "between_runs",
)


def accept_rows(df: pl.DataFrame, keys: Sequence[str]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """:func:`accept_frame` of request rows, by key tuple."""
    frame = accept_frame(df.select(*keys, *ACCEPT_COLUMNS), keys)
    return {tuple(r[k] for k in keys): r for r in frame.to_dicts()}


def accept_frame(df: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """Accept length per ``keys``: ``accept_len_weighted``, the engine's own definition over
    the counts summed per key (``engines/registry.py``: what its counters give, so the report
    shows the figure the engine itself reports), ``accept_len_mean`` the plain mean of the
    requests' accept lengths, and the acceptance rate (accepted over drafted tokens) where the
    engine gave raw counts; null for configs without speculative decoding. A key whose rows
    came from two engines has no pooled figure: their definitions differ."""
    keys = list(keys)
    steps = pl.col("spec_verify_ct")
    has_steps = steps.is_not_null() & (steps > 0)
    al = pl.col("accept_length")
    drafted = pl.col("spec_draft_tokens").sum()
    accepted = pl.col("spec_accepted_tokens")
    per_engine = df.group_by([*keys, "engine"]).agg(
        al.mean().alias("accept_len_mean"),
        al.is_not_null().sum().alias("accept_requests"),
        pl.col("output_tokens").sum().cast(pl.Float64).alias("_tokens"),
        steps.filter(has_steps).sum().cast(pl.Float64).alias("_steps"),
        # Accepted drafts; where a build left the count out, from the accept lengths.
        pl.when(accepted.filter(has_steps).is_null().any())
        .then((al * steps).filter(has_steps).sum() - steps.filter(has_steps).sum())
        .otherwise(accepted.filter(has_steps).sum())
        .cast(pl.Float64)
        .alias("_accepted"),
        pl.when(drafted > 0)
        .then(accepted.sum().cast(pl.Float64) / drafted)
        .alias("acceptance_rate"),
    )
    rows = []
    for r in per_engine.to_dicts():
        r["accept_len_weighted"] = accept_length(
            r["engine"], r["_tokens"], r["_steps"], r["_accepted"]
        )
        rows.append(r)
    schema = {
        **{k: df.schema[k] for k in keys},
        "engine": pl.String,
        "accept_len_mean": pl.Float64,
        "accept_requests": pl.Int64,
        "accept_len_weighted": pl.Float64,
        "acceptance_rate": pl.Float64,
    }
    frame = pl.DataFrame([{c: r.get(c) for c in schema} for r in rows], schema=schema, orient="row")
    return frame.group_by(keys).agg(
        pl.col("accept_len_mean").mean(),
        pl.when(pl.len() == 1).then(pl.col("accept_len_weighted").first()),
        pl.when(pl.len() == 1).then(pl.col("acceptance_rate").first()),
        pl.col("accept_requests").sum(),
    )


def comparison(inp: Inputs) -> pl.DataFrame:
    """The live results table: one row per host, TP, workload kind, workload, concurrency level
    and config, computed from a results directory finished or still running.

    Columns:

    - ``host``, ``tp``, ``kind`` (single | agentic | concurrency), ``workload``, ``concurrency``
      (0 except for concurrency rows), ``config``, ``label``, ``baseline`` (bool).
    - ``n``: units the figure is a mean over (repeats; sessions for agentic; 1 for a
      concurrency level); ``requests``: successful requests the decode figure counts.
    - ``decode_tok_s``, ``decode_tok_s_lo``, ``decode_tok_s_hi``: decode tok/s (TTFT
      excluded, token-weighted within each unit), mean over units with its 95% Student-t
      interval (null bounds when n < 2; the lower bound cut at zero); ``decode_tok_s_sd``: the
      units' standard deviation. ``untimed`` (bool): the config ran here and has successful
      requests, but none with a decode window (a lagging client read each one whole in a
      single read, bench/figures.py): its decode figures and speed-up are null and ``n`` is 0,
      and the row stays, with its other figures (accept length), never best.
      ``implausible``: why the speed-up cannot be what it says (``implausible()``: above the
      config's accept length beyond ``PLAUSIBLE_MARGIN``), else null. ``comparable``: the
      speed-up compares like with like (``report/comparability.py``: the same server settings
      but the speculative ones, host load, client lag, packing, GPU clocks and throttling, no
      foreign GPU process, plausible); null for the baseline and without a speed-up;
      ``why``: every reason it does not, else null. A row that is not comparable is never
      best.
    - ``speedup``, ``speedup_lo``, ``speedup_hi``: ``decode_tok_s`` over the baseline config's
      in the same host, TP, workload and level, with Fieller's 95% interval; null without a
      baseline; ``speedup_too_few`` (bool): the units are too few to bound it (no interval).
    - ``accept_len_weighted``: the accept length as the engine defines it (its adapter's
      ``accept_length_definition``: output tokens or accepted drafts over verify steps) over
      the counts summed over the row's requests, the figure the engine's counters give;
      ``accept_len_mean``: the plain mean of the requests' accept lengths;
      ``acceptance_rate`` (accepted over drafted tokens, where the engine gave them): null
      without speculative decoding.
    - ``cell_throughput_tok_s``: concurrency rows only, all output tokens over the cell's
      measured window (the cell's own summary).
    - ``j_per_token``, ``j_per_token_above_idle``: GPU board energy per output token of the
      row's cells whose energy is valid (``report/energy_pool.py``); null where the host's
      GPUs were not read.
    - ``failed_check`` (bool): the config failed a correctness check at this host and TP;
      ``unchecked`` (bool): it has outputs no verdict covers (its baseline never ran there, or
      the campaign ended before a comparison); ``check_reason``: why, for either. Such a row
      is never best.
    - ``best`` (bool): the highest decode tok/s in its scope, told apart from the runner-up
      (Welch, 5%); ``top_tie`` (bool): the highest, or not told apart from it at this sample
      size (no row of the scope is best then).
    - ``packed`` (bool): the row's cells ran packed, beside other servers on the host. A
      packed campaign's controls (``.solo``) are not rows here: see ``packing_effect``.
    - ``between_runs`` (bool): the row has cells of two or more of the plan's ``runs``, so
      its unit is the run (``n`` runs, each a fresh server) and its interval spans
      run-to-run variation; otherwise the interval is within one run only.

    Rows come in scope order (host, TP, kind, workload, level), configs in plan order with the
    baseline first. It reads only what ``load_inputs`` already holds, so a console can call it
    after every finished cell.
    """
    df = requests(inp)
    keys = [*SCOPE, "config"]
    if df.height == 0:
        return pl.DataFrame(schema=_comparison_schema())
    acc = accept_rows(df, keys)
    ranked = rank_decode(df, SCOPE, inp, acc)
    thr = _cell_throughput(inp)
    energy = cell_energy(inp)
    flags = df.group_by(keys).agg(pl.col("packed").any(), pl.col("between_runs").any())
    ran_packed = {tuple(r[k] for k in keys): bool(r["packed"]) for r in flags.to_dicts()}
    across = {tuple(r[k] for k in keys): bool(r["between_runs"]) for r in flags.to_dicts()}
    base = baseline(inp)
    rows = []
    for it in ranked:
        k = tuple(it.key[c] for c in keys)
        a = acc.get(k, {})
        sp = it.speedup
        rows.append(
            {
                **{c: it.key[c] for c in keys},
                "label": label(inp, it.key["config"]),
                "baseline": it.key["config"] == base,
                "n": it.n,
                "requests": it.requests,
                "decode_tok_s": it.mean,
                "decode_tok_s_lo": it.lo,
                "decode_tok_s_hi": it.hi,
                "decode_tok_s_sd": it.sd,
                "untimed": it.untimed,
                "implausible": implausible(sp, a.get("accept_len_weighted")) or None,
                "comparable": None if sp is None or it.key["config"] == base else not it.doubt,
                "why": it.doubt or None,
                "speedup": sp.value if sp else None,
                "speedup_lo": sp.lo if sp else None,
                "speedup_hi": sp.hi if sp else None,
                "speedup_too_few": bool(sp and sp.too_few),
                "accept_len_mean": a.get("accept_len_mean"),
                "accept_len_weighted": a.get("accept_len_weighted"),
                "acceptance_rate": a.get("acceptance_rate"),
                "cell_throughput_tok_s": thr.get(k) if it.key["kind"] == "concurrency" else None,
                "j_per_token": energy.get(k, {}).get("j_per_token"),
                "j_per_token_above_idle": energy.get(k, {}).get("j_per_token_above_idle"),
                "failed_check": bool(it.failed_check),
                "unchecked": bool(it.unchecked),
                "check_reason": it.failed_check or it.unchecked or None,
                "best": it.best,
                "top_tie": it.top_tie,
                "packed": ran_packed.get(k, False),
                "between_runs": across.get(k, False),
            }
        )
    return pl.DataFrame(rows, schema=_comparison_schema(), orient="row")


def _comparison_schema() -> dict[str, Any]:
    types: dict[str, Any] = dict.fromkeys(COMPARISON_COLUMNS, pl.Float64)
    types.update(
        host=pl.String,
        tp=pl.Int64,
        kind=pl.String,
        workload=pl.String,
        concurrency=pl.Int64,
        config=pl.String,
        label=pl.String,
        baseline=pl.Boolean,
        n=pl.Int64,
        requests=pl.Int64,
        failed_check=pl.Boolean,
        unchecked=pl.Boolean,
        check_reason=pl.String,
        best=pl.Boolean,
        top_tie=pl.Boolean,
        speedup_too_few=pl.Boolean,
        untimed=pl.Boolean,
        implausible=pl.String,
        comparable=pl.Boolean,
        why=pl.String,
        packed=pl.Boolean,
        between_runs=pl.Boolean,
    )
    return types


def _cell_throughput(inp: Inputs) -> dict[tuple[Any, ...], float]:
    """Cell throughput of each concurrency cell, by comparison key (the mean over the
    level's cells where the plan's ``runs`` gave it one per run)."""
    cells = cell_figures(inp)
    if cells.height == 0 or "throughput_tok_s" not in cells.columns:
        return {}
    got: dict[tuple[Any, ...], list[float]] = {}
    _, controls = group_kinds(inp)
    for r in cells.filter(pl.col("kind") == "concurrency").to_dicts():
        if r["group"] in controls:
            continue  # a control's: see packing_effect
        k = (r["host"], r["tp"], r["kind"], r["workload"], r["concurrency"], r["config"])
        if r.get("throughput_tok_s") is not None:
            got.setdefault(k, []).append(float(r["throughput_tok_s"]))
    return {k: sum(v) / len(v) for k, v in got.items()}


def cell_energy(inp: Inputs, point: Sequence[str] = ()) -> dict[tuple[Any, ...], dict[str, Any]]:
    """GPU board energy per comparison key (with ``point``, e.g. prompt set and length, after
    it), pooled over its valid cells (``energy_pool``)."""
    cells = cell_figures(inp)
    if cells.height == 0 or "energy_valid" not in cells.columns:
        return {}
    got: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    _, controls = group_kinds(inp)
    for r in cells.to_dicts():
        if r["group"] in controls or not energy_valid(r):
            continue
        k = (r["host"], r["tp"], r["kind"], r["workload"], r["concurrency"], r["config"])
        k += tuple(r[c] for c in point)
        got.setdefault(k, []).append(r)
    return {k: pool_energy(v) for k, v in got.items()}


def scopes(
    rows: Iterable[Ranked], keys: Sequence[str]
) -> list[tuple[tuple[Any, ...], list[Ranked]]]:
    """Ranked rows grouped by ``keys``, in the order they came."""
    out: dict[tuple[Any, ...], list[Ranked]] = {}
    for r in rows:
        out.setdefault(tuple(r.key[k] for k in keys), []).append(r)
    return list(out.items())


# -- packing -------------------------------------------------------------------------------------


def packing_effect(inp: Inputs) -> pl.DataFrame:
    """Packed against alone: for each config, TP, host, workload and level that a control
    (``pack_control``) ran alone on the host, its decode tok/s packed (``packed_*``) and alone
    (``solo_*``), each a mean over units with its 95% interval, ``ratio`` packed over alone
    with Fieller's interval, and ``differs``: Welch's test (5%) tells the two apart."""
    df = all_requests(inp)
    keys = [*SCOPE, "config"]
    if df.height == 0 or not df["control"].any():
        return pl.DataFrame()
    solo = unit_moments(df.filter(pl.col("control")), keys)
    packed = unit_moments(df.filter(~pl.col("control") & pl.col("packed")), keys)
    both = packed.join(solo, on=keys, suffix="_solo")
    rows = []
    for r in both.sort([k for k in keys]).to_dicts():
        a = from_moments(float(r["mean"]), r["sd"], int(r["n"]))
        b = from_moments(float(r["mean_solo"]), r["sd_solo"], int(r["n_solo"]))
        q = ratio_ci(a, b)
        rows.append(
            {
                **{k: r[k] for k in keys},
                "label": label(inp, str(r["config"])),
                "n_packed": a.n,
                "packed_tok_s": a.mean,
                "packed_tok_s_lo": a.lo,
                "packed_tok_s_hi": a.hi,
                "n_solo": b.n,
                "solo_tok_s": b.mean,
                "solo_tok_s_lo": b.lo,
                "solo_tok_s_hi": b.hi,
                "ratio": q.value if q else None,
                "ratio_lo": q.lo if q else None,
                "ratio_hi": q.hi if q else None,
                "ratio_too_few": bool(q and q.too_few),
                "differs": distinguishable(a, b),
            }
        )
    return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()

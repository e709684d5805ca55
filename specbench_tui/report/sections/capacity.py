"""Capacity under the SLO: per config x TP, the highest concurrency whose share of requests
meeting the plan's ``[slo]`` has a 95% lower bound at the target (a ``kind = "capacity"``
search), with the bracket it was found in and the share at each level tried; the share and
goodput of every concurrency level of a plan with ``[slo]``; and the crossover: the
concurrency from which a speculative config's throughput or goodput is no longer above the
baseline's, and whether its capacity is.

Every figure comes from the cells' own summaries (``bench/figures.py`` defines them; the
search is ``plan/capacity.py``), so the report, ``cells.parquet`` and the headless line agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specbench_tui.bench.figures import figure_axis, figure_name, figure_title
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
from specbench_tui.report.frames import baseline, config_rank, marked, workload_names
from specbench_tui.report.inputs import Inputs
from specbench_tui.report.sections import columns as C
from specbench_tui.report.sections.common import WILSON_BARS


@dataclass(frozen=True)
class Level:
    """One concurrency level's SLO figures (a capacity search's point or a concurrency cell)."""

    clients: int
    share: float | None
    lo: float | None
    hi: float | None
    goodput: float | None
    throughput: float | None
    decode: float | None


@dataclass
class Line:
    """A config's levels at one host, TP and workload, and its search's result if it ran one."""

    host: str
    tp: int
    workload: str
    config: str
    kind: str
    levels: list[Level] = field(default_factory=list)
    search: dict[str, Any] | None = None


def _at(values: Any, i: int) -> Any:
    return values[i] if isinstance(values, list) and i < len(values) else None


def lines(inp: Inputs) -> list[Line]:
    """Every capacity cell and every concurrency cell with SLO figures, as lines per config."""
    names = workload_names(inp)
    forced = getattr(inp, "forced", ())  # forced-acceptance configs are reported apart
    out: dict[tuple[Any, ...], Line] = {}
    for c in inp.state.cells.values():
        fig = c.figures
        if c.status != "done" or c.config in forced:
            continue
        workload = names.get(c.id, c.workload)
        key = (c.host, c.tp, workload, c.config)
        if c.kind == "capacity" and "capacity_levels" in fig:
            line = out.setdefault(key, Line(c.host, c.tp, workload, c.config, c.kind))
            line.search = fig
            for i, lv in enumerate(fig.get("capacity_levels") or []):
                line.levels.append(
                    Level(
                        int(lv),
                        _at(fig.get("capacity_shares"), i),
                        _at(fig.get("capacity_share_lo"), i),
                        _at(fig.get("capacity_share_hi"), i),
                        _at(fig.get("capacity_goodput_req_s"), i),
                        _at(fig.get("capacity_throughput_tok_s"), i),
                        _at(fig.get("capacity_decode_tok_s"), i),
                    )
                )
        elif c.kind == "concurrency" and fig.get("slo_share") is not None and c.cell:
            line = out.setdefault(key, Line(c.host, c.tp, workload, c.config, c.kind))
            line.levels.append(
                Level(
                    int(c.cell.concurrency or 1),
                    fig.get("slo_share"),
                    fig.get("slo_share_lo"),
                    fig.get("slo_share_hi"),
                    fig.get("goodput_req_s"),
                    fig.get("throughput_tok_s"),
                    fig.get("decode_tok_s_total"),
                )
            )
    for line in out.values():
        line.levels.sort(key=lambda lv: lv.clients)
    return list(out.values())


def crossover(
    base: Mapping[int, float | None], other: Mapping[int, float | None]
) -> tuple[int | None, int] | None:
    """Where ``other`` falls to ``base``: the first level both measured at which it is not
    above it, with the last common level before it (None when there is none below). None when
    it is above at every common level (or they share none)."""
    common = sorted(lv for lv in base.keys() & other.keys() if None not in (base[lv], other[lv]))
    before: int | None = None
    for lv in common:
        if other[lv] <= base[lv]:  # type: ignore[operator]
            return before, lv
        before = lv
    return None


def _crossover_said(base: Line, other: Line, get: Any) -> str:
    b = {lv.clients: get(lv) for lv in base.levels}
    o = {lv.clients: get(lv) for lv in other.levels}
    common = sorted(b.keys() & o.keys())
    if not common:
        return "no common level"
    hit = crossover(b, o)
    if hit is None:
        return f"above at every common level (to {common[-1]})"
    before, at = hit
    if before is None:
        return f"not above from {at} on (the lowest common level)"
    return f"falls to it between {before} and {at}"


def _capacity_text(s: Mapping[str, Any]) -> str:
    cap = s.get("max_concurrency_under_slo")
    return "none" if cap is None else str(cap)


def _bracket(s: Mapping[str, Any]) -> str:
    lo, hi = s.get("capacity_pass_level"), s.get("capacity_fail_level")
    return f"{'–' if lo is None else lo} .. {'–' if hi is None else hi}"


def _slo_words(inp: Inputs) -> tuple[str, float | None]:
    """The limits and the target as the cells recorded them."""
    for c in inp.state.cells.values():
        if c.status == "done" and c.figures.get("slo_limits"):
            return str(c.figures["slo_limits"]), c.figures.get("slo_target")
    return "", None


#: The table of each level a capacity search tried.
LEVEL_COLUMNS = (
    C.CONFIG,
    C.CLIENTS,
    C.figure("slo_share", f.share, ci=True),
    C.figure("goodput_req_s", lambda v: f.fnum(v, 3)),
    C.THROUGHPUT,
    C.DECODE,
)


def build(inp: Inputs) -> Section | None:
    every = lines(inp)
    if not every:
        return None
    order = config_rank(inp)
    base = baseline(inp)
    limits, target = _slo_words(inp)
    sec = Section("Capacity under the SLO")
    sec.add(
        Para(
            text(
                f"A request is good when it succeeded and meets every limit of the SLO "
                f"({limits or 'as the plan gives it'}); a request of one token has no TPOT and "
                "is not good under a TPOT limit, and a failed request counts as not good. "
                "The share meeting the SLO is good requests over all measured requests, with "
                "its 95% Wilson interval; goodput is good requests per second of the measured "
                "window. A capacity search tries concurrency levels by bracketed bisection on "
                "one server (a warm-up per level) and passes a level when the interval's lower "
                f"bound reaches the target share ({f.share(target)}); the capacity is the "
                "highest level that passed, its bracket that level and the lowest that failed. "
                "The crossover is the concurrency from which a speculative config's cell "
                "throughput (or goodput) is no longer above the baseline's, at the levels both "
                "measured."
            )
        )
    )
    groups = sorted({(ln.host, ln.tp, ln.workload) for ln in every})
    for host, tp, workload in groups:
        mine = [ln for ln in every if (ln.host, ln.tp, ln.workload) == (host, tp, workload)]
        mine.sort(key=lambda ln: (order.get(ln.config, len(order)), ln.config))
        ref = next((ln for ln in mine if ln.config == base), None)
        searched = [ln for ln in mine if ln.search is not None]
        if searched:
            cols = [
                Column("Config", "l"),
                Column(figure_title("max_concurrency_under_slo")),
                Column("Bracket (pass .. fail)"),
                Column("Levels tried"),
            ]
            if ref is not None and len(mine) > 1:
                cols += [
                    Column(f"{figure_name(k)} vs baseline", "l")
                    for k in ("throughput_tok_s", "goodput_req_s")
                ]
            rows = []
            for ln in searched:
                s = ln.search or {}
                row = [
                    Cell(marked(inp, ln.config, host, [tp])),
                    Cell(_capacity_text(s), bold=True),
                    Cell(_bracket(s)),
                    Cell(str(len(ln.levels))),
                ]
                if ref is not None and len(mine) > 1:
                    if ln is ref:
                        row += [Cell("baseline"), Cell("baseline")]
                    else:
                        row += [
                            Cell(_crossover_said(ref, ln, lambda lv: lv.throughput)),
                            Cell(_crossover_said(ref, ln, lambda lv: lv.goodput)),
                        ]
                rows.append(row)
            notes = sorted(
                {f"{ln.config}: {ln.search.get('capacity_note')}" for ln in searched if ln.search}
            )
            if ref is not None and ref.search is not None:
                rc = ref.search.get("max_concurrency_under_slo")
                for ln in searched:
                    if ln is ref or ln.search is None:
                        continue
                    oc = ln.search.get("max_concurrency_under_slo")
                    if rc is not None and (oc is None or oc <= rc):
                        notes.append(
                            f"{ln.config}'s capacity ({_capacity_text(ln.search)}) is not above "
                            f"the baseline's ({rc}) at TP {tp}."
                        )
            sec.add(
                Table(
                    f"Capacity under the SLO, {workload}, TP {tp} on {host}",
                    cols,
                    rows,
                    notes,
                    small=True,
                    csv=[
                        {
                            "host": host,
                            "tp": tp,
                            "workload": workload,
                            "config": ln.config,
                            **{
                                k: (ln.search or {}).get(k)
                                for k in (
                                    "max_concurrency_under_slo",
                                    "capacity_pass_level",
                                    "capacity_fail_level",
                                    "capacity_note",
                                )
                            },
                        }
                        for ln in searched
                    ],
                )
            )
        level_rows = [
            {
                "label": marked(inp, ln.config, host, [tp]),
                "concurrency": lv.clients,
                "slo_share": lv.share,
                "slo_share_lo": lv.lo,
                "slo_share_hi": lv.hi,
                "goodput_req_s": lv.goodput,
                "throughput_tok_s": lv.throughput,
                "decode_tok_s": lv.decode,
            }
            for ln in mine
            for lv in ln.levels
        ]
        caption = f"Share meeting the SLO by concurrency, {workload}, TP {tp} on {host}"
        sec.add(C.table(caption, LEVEL_COLUMNS, level_rows, small=True))
        sec.add(
            Charts(
                [
                    Chart(
                        f"Share meeting the SLO, {workload}, TP {tp} on {host}",
                        "lines",
                        "clients",
                        figure_axis("slo_share"),
                        [
                            Series(
                                marked(inp, ln.config, host, [tp]),
                                [
                                    Point(float(lv.clients), lv.share, lv.lo, lv.hi)
                                    for lv in ln.levels
                                    if lv.share is not None
                                ],
                                color=order.get(ln.config, 0),
                            )
                            for ln in mine
                        ],
                        xlog=True,
                        hline=target,
                        ymin=0.0,
                        bars=WILSON_BARS + ", over each level's requests",
                    )
                ]
            )
        )
    return sec

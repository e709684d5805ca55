"""Comparability: every comparison the report makes that does not hold between like and like,
with its reasons (``report/comparability.py``), and what was checked. One line when every
comparison holds; absent when there is no comparison (no baseline, or nothing beside it)."""

from __future__ import annotations

import polars as pl

from specbench_tui.bench.figures import figure_title
from specbench_tui.engines.settings import SOURCES_SAID
from specbench_tui.report import comparability as c
from specbench_tui.report import format as f
from specbench_tui.report.blocks import Cell, Column, Para, Section, Table, text
from specbench_tui.report.comparisons import SPEEDUP, comparisons
from specbench_tui.report.frames import baseline, label, marked
from specbench_tui.report.inputs import Inputs
from specbench_tui.report.sections.common import compared

CHECKED = (
    "Each config is compared with the baseline in the same host, TP, workload and level, and "
    "the comparison holds only where the two were measured alike: the servers' effective "
    f"settings ({SOURCES_SAID}) equal in every key but the speculative ones (caps on running "
    "requests where the level reaches them, the KV pool where the requests in flight could "
    "fill it); both ran packed "
    "beside other servers or both alone; the host's load per CPU within "
    f"{c.LOAD_GAP:g} of each other; the client's event "
    "loop lagging on both sides or neither; median GPU SM clocks within "
    f"{c.CLOCK_GAP:.0%} (unless the slower side's own draw hit the power cap), the same power "
    "limit, thermal or hardware slowdowns on both sides or neither; no foreign process "
    "on the GPUs; and a speed-up no larger than the accept length allows."
)


def build(inp: Inputs) -> Section | None:
    rows = comparisons(inp, compared(inp))
    if rows.height == 0:
        return None
    speedups = rows.filter(pl.col("figure") == SPEEDUP)
    pairs = speedups.filter(pl.col("baseline") == baseline(inp))
    against = speedups.filter(pl.col("baseline") != baseline(inp))
    if pairs.height == 0:
        return None
    sec = Section("Comparability")
    flagged = pairs.filter(~pairs["comparable"])
    sec.add(
        Para(
            text(
                CHECKED
                + f" {pairs.height - flagged.height} of {pairs.height} comparisons hold"
                + (
                    "."
                    if flagged.height == 0
                    else f"; {flagged.height} do not, each marked 'not comparable' (or "
                    "'implausible') in every table and never called best:"
                )
            )
        )
    )
    if flagged.height:
        sec.add(_flagged_table(inp, flagged))
    if against.height:
        sec.add(_controls_table(inp, against))
    return sec


_ORDER = ("host", "tp", "kind", "workload", "level", "config")


def _cells(inp: Inputs, r: dict, *lead: str) -> list[Cell]:
    """A comparison's row: config, what it is compared with (``lead``), TP, workload and
    level, and the ratio with its interval."""
    level = f" c{r['level']}" if r["kind"] == "concurrency" else ""
    return [
        Cell(marked(inp, r["config"], r["host"], [r["tp"]])),
        *(Cell(x) for x in lead),
        Cell(str(r["tp"])),
        Cell(f"{r['workload']}{level}"),
        Cell(f.ratio(r["ratio"], r["lo"], r["hi"], False)),
    ]


def _flagged_table(inp: Inputs, flagged: pl.DataFrame) -> Table:
    return Table(
        "Comparisons that do not hold, and why",
        [
            Column("Config", "l"),
            Column("TP"),
            Column("Workload", "l"),
            Column(figure_title("speedup", ci=True)),
            Column("Why not comparable", "p", 0.5),
        ],
        [[*_cells(inp, r), Cell(str(r["why"] or ""))] for r in flagged.sort(_ORDER).to_dicts()],
        small=True,
    )


def _controls_table(inp: Inputs, rows: pl.DataFrame) -> Table:
    """Each config with a control, over its control: the comparison its setting allows."""
    body = [
        [
            *_cells(inp, r, label(inp, r["baseline"])),
            Cell("comparable" if r["comparable"] else f"not comparable: {r['why']}"),
        ]
        for r in rows.sort(_ORDER).to_dicts()
    ]
    return Table(
        "Speed-up over each config's control (a config run with the setting it must differ "
        "from the baseline in)",
        [
            Column("Config", "l"),
            Column("Control", "l"),
            Column("TP"),
            Column("Workload", "l"),
            Column(figure_title("speedup", scope="over the control", ci=True)),
            Column("Comparable", "p", 0.35),
        ],
        body,
        small=True,
    )

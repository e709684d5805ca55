"""What several sections print the same way: a config's name with its marks, the scope of a
table, and the columns of a comparison row."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import polars as pl

from specbench_tui.bench.figures import DEFINITIONS
from specbench_tui.report import format as f
from specbench_tui.report.blocks import Cell, Section
from specbench_tui.report.frames import (
    FAILED_MARK,
    IMPLAUSIBLE_MARK,
    NOT_COMPARABLE_MARK,
    PLAUSIBLE_MARGIN,
    UNCHECKED_MARK,
    UNTIMED_MARK,
    comparison,
)
from specbench_tui.report.inputs import Inputs

BEST_NOTE = "best"
TIE_NOTE = "tied"
CHECK_NOTE = FAILED_MARK
UNCHECKED_NOTE = UNCHECKED_MARK
BASE_NOTE = "base"

#: Decode tok/s as every table figures it (report/frames.py ``unit_moments``): the one
#: definition (bench/figures.py ``DEFINITIONS``), which the methodology's table of figures
#: and each section's prose print.
DECODE_DEFINITION = DEFINITIONS["decode_tok_s_total"]

MARKS_EXPLAINED = (
    "Bold marks the best config of a table, only where Welch's test (5%) tells it apart from "
    "the runner-up; 'tied' marks the configs that cannot be told apart from the highest mean at "
    "this sample size (then none is best); 'base' marks the baseline. A config that failed a "
    "correctness check is marked 'failed check', one whose outputs no verdict covers "
    "'unchecked'; neither is ever best. 'decode not timed' marks a config that ran but whose "
    "every request reached the client whole, in one read (a client too busy to read the "
    "stream as it came): it has no decode rate or speed-up there, and its other figures stand. "
    f"'{IMPLAUSIBLE_MARK}' marks a speed-up whose interval lies over {PLAUSIBLE_MARGIN:.0%} above "
    "the config's accept length: a verify step that yields L tokens cannot make decoding more "
    "than about L times faster, so the two sides ran under different conditions (load, clocks); "
    f"it is never best. '{NOT_COMPARABLE_MARK}' marks a config whose measurement differs from "
    "its baseline's in more than speculative decoding (server settings, host load, client lag, "
    "packing, GPU clocks or throttling, a foreign GPU process): the Comparability section says "
    "why for each; it is never best. 'too few units' stands where an interval would reach "
    "zero: a mean's 95% interval whose lower bound is not above 0 (a noisy rate over two or "
    "three units), or a speed-up whose either side's interval does (Fieller's interval is "
    "then unbounded)."
)


def compared(inp: Inputs) -> pl.DataFrame:
    """The comparison frame, once per read."""
    if "comparison" not in inp.cache:
        inp.cache["comparison"] = comparison(inp)
    return inp.cache["comparison"]


def note(r: dict[str, Any]) -> str:
    marks = []
    if r.get("baseline"):
        marks.append(BASE_NOTE)
    if r.get("failed_check"):
        marks.append(CHECK_NOTE)
    elif r.get("unchecked"):
        marks.append(UNCHECKED_NOTE)
    if r.get("untimed"):
        marks.append(UNTIMED_MARK)
    if r.get("implausible"):
        marks.append(IMPLAUSIBLE_MARK)
    elif r.get("why"):
        marks.append(NOT_COMPARABLE_MARK)
    if r.get("best"):
        marks.append(BEST_NOTE)
    elif r.get("top_tie"):
        marks.append(TIE_NOTE)
    return ", ".join(marks)


def config_cell(r: dict[str, Any]) -> Cell:
    return Cell(str(r.get("label") or r.get("config")), bold=bool(r.get("best")))


def decode_cell(r: dict[str, Any]) -> Cell:
    return Cell(
        f.with_ci(
            r.get("decode_tok_s"), r.get("decode_tok_s_lo"), r.get("decode_tok_s_hi"), f.toks
        ),
        bold=bool(r.get("best")),
    )


def speedup_cell(r: dict[str, Any]) -> Cell:
    if r.get("untimed"):
        return Cell(f.MISSING)
    if r.get("baseline"):
        return Cell("1.00x")
    return Cell(
        f.ratio(
            r.get("speedup"), r.get("speedup_lo"), r.get("speedup_hi"), r.get("speedup_too_few")
        ),
        bold=bool(r.get("best")),
    )


def workload_section(sec: Section, workload: str, workloads: int) -> Section:
    """A subsection per workload where the kind has several; the section itself otherwise
    (the captions name the workload either way)."""
    return sec.sub(f"Workload {workload}") if workloads > 1 else sec


def names(items: list[str], limit: int = 2) -> str:
    """``a, b and 3 more``."""
    if len(items) <= limit + 1:
        return ", ".join(items)
    return ", ".join(items[:limit]) + f" and {len(items) - limit} more"


def where(host: str, tp: Any, hosts: int) -> str:
    """A table's scope: TP always, the host when the campaign has several (or always in a
    caption, where it costs nothing)."""
    return f"TP {tp} on {host}" if host else f"TP {tp}"


def batch_hosts(inp: Inputs) -> list[str]:
    """Hosts whose groups ran as batch jobs (the log has their jobs): where none of their
    nodes recorded GPU samples or energy (the jobs' own are folded into the campaign), the
    telemetry and energy sections say so rather than leave their heading out."""
    return sorted(
        {g.group.host for gid, g in inp.state.groups.items() if g.group and gid in inp.state.jobs}
    )


#: The kinds of interval a chart's error bar can be (report/stats.py computes them).
FIELLER_BARS = "Fieller's 95% interval of the ratio of means"
MEAN_BARS = "Student-t 95% interval of the mean"
WILSON_BARS = "Wilson 95% interval of the share"


def interval_bars(kind: str, counts: Iterable[Any]) -> str:
    """What a chart's error bars are, for its caption: the interval's ``kind`` ("Fieller's
    95% interval of the ratio", "Student-t 95% interval of the mean") and over how many
    units each bar stands (``counts``: each bar's n)."""
    ns = sorted({int(n) for n in counts if n is not None})
    if not ns:
        return kind
    span = str(ns[0]) if ns[0] == ns[-1] else f"{ns[0]}-{ns[-1]}"
    return f"{kind}, over {span} unit{'s' * (ns[-1] != 1)} a bar"

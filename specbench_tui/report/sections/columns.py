"""The report's table columns as data: each column a header, a cell and an alignment, its header
taken from the figure's one name (bench/figures.py ``FIGURE_NAMES``, ``figure_title``) so that a
figure is called the same in every table, and a figure over another scope gets another name.

A section builds a table as ``table(caption, [CONFIG, N, DECODE_CI, ...], rows)`` over its row
dicts; the table keeps the columns' keys (``Table.keys``), which the tests read to check what
each table shows. A header that names a figure is written only here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specbench_tui.bench.figures import figure_title
from specbench_tui.report import format as f
from specbench_tui.report.blocks import Align, Cell, Column, Table
from specbench_tui.report.sections.common import config_cell, decode_cell, note, speedup_cell

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Col:
    """One column of a table: its key (the figure's, or the row field's), header and cell."""

    key: str
    title: str
    cell: Callable[[Row], Cell]
    align: Align = "r"
    width: float = 0.0  # for align "p": a share of the line width

    @property
    def column(self) -> Column:
        return Column(self.title, self.align, self.width)


def field(
    key: str, title: str, fmt: Callable[[Any], str] = str, align: Align = "r", at: str = ""
) -> Col:
    """A column that prints the row's ``at`` (``key`` by default) with ``fmt`` (a name, a
    count)."""
    src = at or key
    return Col(key, title, lambda r: Cell(f.MISSING if r.get(src) is None else fmt(r[src])), align)


def figure(
    key: str,
    fmt: Callable[[Any], str],
    *,
    at: str = "",
    stat: str = "",
    scope: str = "",
    ci: bool = False,
) -> Col:
    """A figure's column: the header from its name (``figure_title``), the value from the row's
    ``at`` (the figure's key by default), with ``at_lo`` .. ``at_hi`` where ``ci``."""
    src = at or key
    title = figure_title(key, stat=stat, scope=scope, ci=ci)
    tag = "_".join(p for p in (key, stat, scope.replace(" ", "_"), "ci" * ci) if p)
    if ci:
        return Col(
            tag,
            title,
            lambda r: Cell(f.with_ci(r.get(src), r.get(f"{src}_lo"), r.get(f"{src}_hi"), fmt)),
        )
    return Col(tag, title, lambda r: Cell(fmt(r.get(src))))


def blank(share: float = 0.0) -> Col:
    """The marks column (no header): a row's marks (base, failed check, best ...) or ``why``."""
    return Col(
        "marks",
        "",
        lambda r: Cell(str(r.get("marks") if "marks" in r else note(r))),
        "p" if share else "l",
        share,
    )


def with_energy(rows: Sequence[Row], *cols: Col) -> list[Col]:
    """``cols`` where some row of the table has GPU board energy, else none."""
    return list(cols) if any(r.get("j_per_token") is not None for r in rows) else []


#: Columns that name a row rather than give a figure: where a table is split to fit the
#: page, the leading run of them is repeated in each part, so no part loses its rows' names.
ROW_NAMES = frozenset(
    {"host", "tp", "workload", "kind", "config", "concurrency", "fastest", "deploy"}
)


def table(
    caption: str,
    cols: Sequence[Col],
    rows: Sequence[Row],
    csv_fields: Sequence[str] = (),
    **kw: Any,
) -> Table:
    """A table of ``rows`` under ``cols``; ``kw``: the rest of :class:`Table`. Its key columns
    are its leading columns that name a row (``ROW_NAMES``). ``csv_fields``: the rows' fields
    its CSV holds, unformatted (else the cells' text)."""
    lead = next((i for i, c in enumerate(cols) if c.key not in ROW_NAMES), len(cols))
    if csv_fields:
        kw["csv"] = [{k: r.get(k) for k in csv_fields} for r in rows]
    return Table(
        caption,
        [c.column for c in cols],
        [[c.cell(r) for c in cols] for r in rows],
        keys=[c.key for c in cols],
        key_columns=max(1, lead),
        **kw,
    )


# The columns several tables share. Keys, not titles, are what a test names.
HOST = field("host", "Host", align="l")
TP = field("tp", "TP")
WORKLOAD = field("workload", "Workload", align="l")
CLIENTS = field("concurrency", "Clients")
CONFIG = Col("config", "Config", config_cell, "l")
N = field("n", "n")
REQUESTS = field("requests", "Requests", f.count)
DECODE_CI = Col("decode_tok_s_total_ci", figure_title("decode_tok_s_total", ci=True), decode_cell)
SPEEDUP_CI = Col("speedup_ci", figure_title("speedup", ci=True), speedup_cell)
ACCEPT = figure("accept_length", f.accept, at="accept_len_weighted")
ACCEPT_REQ_MEAN = figure("accept_length", f.accept, at="accept_len_mean", scope="request mean")
TTFT_P50 = figure("ttft_s", f.ms, at="ttft_p50", stat="p50")
TTFT_P99 = figure("ttft_s", f.ms, at="ttft_p99", stat="p99")
TPOT_P50 = figure("tpot_s", f.ms, at="tpot_p50", stat="p50")
E2E = figure("e2e_tok_s", f.toks)
DECODE = figure("decode_tok_s_total", f.toks, at="decode_tok_s")
THROUGHPUT = figure("throughput_tok_s", f.toks)
THROUGHPUT_CI = figure("throughput_tok_s", f.toks, ci=True)
LOAD_SPEEDUP = figure("load_speedup", f.speedup)
J_TOKEN = figure("j_per_token", lambda v: f.fnum(v, 4))
J_ABOVE_IDLE = figure("j_per_token_above_idle", lambda v: f.fnum(v, 4))
ENERGY = (J_TOKEN, J_ABOVE_IDLE)

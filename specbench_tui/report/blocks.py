"""The report as a document of blocks (sections, paragraphs, tables, charts), built by the
section modules and laid out by the two templates.

Both templates render the same blocks, so the Markdown report for a pull request has exactly
the tables of the PDF; only charts are PDF-only (Markdown names them). Numbers are formatted
once, in Python (report/format.py), for the same reason: the two formats can never disagree
on a digit. Text is plain; each template escapes it for its format.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Align = Literal["l", "r", "p"]


@dataclass(frozen=True)
class Span:
    """A run of text: plain, bold or code (a name, a command line)."""

    text: str
    bold: bool = False
    code: bool = False


Text = list[Span]


def text(*parts: str | Span) -> Text:
    return [p if isinstance(p, Span) else Span(p) for p in parts]


def bold(s: str) -> Span:
    return Span(s, bold=True)


def code(s: str) -> Span:
    return Span(s, code=True)


@dataclass
class Para:
    spans: Text
    kind: Literal["text", "warning", "banner", "small"] = "text"


@dataclass
class Bullets:
    items: list[Text]


@dataclass
class Facts:
    """A two-column list of key and value (the status block)."""

    rows: list[tuple[str, Text]]


@dataclass(frozen=True)
class Column:
    title: str
    align: Align = "r"
    width: float = 0.0  # for align "p": a share of the line width


@dataclass
class Cell:
    text: str
    bold: bool = False
    code: bool = False
    spans: Text | None = None  # mixed text (plain and code) instead of ``text``


@dataclass
class Table:
    caption: str
    columns: list[Column]
    rows: list[list[Cell]]
    notes: list[str] = field(default_factory=list)  # said under the table
    small: bool = False
    # The table's data for tables/*.csv, unformatted (numbers as numbers, intervals as their
    # own columns); None: the CSV holds the cells' text.
    csv: list[dict[str, Any]] | None = None
    # Leading columns that name a row (repeated in each part where a wide table is split).
    key_columns: int = 1
    # The columns after the keys come in runs of this many that a split keeps together (a
    # dataset's speed-up beside its tau).
    column_group: int = 1
    # The columns' keys where the table was declared from column specs
    # (report/sections/columns.py): what a test reads to check a table's columns.
    keys: list[str] = field(default_factory=list)


def row(*cells: str | Cell, bold_all: bool = False) -> list[Cell]:
    out = []
    for c in cells:
        cell = c if isinstance(c, Cell) else Cell(str(c))
        if bold_all:
            cell = Cell(cell.text, bold=True, code=cell.code)
        out.append(cell)
    return out


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    lo: float | None = None  # 95% interval of y, where known
    hi: float | None = None


@dataclass
class Series:
    name: str
    points: list[Point]
    color: int = 0  # index into the one palette
    dashed: bool = False
    right: bool = False  # plotted against the chart's right axis


@dataclass
class Chart:
    """One plot. ``kind``: ``bars`` (x is a category index into ``categories``), ``lines`` or
    ``scatter`` (numeric x)."""

    title: str
    kind: Literal["bars", "lines", "scatter"]
    xlabel: str
    ylabel: str
    series: list[Series]
    categories: list[str] = field(default_factory=list)
    xlog: bool = False  # base 2: budgets and client counts double
    hline: float | None = None  # a reference line (speed-up 1.0)
    ylabel_right: str = ""
    ymin: float | None = None
    wide: bool = False  # the full line width instead of half
    # What an error bar is, said in the caption where any point has one ("95% Fieller
    # intervals, 3 repeats a config"): a reader must not guess the interval's kind or n.
    bars: str = ""

    @property
    def has_points(self) -> bool:
        return any(s.points for s in self.series)

    @property
    def y_cap(self) -> float | None:
        """A top for the y axis when some interval reaches far beyond every value (a mean of
        two repeats can have a huge one): the values stay readable, those bars are cut."""
        pts = [p for s in self.series if not s.right for p in s.points]
        if not pts:
            return None
        top_value = max(p.y for p in pts)
        top_bar = max(p.hi if p.hi is not None else p.y for p in pts)
        if top_value > 0 and top_bar > 1.6 * top_value:
            return 1.35 * top_value
        return None

    @property
    def y_floor(self) -> float | None:
        """The bottom of the y axis: ``ymin`` where set; with a reference line, low enough to
        show it (TeX's dimensions overflow on a line far outside a narrow data range)."""
        if self.ymin is not None or self.hline is None:
            return self.ymin
        pts = [p for s in self.series if not s.right for p in s.points]
        low = min([p.lo if p.lo is not None else p.y for p in pts], default=self.hline)
        return min(low, self.hline) * 0.9

    @property
    def caption(self) -> str:
        said = []
        if self.bars and any(p.lo is not None for s in self.series for p in s.points):
            said.append(f"error bars: {self.bars}")
        if self.y_cap:
            said.append("intervals reaching beyond the top are cut")
        return self.title + (f" ({'; '.join(said)})" if said else "")


@dataclass
class Charts:
    """Charts laid out side by side, two to a row (a wide one alone)."""

    charts: list[Chart]


Block = Para | Bullets | Facts | Table | Charts


@dataclass
class Section:
    title: str
    blocks: list[Block | Section] = field(default_factory=list)
    level: int = 1  # 1 section, 2 subsection
    newpage: bool = False

    def add(self, *blocks: Block | Section) -> Section:
        self.blocks.extend(blocks)
        return self

    def sub(self, title: str) -> Section:
        s = Section(title, level=self.level + 1)
        self.blocks.append(s)
        return s

    def tables(self) -> list[Table]:
        out: list[Table] = []
        for b in self.blocks:
            if isinstance(b, Table):
                out.append(b)
            elif isinstance(b, Section):
                out.extend(b.tables())
        return out

    def charts(self) -> list[Chart]:
        out: list[Chart] = []
        for b in self.blocks:
            if isinstance(b, Charts):
                out.extend(b.charts)
            elif isinstance(b, Section):
                out.extend(b.charts())
        return out

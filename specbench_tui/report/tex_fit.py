"""Tables that fit the PDF's page: each table's natural width estimated from the font's own
glyph widths, and a table wider than the line split into parts of its columns (the key
columns and the marks column repeated in each, so a row is always named and a "failed
check" is never cut off), a part still too wide set on a landscape page.

A longtable cannot be measured by TeX before it is set (it breaks across pages), so the
width is computed here. The glyph widths are Latin Modern's in T1 at ``\\footnotesize``
(what ``small`` tables use), as TeX measured them; tests/test_report_tex_fit.py measures
them again with the installed TeX and compares.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from itertools import combinations, pairwise

from specbench_tui.report.blocks import Cell, Table

# Widths in pt of the ASCII characters 32..126 at \footnotesize (8 pt), T1 Latin Modern:
# roman and bold.
_ASCII: dict[str, tuple[float, ...]] = {
    fam: tuple(float(w) for w in widths.split())
    for fam, widths in (
        (
            "rm",
            "2.833 2.361 3.225 7.083 4.25 7.083 6.611 2.361 3.306 3.306 4.25 6.611 2.361 "
            "2.833 2.361 4.25 4.25 4.25 4.25 4.25 4.25 4.25 4.25 4.25 4.25 4.25 2.361 2.361 "
            "6.611 6.611 6.611 4.014 6.611 6.367 6.017 6.139 6.489 5.78 5.545 6.668 6.367 "
            "3.061 4.364 6.603 5.308 7.784 6.367 6.611 5.78 6.611 6.253 4.722 6.139 6.367 "
            "6.367 8.728 6.367 6.367 5.194 2.361 4.25 2.361 4.444 6.367 2.361 4.25 4.722 "
            "3.778 4.722 3.778 2.597 4.25 4.722 2.361 2.597 4.486 2.361 7.083 4.722 4.25 "
            "4.722 4.486 3.312 3.353 3.306 4.722 4.486 6.139 4.486 4.486 3.778 4.25 2.361 "
            "4.25 4.444 ",
        ),
        (
            "bf",
            "3.267 2.983 4.146 8.167 4.9 8.167 7.622 2.722 3.811 3.811 4.9 7.622 2.722 3.267 "
            "2.722 4.9 4.9 4.9 4.9 4.9 4.9 4.9 4.9 4.9 4.9 4.9 2.722 2.722 7.155 7.622 7.155 "
            "4.628 7.622 7.378 6.955 7.078 7.5 6.422 6.15 7.697 7.639 3.672 5.05 7.65 5.878 "
            "9.272 7.639 7.361 6.684 7.361 7.322 5.444 6.817 7.508 7.378 10.1 7.378 7.378 "
            "5.989 2.722 4.6 2.722 4.444 7.378 2.722 4.764 5.444 4.356 5.444 4.489 2.994 4.9 "
            "5.444 2.722 2.994 5.172 2.722 8.167 5.444 4.9 5.444 5.172 4.05 3.866 3.811 5.444 "
            "5.172 7.078 5.172 5.172 4.356 4.6 2.555 4.6 4.444 ",
        ),
    )
}
_TT = 4.25  # every typewriter glyph
# What the escape turns a few non-ASCII characters into (render.tex_escape), roman / bold.
_SPECIAL: dict[str, tuple[float, float]] = {
    "\u00d7": (6.611, 6.611),  # $\times$
    "\u00b1": (6.611, 6.611),
    "\u2013": (4.25, 4.9),  # --
    "\u2014": (8.5, 9.8),  # ---
    "\u2026": (11.334, 13.067),
    "\u2192": (8.5, 8.5),
    "\u2265": (6.611, 6.611),
    "\u2264": (6.611, 6.611),
}

#: ``\linewidth`` of the report's page (a4, 1.6 cm margins) in pt; and the same page turned.
LINE_PT = 506.4
LANDSCAPE_PT = 751.3
#: Column separation of small tables (``\tabcolsep`` 3 pt) and of the others (6 pt).
SMALL_SEP = 3.0
NORMAL_SEP = 6.0
#: Text at the normal size (10 pt) against \footnotesize (8 pt); Latin Modern's 8 pt design
#: is a little wider for its size, so this errs on the wide side.
NORMAL_SCALE = 1.25
#: What an estimate may be off by (kerning, ligatures): a table is taken to fit only with
#: this much room to spare.
SLACK_PT = 3.0


def text_width(s: str, *, bold: bool = False, code: bool = False) -> float:
    """The width in pt of ``s`` set at \\footnotesize."""
    if code:
        return _TT * len(s)
    table = _ASCII["bf" if bold else "rm"]
    total = 0.0
    for ch in s:
        o = ord(ch)
        if 32 <= o < 127:
            total += table[o - 32]
        elif ch in _SPECIAL:
            total += _SPECIAL[ch][1 if bold else 0]
        else:
            total += table[ord("M") - 32]  # a letter the escape reduces it to, at its widest
    return total


def head_lines(title: str) -> list[str]:
    """A column heading on up to two lines (cut at the space nearest the middle), so narrow
    numeric columns stay narrow."""
    if len(title) <= 10 or " " not in title:
        return [title]
    mid = len(title) // 2
    cut = min((i for i, ch in enumerate(title) if ch == " "), key=lambda i: abs(i - mid))
    return [title[:cut], title[cut + 1 :]]


def cell_width(c: Cell) -> float:
    if c.spans:
        return sum(text_width(s.text, bold=s.bold, code=s.code) for s in c.spans)
    return text_width(c.text, bold=c.bold, code=c.code)


def column_widths(t: Table, line: float = LINE_PT) -> list[float]:
    """Each column's width at \\footnotesize, separation left out: a ``p`` column's share of
    ``line``, another's widest cell or heading line."""
    out = []
    for i, col in enumerate(t.columns):
        if col.align == "p":
            out.append(col.width * line)
            continue
        cells = [cell_width(row[i]) for row in t.rows if i < len(row)]
        heads = [text_width(h) for h in head_lines(col.title)]
        out.append(max([*cells, *heads, 0.0]))
    return out


def set_widths(t: Table, line: float = LINE_PT) -> list[float]:
    """Each column's width as set at the table's size (separation left out)."""
    widths = column_widths(t, line)
    if not t.small:
        scaled = zip(widths, t.columns, strict=True)
        widths = [w if c.align == "p" else w * NORMAL_SCALE for w, c in scaled]
    return widths


def _total(widths: Iterable[float], sep: float) -> float:
    ws = list(widths)
    return sum(ws) + 2 * sep * max(len(ws) - 1, 0)


def table_width(t: Table, line: float = LINE_PT, sep: float | None = None) -> float:
    """The whole table's width in pt as set (``@{}`` at both ends), its columns ``sep`` apart
    on each side (default: the table's ``\\tabcolsep``)."""
    if sep is None:
        sep = SMALL_SEP if t.small else NORMAL_SEP
    return _total(set_widths(t, line), sep)


def fits(t: Table, line: float = LINE_PT, sep: float | None = None) -> bool:
    return table_width(t, line, sep) + SLACK_PT <= line


@dataclass(frozen=True)
class Part:
    """One table as set: all of it, or some of its columns; ``sep``: its ``\\tabcolsep`` in
    pt; ``landscape``: on a turned page."""

    table: Table
    sep: float
    part: int = 1
    parts: int = 1
    landscape: bool = False

    @property
    def continued(self) -> bool:
        return self.part > 1


def _marks_column(t: Table) -> int | None:
    """The trailing column of marks (untitled: "base", "failed check", "best"), if any."""
    last = len(t.columns) - 1
    return last if last > 0 and not t.columns[last].title else None


def _subset(t: Table, cols: list[int]) -> Table:
    return replace(
        t,
        columns=[t.columns[i] for i in cols],
        rows=[[row[i] if i < len(row) else Cell("") for i in cols] for row in t.rows],
    )


def _partitions(items: list[int], k: int) -> Iterator[list[list[int]]]:
    """Every split of ``items`` into ``k`` non-empty runs, in order."""
    for cuts in combinations(range(1, len(items)), k - 1):
        bounds = (0, *cuts, len(items))
        yield [items[a:b] for a, b in pairwise(bounds)]


#: Splits of a table's columns tried at most: a table of many columns, or with a cell wider
#: than the line, must not hold the report (every split of 20 columns is half a million).
MAX_SPLITS = 5000


def layout(t: Table) -> list[Part]:
    """How ``t`` is set so that it fits the page: whole where it fits, with its columns
    closer together where that is enough; else split into as few parts of its columns as
    fit, as even as they can be, each repeating the key columns (``t.key_columns``) and the
    marks column; a part that cannot fit the line (too few columns to split further, or
    past ``MAX_SPLITS`` tries) on a landscape page; the notes under the last part. Each
    column is measured once: a split's width is a sum."""
    sep = SMALL_SEP if t.small else NORMAL_SEP
    if not t.rows:
        return [Part(t, sep)]
    widths = set_widths(t)
    room = LINE_PT - SLACK_PT
    if _total(widths, sep) <= room:
        return [Part(t, sep)]
    if _total(widths, sep / 2) <= room:
        return [Part(t, sep / 2)]
    n = len(t.columns)
    marks = _marks_column(t)
    keys = list(range(min(max(t.key_columns, 1), n)))
    fixed = keys + ([marks] if marks is not None and marks not in keys else [])
    payload = [i for i in range(n) if i not in fixed]
    size = max(t.column_group, 1)
    runs = [tuple(payload[i : i + size]) for i in range(0, len(payload), size)]

    def cols_of(group: list[int]) -> list[int]:
        return sorted(fixed + [c for r in group for c in runs[r]])

    def width(group: list[int]) -> float:
        return _total((widths[i] for i in cols_of(group)), sep)

    # A run that does not fit beside the keys alone fits in no part: no split will.
    units = list(range(len(runs)))
    fits_alone = bool(units) and all(width([i]) <= room for i in units)
    best = _fewest_parts(units, width, room) if fits_alone else None
    if best is None:  # no split of the columns fits the line: the whole table on a turned page
        return [Part(t, sep, landscape=True)]
    k = len(best)
    parts = [_subset(t, cols_of(g)) for g in best]
    return [
        Part(replace(part, notes=[]) if i < k else part, sep, i, k)
        for i, part in enumerate(parts, start=1)
    ]


def _fewest_parts(
    payload: list[int], width: Callable[[list[int]], float], room: float
) -> list[list[int]] | None:
    """The split of ``payload`` into as few runs as fit ``room``, the most even of those;
    None when none does within ``MAX_SPLITS`` tries."""
    tried = 0
    for k in range(2, len(payload) + 1):
        fitting = []
        for groups in _partitions(payload, k):
            tried += 1
            if tried > MAX_SPLITS:
                return None
            if all(width(g) <= room for g in groups):
                fitting.append(groups)
        if fitting:
            return min(fitting, key=lambda gs: max(width(g) for g in gs))
    return None

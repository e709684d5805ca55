"""Every table and chart of a report as a CSV file beside it (``tables/``), so a figure can be
plotted again without parsing Markdown or LaTeX.

A table whose section gave its data unformatted (``Table.csv``) is written from that: numbers
as numbers, intervals as columns of their own. Any other table is written as it reads, one
column per heading. A chart is written as one row per point: series, x (or the bar's
category), y and its interval.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

from specbench_tui.report.blocks import Chart, Table
from specbench_tui.results.files import write_bytes_atomic

TABLES_DIR = "tables"


def _slug(text: str, limit: int = 60) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:limit].rstrip("-") or "untitled"


def _cell_text(cell: Any) -> str:
    if cell.spans is not None:
        return "".join(s.text for s in cell.spans)
    return cell.text


def table_csv(table: Table) -> str:
    out = io.StringIO()
    if table.csv is not None:
        fields = list(dict.fromkeys(k for row in table.csv for k in row))
        w = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        for row in table.csv:
            w.writerow({k: "" if row.get(k) is None else row.get(k) for k in fields})
        return out.getvalue()
    w2 = csv.writer(out, lineterminator="\n")
    w2.writerow([c.title for c in table.columns])
    for row in table.rows:
        w2.writerow([_cell_text(c) for c in row])
    return out.getvalue()


def chart_csv(chart: Chart) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    bars = chart.kind == "bars"
    w.writerow(["series", "category" if bars else chart.xlabel or "x", chart.ylabel or "y",
                "lo", "hi"])  # fmt: skip
    for s in chart.series:
        for p in s.points:
            x: Any = p.x
            if bars and 0 <= int(p.x) < len(chart.categories):
                x = chart.categories[int(p.x)]
            w.writerow([s.name, x, p.y, "" if p.lo is None else p.lo, "" if p.hi is None else p.hi])
    return out.getvalue()


def write_tables(root: Path, tables: list[Table], charts: list[Chart], stem: str) -> list[Path]:
    """Write ``<root>/tables/<stem>-NN-<caption>.csv`` for each table and chart (numbered as
    the report numbers them); files of an earlier rendering that this one has not written are
    removed, so the directory always matches the report."""
    folder = root / TABLES_DIR
    folder.mkdir(exist_ok=True)
    written: list[Path] = []
    for i, t in enumerate(tables, 1):
        path = folder / f"{stem}-table-{i:02d}-{_slug(t.caption)}.csv"
        write_bytes_atomic(path, table_csv(t).encode())
        written.append(path)
    for i, c in enumerate((c for c in charts if c.has_points), 1):
        path = folder / f"{stem}-chart-{i:02d}-{_slug(c.title)}.csv"
        write_bytes_atomic(path, chart_csv(c).encode())
        written.append(path)
    for old in folder.glob(f"{stem}-*.csv"):
        if old not in written:
            old.unlink(missing_ok=True)
    return written

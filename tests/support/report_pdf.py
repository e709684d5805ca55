"""A report's PDF read back with poppler's tools (pdfinfo, pdftotext): its pages, every chart
as a numbered figure, every table captioned, every section there."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from conftest import need_program

from specbench_tui.report.build import build_report


def pdf_text(pdf: Path) -> tuple[int, str]:
    """Pages and text of a PDF, by poppler's own tools."""
    info = subprocess.run(
        [need_program("pdfinfo"), str(pdf)], capture_output=True, text=True, check=True
    ).stdout
    pages = int(re.search(r"^Pages:\s+(\d+)", info, re.M).group(1))  # type: ignore[union-attr]
    text = subprocess.run(
        [need_program("pdftotext"), "-layout", str(pdf), "-"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return pages, text


def check_pdf(root: Path, min_pages: int) -> str:
    """The PDF has its pages, every chart as a numbered figure and every table captioned."""
    report = build_report(root)
    pages, text = pdf_text(root / "report.pdf")
    assert pages >= min_pages
    charts = [c for c in report.charts() if c.has_points]
    figures = sorted({int(n) for n in re.findall(r"Figure (\d+):", text)})
    assert figures == list(range(1, len(charts) + 1))
    tables = sorted({int(n) for n in re.findall(r"Table (\d+):", text)})
    assert tables == list(range(1, len(report.tables()) + 1))
    for s in report.sections:
        assert s.title in text.replace("\n", " "), s.title
    return text


def overfull_boxes(tex: Path, work: Path) -> list[str]:
    """Compile ``tex`` with pdflatex in ``work`` (twice, as longtable needs) and return the
    log's "Overfull" lines: material wider than its line, a table cut at the page edge."""
    pdflatex = need_program("pdflatex")
    work.mkdir(parents=True, exist_ok=True)
    (work / "report.tex").write_text(tex.read_text())
    for _ in range(2):
        subprocess.run(
            [pdflatex, "-interaction=nonstopmode", "-halt-on-error", "report.tex"],
            cwd=work,
            capture_output=True,
            check=True,
            timeout=300,
        )
    log = (work / "report.log").read_text(errors="replace")
    return [line for line in log.splitlines() if line.startswith("Overfull")]


def duplicate_destinations(work: Path) -> list[str]:
    """After :func:`overfull_boxes` compiled in ``work``: pdfTeX's "destination with the same
    identifier" warnings (two anchors of one name: a link that lands on the wrong table)."""
    log = (work / "report.log").read_text(errors="replace")
    return re.findall(r"destination with the same identifier \(name\{([^}]*)\}\)", log)

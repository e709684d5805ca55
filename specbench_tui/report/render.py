"""Render report.md and report.tex (and report.pdf where a TeX engine exists) from a results
directory.

The report is a view of the results and can always be rendered again, so it is written with
temp files and atomic renames: a reader (or a crash) never sees half a report. LaTeX is the
fragile part: every string that came from a plan or a log goes through one escape function
(the template environment applies it to every value it prints), and the PDF is compiled in a
scratch directory with a timeout, so a TeX problem costs the PDF and nothing else.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import tempfile
import unicodedata
from pathlib import Path
from typing import Any

import jinja2

from specbench_tui.errors import InputError
from specbench_tui.printable import printable
from specbench_tui.report.blocks import Chart, Column, Point
from specbench_tui.report.build import Report, build_from
from specbench_tui.report.comparisons import FILE as COMPARISONS_FILE
from specbench_tui.report.comparisons import write_comparisons
from specbench_tui.report.inputs import load_inputs
from specbench_tui.report.sections.common import compared
from specbench_tui.report.tables_csv import write_tables
from specbench_tui.report.tex_fit import head_lines, layout
from specbench_tui.results.files import StorageError, write_bytes_atomic

log = logging.getLogger(__name__)

TEMPLATES = Path(__file__).parent / "templates"
TEX_ENGINES = ("pdflatex", "xelatex", "lualatex")
TEX_TIMEOUT_S = 120.0
TEX_MAX_PASSES = 3  # longtable settles its column widths over a second (rarely third) pass
LOG_TAIL_LINES = 80


# -- LaTeX -------------------------------------------------------------------------------------


class TexRaw(str):
    """LaTeX the templates build on purpose; the escaping finalizer lets it through."""

    __slots__ = ()


_TEX_CHARS = {
    "\\": r"\textbackslash{}",
    "{": r"\{",
    "}": r"\}",
    "_": r"\_",
    "%": r"\%",
    "&": r"\&",
    "#": r"\#",
    "$": r"\$",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
    "\u2014": "---",
    "\u2013": "--",
    "\u00d7": r"$\times$",
    "\u2192": r"$\rightarrow$",
    "\u2265": r"$\geq$",
    "\u2264": r"$\leq$",
    "\u00b5": r"$\mu$",
    "\u00b1": r"$\pm$",
    "\u221e": r"$\infty$",
    "\u2248": r"$\approx$",
    "\u2026": r"\ldots{}",
    "\u00a0": "~",
    "\u2018": "`",
    "\u2019": "'",
    "\u201c": "``",
    "\u201d": "''",
    # Break TeX ligatures that would change what a name says (-- and --- become dashes).
    "-": "-{}",
}


#: A word longer than this (a host's full name, a path) may break after its separators.
_LONG_WORD = 20


def tex_escape(value: Any) -> str:
    """Make any text safe as LaTeX body text, whatever the plan or a log put in it.

    Characters the default fonts cannot set are reduced to their ASCII base letter (or '?'),
    so an unusual label can never stop the PDF from compiling. A long word (a host's full
    name) may break after its dots, dashes and slashes, so it never runs off the line.
    """
    text = str(value)
    if len(text) > _LONG_WORD and any(len(w) > _LONG_WORD for w in text.split()):
        return "".join(
            _escape(w) if len(w) <= _LONG_WORD else _breakable(w) for w in re.split(r"(\s+)", text)
        )
    return _escape(text)


def _breakable(word: str) -> str:
    return "".join(_escape(ch) + (r"\allowbreak{}" if ch in _BREAK_AFTER else "") for ch in word)


def _escape(value: str) -> str:
    out: list[str] = []
    for ch in value:
        if ch in _TEX_CHARS:
            out.append(_TEX_CHARS[ch])
        elif ch < " " or ch == "\x7f":
            out.append(" ")
        elif ch.isascii():
            out.append(ch)
        else:
            base = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode()
            out.append("".join(_TEX_CHARS.get(c, c) for c in base) or "?")
    return "".join(out)


def _tex_finalize(value: Any) -> str:
    """Applied by jinja to every printed value: nothing reaches the .tex unescaped."""
    if isinstance(value, TexRaw):
        return value
    if value is None:
        return "---"
    return tex_escape(value)


def _coord(v: Any) -> TexRaw:
    """A number as pgfplots reads it (no thousands separators, no exponent surprises)."""
    return TexRaw(f"{float(v):.6g}")


def _point(p: Point, explicit: bool, cap: float | None = None) -> TexRaw:
    """A pgfplots coordinate with its error bar; a bar reaching beyond the axis' ``cap`` is
    cut there (TeX's dimensions overflow on a bar thousands of axis heights long)."""
    xy = f"({float(p.x):.6g},{float(p.y):.6g})"
    if not explicit:
        return TexRaw(xy)
    hi = p.hi if p.hi is None or cap is None else min(p.hi, cap * 1.02)
    up = (hi - p.y) if hi is not None else 0.0
    down = (p.y - p.lo) if p.lo is not None else 0.0
    return TexRaw(f"{xy} += (0,{max(up, 0.0):.6g}) -= (0,{max(down, 0.0):.6g})")


def _has_ci(points: list[Point]) -> bool:
    return any(p.lo is not None and p.hi is not None for p in points)


def _anchor_x(chart: Chart) -> float:
    """Any x of the chart's data: a valid coordinate on a log axis for a reference line."""
    return next(p.x for s in chart.series for p in s.points)


def _xrange(chart: Chart) -> tuple[float, float]:
    xs = [p.x for s in chart.series for p in s.points]
    lo, hi = min(xs), max(xs)
    return (lo, hi if hi > lo else lo + 1.0)


def _chart_rows(charts: list[Chart]) -> list[list[Chart]]:
    """Charts two to a row; a wide one alone."""
    rows: list[list[Chart]] = []
    for c in (c for c in charts if c.has_points):
        if c.wide or not rows or len(rows[-1]) == 2 or rows[-1][0].wide:
            rows.append([c])
        else:
            rows[-1].append(c)
    return rows


def _chart_width(chart: Chart) -> TexRaw:
    return TexRaw(r"\linewidth" if chart.wide else r"0.485\linewidth")


def _colspec(columns: list[Column]) -> TexRaw:
    out = []
    for c in columns:
        if c.align == "p":
            out.append(rf">{{\raggedright\arraybackslash}}p{{{c.width:.2f}\linewidth}}")
        else:
            out.append(c.align)
    return TexRaw("".join(out))


def _head(title: str) -> TexRaw:
    """A column heading on up to two lines (tex_fit.head_lines), so narrow numeric columns
    stay narrow."""
    lines = head_lines(str(title))
    if len(lines) == 1:
        return TexRaw(tex_escape(lines[0]))
    a, b = lines
    return TexRaw(
        r"\begin{tabular}[b]{@{}c@{}}" + tex_escape(a) + r"\\{}" + tex_escape(b) + r"\end{tabular}"
    )


#: Where code text (paths, flags, hashes) may break: after these characters, and inside any
#: run of ``_BREAK_EVERY`` characters without one (a hashed folder, a long file name), so no
#: path is wider than its column.
_BREAK_AFTER = frozenset("/=,-_.:")
_BREAK_EVERY = 12


def _codebreak(v: Any) -> TexRaw:
    """Code text that may break after a separator or inside a long run without one."""
    out: list[str] = []
    run = 0
    for ch in str(v):
        out.append(tex_escape(ch))
        run += 1
        if ch in _BREAK_AFTER or run >= _BREAK_EVERY:
            out.append(r"\allowbreak{}")
            run = 0
    return TexRaw("".join(out))


def _kind(block: Any) -> str:
    return type(block).__name__


def _tex_env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        block_start_string="((*",
        block_end_string="*))",
        variable_start_string="(((",
        variable_end_string=")))",
        comment_start_string="((=",
        comment_end_string="=))",
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        finalize=_tex_finalize,
        autoescape=False,
    )
    env.filters.update(
        raw=lambda v: TexRaw(str(v)),
        kind=_kind,
        coord=_coord,
        point=_point,
        has_ci=_has_ci,
        anchor_x=_anchor_x,
        xrange=_xrange,
        chart_rows=_chart_rows,
        chart_width=_chart_width,
        colspec=_colspec,
        head=_head,
        codebreak=_codebreak,
        fit=layout,
    )
    return env


# -- Markdown ----------------------------------------------------------------------------------


def md_escape(value: Any) -> str:
    """Text safe inside a Markdown table cell: no pipe ends the cell, no star starts emphasis,
    no control character reaches a terminal that shows the file (``printable``).
    Whitespace runs become one space; a space at either end is kept (spans join on it)."""
    raw = str(value)
    text = printable(" ".join(raw.split()))
    if text and raw[:1].isspace():
        text = " " + text
    if text and raw[-1:].isspace():
        text += " "
    for ch in ("\\", "|", "*", "_", "`", "<", "["):
        text = text.replace(ch, "\\" + ch)
    return text


def md_bold(value: Any) -> str:
    """Bold text: the markers hug the words (Markdown ignores ``** x **``), spaces outside."""
    text = md_escape(value)
    core = text.strip()
    if not core:
        return text
    return text[: len(text) - len(text.lstrip())] + f"**{core}**" + text[len(text.rstrip()) :]


def md_code(value: Any) -> str:
    """Text inside a Markdown code span: backticks and pipes cannot end it or the cell."""
    return printable(" ".join(str(value).split())).replace("`", "'").replace("|", "\\|")


def _md_env(numbers: dict[int, int]) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    env.filters.update(
        md=md_escape,
        mdbold=md_bold,
        mdcode=md_code,
        kind=_kind,
        table_number=lambda t: numbers.get(id(t), 0),
    )
    return env


# -- writing -----------------------------------------------------------------------------------


def tex_engine() -> str | None:
    """The first TeX engine on PATH; the template needs nothing beyond LaTeX base packages."""
    for name in TEX_ENGINES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:]) + "\n"


def compile_pdf(tex_path: Path, pdf_path: Path, log_path: Path) -> bool:
    """Compile ``tex_path`` into ``pdf_path``; on failure keep the log tail in ``log_path``.

    The build runs in a scratch directory, so auxiliary files never litter the results, and a
    failed build leaves neither a partial PDF nor a stale one that would disagree with
    report.md. Never raises: a report without a PDF is still a report.
    """
    engine = tex_engine()
    if engine is None:
        log.info("no TeX engine on PATH (%s): report.pdf not built", ", ".join(TEX_ENGINES))
        pdf_path.unlink(missing_ok=True)
        return False
    try:
        with tempfile.TemporaryDirectory(prefix="specbench-report-") as tmp:
            work = Path(tmp)
            shutil.copyfile(tex_path, work / "report.tex")
            cmd = [
                engine,
                "-interaction=nonstopmode",
                "-halt-on-error",
                "-no-shell-escape",
                "report.tex",
            ]
            for _ in range(TEX_MAX_PASSES):
                proc = subprocess.run(
                    cmd,
                    cwd=work,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=TEX_TIMEOUT_S,
                    check=False,
                )
                tex_log = work / "report.log"
                text = (
                    tex_log.read_text(errors="replace")
                    if tex_log.exists()
                    else proc.stdout.decode(errors="replace")
                )
                if proc.returncode != 0 or not (work / "report.pdf").exists():
                    _fail(
                        pdf_path,
                        log_path,
                        f"{Path(engine).name} exited with status {proc.returncode}\n" + _tail(text),
                    )
                    return False
                if "Rerun to get" not in text and "Rerun LaTeX" not in text:
                    break
            write_bytes_atomic(pdf_path, (work / "report.pdf").read_bytes())
    except subprocess.TimeoutExpired:
        _fail(pdf_path, log_path, f"{Path(engine).name} ran past {TEX_TIMEOUT_S:.0f} s\n")
        return False
    except OSError as exc:
        _fail(pdf_path, log_path, f"{Path(engine).name} could not run: {exc}\n")
        return False
    log_path.unlink(missing_ok=True)
    return True


def _fail(pdf_path: Path, log_path: Path, text: str) -> None:
    log.warning("report.pdf not built; see %s", log_path)
    pdf_path.unlink(missing_ok=True)
    try:
        write_bytes_atomic(log_path, text.encode())
    except OSError as exc:
        log.warning("cannot write %s: %s", log_path, exc)


def render_texts(report: Report) -> tuple[str, str]:
    """The Markdown and LaTeX text of a report."""
    numbers = {id(t): i for i, t in enumerate(report.tables(), start=1)}
    md = _md_env(numbers).get_template("report.md.j2").render(r=report)
    tex = _tex_env().get_template("report.tex.j2").render(r=report)
    return md, tex


def render_report(results_dir: Path) -> list[Path]:
    """Write report.md, report.tex and, where a TeX engine exists, report.pdf into
    ``results_dir``; return the paths written."""
    root = Path(results_dir)
    if not root.is_dir():
        raise InputError(f"{root}: no such results directory")
    inp = load_inputs(root)
    report = build_from(inp)
    try:  # every comparison the report made, with its audit, as data
        write_comparisons(root, inp, compared(inp))
    except (StorageError, OSError) as exc:
        log.warning("%s not written: %s", COMPARISONS_FILE, exc)
    return _write(root, "report", report)


def render_comparison(results_dirs: list[Path]) -> list[Path]:
    """Several campaigns side by side: ``comparison.md``, ``.tex`` (and ``.pdf``) written into
    the first directory; each directory is read, none is changed."""
    roots = [Path(d) for d in results_dirs]
    for root in roots:
        if not root.is_dir():
            raise InputError(f"{root}: no such results directory")
    from specbench_tui.report.compare import build_comparison

    return _write(roots[0], "comparison", build_comparison(roots))


def _write(root: Path, stem: str, report: Report) -> list[Path]:
    md, tex = render_texts(report)
    md_path, tex_path = root / f"{stem}.md", root / f"{stem}.tex"
    try:
        write_bytes_atomic(md_path, md.encode())
        write_bytes_atomic(tex_path, tex.encode())
    except StorageError as exc:
        raise InputError(f"{exc}; render it elsewhere: copy the directory, then --report") from None
    written = [md_path, tex_path]
    try:
        write_tables(root, report.tables(), report.charts(), stem)
    except (StorageError, OSError) as exc:  # the tables cost their CSVs, not the report
        log.warning("tables/ not written: %s", exc)
    pdf_path = root / f"{stem}.pdf"
    if compile_pdf(tex_path, pdf_path, root / f"{stem}.tex.log"):
        written.append(pdf_path)
    return written

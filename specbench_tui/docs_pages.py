"""The parts of the documentation that the code defines, generated from it so they cannot drift:
every figure's definition and every mark of the report, its sections in reading order, the
engines at a glance, the results directory's files and columns, the exit statuses and the error
classes.

A page of ``docs/`` holds a generated part between two markers (``<!-- generated: NAME ...``
and ``<!-- end of generated: NAME -->``); the prose around it is written by hand.
``python -m specbench_tui.docs_pages [DIR]`` rewrites every such part of the pages under DIR
(default ``docs``), and a test fails when a committed page differs from what this module
generates. A new part is a function here and one line in :data:`BLOCKS`.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import sys
import types
from collections.abc import Callable, Iterable
from pathlib import Path

import specbench_tui
from specbench_tui import errors
from specbench_tui.bench import figures, metrics
from specbench_tui.engines import registry
from specbench_tui.engines.adapter import EngineAdapter
from specbench_tui.plan.reference import _comments
from specbench_tui.report import build, frames
from specbench_tui.report.sections import common
from specbench_tui.results import gpu_readings, layout, records, schema

BEGIN = (
    "<!-- generated: {name}; python -m specbench_tui.docs_pages writes it, do not edit by hand -->"
)
END = "<!-- end of generated: {name} -->"
_BLOCK = re.compile(r"<!-- generated: ([a-z-]+);[^\n]*-->\n.*?<!-- end of generated: \1 -->", re.S)


def markdown(text: str) -> str:
    """A docstring as Markdown: reStructuredText's ``code`` and :role:`name` as `code`."""
    text = inspect.cleandoc(text)
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def _table(head: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    head = list(head)
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def _code(names: Iterable[str]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def _lit(text: str) -> str:
    """A name as code; words as words."""
    return text if " " in text else f"`{text}`"


# --- the report ---------------------------------------------------------------------------------


def figures_block() -> str:
    """Every figure of a request and a cell, as ``bench/figures.py`` defines them."""
    stall = {
        "STALL_FACTOR": figures.STALL_FACTOR,
        "STALL_MIN_REQUESTS": figures.STALL_MIN_REQUESTS,
        "STALL_GAP_S": figures.STALL_GAP_S,
    }
    lines = [markdown(figures.__doc__ or ""), ""]
    lines += [
        "The stall thresholds: "
        + ", ".join(f"`{k}` = {v:g}" for k, v in stall.items())
        + f"; a stalled request is flagged `{figures.STALL_FLAG}`.",
        "",
        f"**Decode tok/s in every table of the report**: {common.DECODE_DEFINITION}",
        "",
        "**Units and intervals**: " + markdown(_last_paragraph(frames.__doc__ or "")),
    ]
    return "\n".join(lines)


def _last_paragraph(doc: str) -> str:
    return inspect.cleandoc(doc).split("\n\n")[-1]


def marks_block() -> str:
    """The marks a config's row may carry, named, then explained in the report's own words
    (``common.MARKS_EXPLAINED``, the one text every table carries): no second description."""
    names = [
        common.BEST_NOTE,
        common.TIE_NOTE,
        common.BASE_NOTE,
        frames.FAILED_MARK,
        frames.UNCHECKED_MARK,
        frames.UNTIMED_MARK,
        frames.IMPLAUSIBLE_MARK,
        frames.NOT_COMPARABLE_MARK,
    ]
    return "\n".join(
        [f"The marks: {', '.join(f'`{m}`' for m in names)}.", "", common.MARKS_EXPLAINED]
    )


def _section_order() -> list[str]:
    """The section modules in the order the report prints them (the first page first)."""
    src = inspect.getsource(build.build_from)
    first = re.findall(r"first = (\w+)\.build\(", src)
    return first + [m for m in re.findall(r"(\w+)\.build\(inp", src) if m not in first]


def _title(module: types.ModuleType) -> str:
    title = getattr(module, "TITLE", None)
    if isinstance(title, str):
        return title
    found = re.search(r'Section\(\s*"([^"]+)"', inspect.getsource(module))
    return found[1] if found else module.__name__.rsplit(".", 1)[-1]


def _sections_imported(module: types.ModuleType) -> list[str]:
    """Other section modules a section builds a part of its own from."""
    tree = ast.parse(inspect.getsource(module))
    return [
        a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "specbench_tui.report.sections"
        for a in node.names
        if a.name not in ("common", "columns")
    ]


def report_sections_block() -> str:
    """The report's sections in reading order, each as its module says what it holds."""
    lines: list[str] = []
    for n, name in enumerate(_section_order(), 1):
        module = importlib.import_module(f"specbench_tui.report.sections.{name}")
        lines += [f"### {n}. {_title(module)}", "", markdown(module.__doc__ or ""), ""]
        for part in _sections_imported(module):
            sub = importlib.import_module(f"specbench_tui.report.sections.{part}")
            lines += [f"Within it: {markdown(sub.__doc__ or '')}", ""]
        lines.append(f"*Source: `specbench_tui/report/sections/{name}.py`.*")
        lines.append("")
    return "\n".join(lines).rstrip()


# --- the engines --------------------------------------------------------------------------------


def engines_block() -> str:
    """Each engine's launch, wire and acceptance facts, as its adapter states them."""
    adapters = registry.adapters()

    def row(label: str, value: Callable[[EngineAdapter], str]) -> list[str]:
        return [label, *(value(a) for a in adapters)]

    def opt(text: str | None) -> str:
        return text if text else "none"

    rows = [
        row("plan name (`engine =`)", lambda a: f"`{a.name}`"),
        row("default launch", lambda a: "`" + " ".join(a.default_launch) + "`"),
        row("client APIs (`api =`), default first", lambda a: _code(a.apis)),
        row("ready line in the log", lambda a: f"`{a.ready_line}`"),
        row("health checked at", lambda a: _code(a.health_paths(a.default_api))),
        row(
            "cold prefix cache",
            lambda a: "flushed before each request" if a.cold_cache == "flush" else "a cache salt",
        ),
        row("counters at", lambda a: f"`{a.metrics_path}`"),
        row("verify steps counted by", lambda a: _lit(a.verify_counter)),
        row("accept length", lambda a: a.accept_length_definition),
        row("tokens per chunk from", lambda a: a.chunk_tokens_source),
        row(
            "statistics lines read",
            lambda a: f"{a.stats_lines_name}, {a.stats_interval}" if a.stats_lines_name else "none",
        ),
        row("speculation flags read", lambda a: _code(a.speculation_flags) or "none"),
        row("forced acceptance through", lambda a: opt(a.forced_accept_knob)),
        row(
            "bit-exact across batch sizes with",
            lambda a: _lit(a.deterministic_mode) if a.deterministic_mode else "none",
        ),
        row("version asked at", lambda a: f"`{a.version_path}`"),
        row("packages recorded in the manifest", lambda a: _code(a.packages)),
    ]
    return "\n".join(_table(["", *(a.label for a in adapters)], rows))


# --- the results --------------------------------------------------------------------------------


#: What a path of the layout holds where its property says nothing.
_LAYOUT_WORDS = {
    "plan": "the plan as run",
    "events": "the event log: append-only, in order, fsynced; every view is rebuilt from it",
    "requests": "one row per request (the columns below), rebuilt from `parts/`",
    "cells": "one row per cell: its figures (the column groups below), rewritten after every cell",
    "telemetry": "the GPU samples (the columns below), rebuilt from `telemetry/`",
    "logs": "the server log of each service group, `logs/<group>.log`",
    "control_socket": "how the console and `--attach DIR --send` steer the running campaign",
    "lock": "held by the process that runs the campaign",
}


def layout_block() -> str:
    """The files and folders of a campaign's results directory (``results/layout.py``)."""
    root = Path("ROOT")
    where = layout.ResultsLayout(root)
    rows = []
    for name, member in inspect.getmembers(layout.ResultsLayout):
        if not isinstance(member, property) or member.fget is None:
            continue
        path = getattr(where, name)
        if not isinstance(path, Path) or path == root:
            continue
        shown = path.relative_to(root).as_posix() + ("/" if "." not in path.name else "")
        said = markdown(member.fget.__doc__) if member.fget.__doc__ else _LAYOUT_WORDS.get(name, "")
        rows.append((f"`{shown}`", said))
    rows += [
        (
            "`parts/<cell>.a<attempt>.parquet`",
            "the request rows of one attempt of a cell, written whole when it ends",
        ),
        (
            "`parts/<cell>.a<attempt>.texts.json`",
            markdown(layout.ResultsLayout.texts_path.__doc__ or ""),
        ),
    ]
    return "\n".join(_table(["path", "what it holds"], sorted(rows)))


_TYPE_WORDS = {"String": "string", "Float64": "float", "Int64": "integer", "Boolean": "boolean"}


def _type(dtype: object) -> str:
    """A parquet column's type in words: ``List(Float64)`` is a list of float."""
    text = str(dtype)
    for name, word in _TYPE_WORDS.items():
        text = text.replace(name, word)
    return re.sub(r"List\((.*)\)", r"list of \1", text)


def _typed(dtypes: dict[str, object], meaning: Callable[[str], str]) -> list[str]:
    return _table(
        ["column", "type", "meaning"],
        ([f"`{c}`", _type(t), meaning(c)] for c, t in dtypes.items()),
    )


def request_columns_block() -> str:
    """The columns of ``requests.parquet`` (``results/records.py``), in the contract's order."""
    notes = {**_comments(records.RequestIdentity), **_comments(records.Measurement)}
    lines = [
        markdown(records.RequestIdentity.__doc__ or ""),
        "",
        markdown(records.Measurement.__doc__ or ""),
        "",
    ]
    lines += _typed(schema.REQUEST_SCHEMA, lambda c: markdown(notes.get(c, "")))
    return "\n".join(lines)


def telemetry_columns_block() -> str:
    """The columns of ``telemetry.parquet`` (``results/gpu_readings.py``)."""
    docs = {f.name: f"{f.metadata['doc']} ({f.metadata['unit']})" for f in gpu_readings.READINGS}
    identity = {"time": "sample time (Unix seconds, the host's clock)", "host": "plan host"}
    identity |= {"gpu": "GPU id on the host", "name": "the GPU's model name"}
    return "\n".join(_typed(schema.TELEMETRY_SCHEMA, lambda c: docs.get(c) or identity.get(c, "")))


def _module_comments(module: types.ModuleType) -> dict[str, str]:
    """Module-level name -> the ``#:`` comment lines right above its assignment."""
    out: dict[str, str] = {}
    above: list[str] = []
    for line in inspect.getsource(module).splitlines():
        if line.startswith("#:"):
            above.append(line[2:].strip())
            continue
        found = re.match(r"([A-Z_]+)\s*[:=]", line)
        if found and above:
            out[found[1]] = " ".join(above)
        above = []
    return out


def cell_columns_block() -> str:
    """The column groups of ``cells.parquet``: identity, the summary of the cell's requests
    (``bench/metrics.py``), then energy, GPU conditions, SLO, capacity and warm-up
    (``results/records.py``)."""
    said = _module_comments(records)
    stats = "{" + ",".join(metrics.STATS) + "}"
    summary = [c for c in metrics.SUMMARY_COLUMNS if not c.endswith(metrics.STATS)]
    summary += [f"{m}_{stats}" for m in metrics.STAT_METRICS]
    groups = [
        ("identity", schema.CELL_IDENTITY, "which cell: its id, name, group and slice"),
        ("the cell's requests", tuple(summary), markdown(metrics.__doc__ or "").split("\n\n")[-1]),
    ]
    names = ("ENERGY_COLUMNS", "GPU_CONDITION_COLUMNS", "SLO_COLUMNS", "CAPACITY_COLUMNS")
    for name in (*names, "WARMUP_COLUMNS"):
        label = name.removesuffix("_COLUMNS").replace("_", " ").lower()
        groups.append((label, getattr(records, name), markdown(said.get(name, ""))))
    return "\n".join(_table(["group", "columns", "what"], ([g, _code(c), w] for g, c, w in groups)))


# --- when something goes wrong ------------------------------------------------------------------


def exit_statuses_block() -> str:
    """The exit statuses of the command line, as ``errors.py`` defines them."""
    found = re.findall(r"^(EXIT_\w+) = (\d+)  # (.*)$", inspect.getsource(errors), re.M)
    return "\n".join(_table(["status", "name", "means"], ([s, f"`{n}`", m] for n, s, m in found)))


def _product_modules() -> Iterable[str]:
    """Every module of the tool but the console and the simulator (which raise none of the
    worded errors), the programs' entry points and this one."""
    for info in pkgutil.walk_packages(specbench_tui.__path__, "specbench_tui."):
        parts = info.name.split(".")
        if parts[1] not in ("tui", "sim", "docs_pages") and parts[-1] != "__main__":
            yield info.name


def error_classes_block() -> str:
    """Every worded error of the tool, as a tree under ``errors.SpecbenchError``: where it is
    defined, the exit status it ends a run with when nothing handles it, and what it means."""
    for name in _product_modules():
        importlib.import_module(name)
    lines: list[str] = []

    def walk(cls: type[errors.SpecbenchError], depth: int) -> None:
        for sub in sorted(cls.__subclasses__(), key=lambda c: (c.__module__, c.__name__)):
            if sub.__bases__[0] is not cls:  # listed under its first base only
                continue
            doc = markdown(sub.__doc__ or "").split("\n\n")[0]
            where = sub.__module__.removeprefix("specbench_tui.").replace(".", "/") + ".py"
            lines.append(
                f"{'    ' * depth}- **`{sub.__name__}`** (`{where}`, exit {sub.exit_code}): "
                + " ".join(doc.split())
            )
            walk(sub, depth + 1)

    walk(errors.SpecbenchError, 0)
    return "\n".join(lines)


#: Every generated part by name: the marker a page holds names one of these.
BLOCKS: dict[str, Callable[[], str]] = {
    "figures": figures_block,
    "marks": marks_block,
    "report-sections": report_sections_block,
    "engines": engines_block,
    "results-layout": layout_block,
    "request-columns": request_columns_block,
    "cell-columns": cell_columns_block,
    "telemetry-columns": telemetry_columns_block,
    "exit-statuses": exit_statuses_block,
    "error-classes": error_classes_block,
}


def block(name: str) -> str:
    """A generated part with its markers, as a page holds it."""
    return "\n".join(
        [BEGIN.format(name=name), "", BLOCKS[name]().rstrip(), "", END.format(name=name)]
    )


def blocks_in(text: str) -> list[str]:
    """The names of the generated parts a page holds, in order."""
    return [m[1] for m in _BLOCK.finditer(text)]


def render(text: str) -> str:
    """A page with every generated part it holds written anew."""
    return _BLOCK.sub(lambda m: block(m[1]), text)


def rewrite(directory: Path) -> list[Path]:
    """Write every generated part of the pages under ``directory`` anew; the pages changed."""
    changed = []
    for page in sorted(directory.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        new = render(text)
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(page)
    return changed


if __name__ == "__main__":
    for path in rewrite(Path(sys.argv[1] if len(sys.argv) > 1 else "docs")):
        print(f"{path}: rewritten")

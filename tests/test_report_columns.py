"""A table's columns are data (report/sections/columns.py): a header that names a figure is
generated from the figure's one name (bench/figures.py ``FIGURE_NAMES``), never typed in a
section, and each table's columns are what a test can read and check."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specbench_tui.bench.figures import DEFINITIONS, FIGURE_NAMES, figure_title
from specbench_tui.report.build import build_report
from specbench_tui.report.sections import columns as C
from tests.support.results_builder import ResultsBuilder

REPORT = Path(__file__).resolve().parents[1] / "specbench_tui" / "report"
#: Names a figure went by before its one name, and short forms a header could slip back to.
ALIASES = ("accept len", "e2e", "cell tok/s", "tau", "speed-up", "itl", "acc. rate", "req. mean")
WORDS = tuple(sorted({*(n.lower() for n in FIGURE_NAMES.values()), *ALIASES}))
#: The calls whose string arguments are a column header or a chart's axis: by position, and
#: by keyword.
HEADER_CALLS = {"Column": (0,), "Col": (1,), "field": (1,), "Chart": (2, 3)}
HEADER_KEYWORDS = {"xlabel", "ylabel", "ylabel_right"}


def _literal_parts(node: ast.AST) -> list[str]:
    """The typed text of a header expression: a string, or an f-string's constant parts."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [v.value for v in node.values if isinstance(v, ast.Constant)]
    return []


def _typed_headers() -> list[tuple[str, int, str]]:
    out = []
    for path in sorted(REPORT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if (name or "") not in HEADER_CALLS:
                continue
            args = [a for i, a in enumerate(node.args) if i in HEADER_CALLS[name or ""]]
            args += [k.value for k in node.keywords if k.arg in HEADER_KEYWORDS]
            for arg in args:
                for part in _literal_parts(arg):
                    out.append((path.relative_to(REPORT).as_posix(), node.lineno, part))
    return out


def test_no_section_types_a_figure_into_a_header() -> None:
    headers = _typed_headers()
    assert len(headers) > 50  # the walk found the report's headers
    named = [
        (where, line, text)
        for where, line, text in headers
        if any(_says(text.lower(), w) for w in WORDS)
    ]
    assert named == [], (
        "headers that name a figure by hand (figure_title, figure_axis):\n"
        + "\n".join(f"{w}:{n}: {t!r}" for w, n, t in named)
    )


def _says(text: str, word: str) -> bool:
    """``word`` as a word of ``text`` (``itl`` not in ``title``)."""
    i = text.find(word)
    while i != -1:
        before = text[i - 1] if i else " "
        after = text[i + len(word)] if i + len(word) < len(text) else " "
        if not before.isalnum() and not after.isalnum():
            return True
        i = text.find(word, i + 1)
    return False


@pytest.mark.parametrize("key", sorted(DEFINITIONS))
def test_every_defined_figure_has_a_name(key: str) -> None:
    assert key in FIGURE_NAMES


def test_a_figure_over_another_scope_has_another_name() -> None:
    titles = [c.title for c in vars(C).values() if isinstance(c, C.Col)]
    assert len(titles) == len(set(titles)), titles
    assert C.ACCEPT.title == figure_title("accept_length") == "Accept length"
    assert C.ACCEPT_REQ_MEAN.title == "Accept length (request mean)"
    assert C.DECODE_CI.title == "Decode tok/s [95% CI]"
    assert C.TTFT_P50.title == "TTFT p50 ms"
    assert C.LOAD_SPEEDUP.title != C.SPEEDUP_CI.title.removesuffix(" [95% CI]")


def _campaign(tmp_path: Path) -> Path:
    """ar and ngram, single-stream (2 repeats) and a concurrency sweep (1 and 2 clients)."""
    b = ResultsBuilder(tmp_path / "syn")
    for cfg, e2e in (("ar", 2.0), ("ngram", 1.0)):
        cid = f"{cfg}-single"
        b.cell(cid, cfg, 1, "single", "single")
        rows = [
            {"prompt_id": f"p{i}", "repeat": rep, "e2e_s": e2e + 0.01 * i + 0.03 * rep}
            for rep in range(2)
            for i in range(3)
        ]
        b.finished(cid, rows)
        for level in (1, 2):
            cid = f"{cfg}-c{level}"
            b.cell(cid, cfg, 1, "load", "concurrency", concurrency=level)
            b.finished(cid, [{"prompt_id": f"p{i}", "e2e_s": e2e} for i in range(level)])
    return b.write(plan='[campaign]\nname = "syn"\nbaseline = "ar"\n')


def test_each_table_declares_its_columns(tmp_path: Path) -> None:
    """What each figure table shows is data a test reads: taking a column out of a table
    (the single-stream table's end-to-end tok/s, say) fails here."""
    report = build_report(_campaign(tmp_path))
    tables = {t.caption: t for s in report.sections for t in s.tables()}

    def keys(start: str) -> list[str]:
        (t,) = [t for c, t in tables.items() if c.startswith(start)]
        assert len(t.keys) == len(t.columns) and len(t.rows[0]) == len(t.columns)
        return t.keys

    assert keys("Single-stream decode speed") == [
        "config", "n", "requests", "decode_tok_s_total_ci", "speedup_ci", "accept_length",
        "accept_length_request_mean", "ttft_s_p50", "e2e_tok_s", "marks",
    ]  # fmt: skip
    assert keys("Concurrency, load") == [
        "config", "concurrency", "requests", "errors", "throughput_tok_s_ci", "load_speedup",
        "decode_tok_s_total", "ttft_s_p50", "ttft_s_p99", "tpot_s_p50", "chunk_gap_s_p50",
        "chunk_gap_s_p99",
    ]  # fmt: skip
    assert keys("The fastest config per host") == [
        "tp", "workload", "fastest", "decode_tok_s_total_ci", "speedup_ci", "marks",
    ]  # fmt: skip
    assert keys("The fastest config under load") == [
        "tp", "workload", "concurrency", "fastest", "throughput_tok_s", "load_speedup", "marks",
    ]  # fmt: skip
    assert keys("What to deploy") == [
        "tp", "workload", "concurrency", "deploy", "decode_tok_s_total_ci", "speedup_ci", "marks",
    ]  # fmt: skip
    # A table split to fit the page repeats the columns that name its rows in each part.
    assert [t.key_columns for c, t in tables.items() if c.startswith("What to deploy")] == [4]
    assert [t.key_columns for c, t in tables.items() if c.startswith("Single-stream")] == [1]
    # Every header of a declared table is its column's: one name per figure in every table.
    titles = {c.key: c.title for c in vars(C).values() if isinstance(c, C.Col)}
    declared = [t for t in tables.values() if t.keys]
    assert len(declared) >= 5
    for t in declared:
        for key, col in zip(t.keys, t.columns, strict=True):
            if key in titles:
                assert col.title == titles[key], (t.caption, key)

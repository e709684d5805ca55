"""Tables that fit the PDF's page: the width estimate against what pdflatex measures, and the
split of a wide table into parts that each keep the row's name and its marks."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import need_program

from specbench_tui.report.blocks import Cell, Column, Table
from specbench_tui.report.render import tex_escape
from specbench_tui.report.tex_fit import LINE_PT, fits, layout, table_width, text_width

SAMPLES = (
    ("DFlash (linear, block 16) [failed check]", False, False),
    ("1,603 [446.6\u20132,760]", False, False),
    ("5.75x [0.00x\u201319.68x]", True, False),
    ("DDTree (budget 256) \u00d7 TP 8", True, False),
    ("sim.ddtree-16.tp4/single/code/128", False, True),
    ("Accept len (token-wt.) p99 ms {}_%#&$", False, False),
)


@pytest.mark.system
def test_widths_are_what_pdflatex_measures(tmp_path: Path) -> None:
    pdflatex = need_program("pdflatex")
    lines = [
        r"\documentclass[10pt]{article}",
        r"\IfFileExists{lmodern.sty}{\usepackage[T1]{fontenc}\usepackage{lmodern}}{}",
        r"\newlength\w",
        r"\begin{document}\footnotesize",
    ]
    for i, (s, bold, code) in enumerate(SAMPLES):
        body = tex_escape(s)
        body = rf"\texttt{{{body}}}" if code else rf"\textbf{{{body}}}" if bold else body
        lines.append(rf"\settowidth\w{{{body}}}\typeout{{W{i} \the\w}}")
    lines.append(r"\end{document}")
    (tmp_path / "w.tex").write_text("\n".join(lines))
    subprocess.run(
        [pdflatex, "-interaction=nonstopmode", "w.tex"],
        cwd=tmp_path,
        capture_output=True,
        check=True,
        timeout=120,
    )
    log = (tmp_path / "w.log").read_text()
    for i, (s, bold, code) in enumerate(SAMPLES):
        m = re.search(rf"^W{i} ([\d.]+)pt", log, re.M)
        assert m, log[-2000:]
        tex = float(m.group(1))
        # Kerning is left out of the estimate: within 1.5% (a pt or two on a long label).
        assert text_width(s, bold=bold, code=code) == pytest.approx(tex, rel=0.015), s


def _wide(cols: int, with_marks: bool = True) -> Table:
    columns = [Column("Config", "l")] + [Column(f"Figure {i} [95% CI]") for i in range(cols)]
    if with_marks:
        columns.append(Column("", "l"))
    rows = [
        [Cell("DFlash (linear, block 16) [failed check]")]
        + [Cell("1,603.4 [446.6\u20132,760.1]") for _ in range(cols)]
        + ([Cell("failed check, tied")] if with_marks else [])
    ]
    return Table("wide", columns, rows, notes=["a note"], small=True)


def test_a_table_that_fits_is_set_whole() -> None:
    t = _wide(2)
    assert fits(t) and [p.table for p in layout(t)] == [t]


def test_a_wide_table_splits_into_parts_that_keep_name_and_marks() -> None:
    t = _wide(9)
    assert table_width(t) > LINE_PT
    parts = layout(t)
    assert len(parts) >= 2 and [p.part for p in parts] == list(range(1, len(parts) + 1))
    assert all(p.parts == len(parts) and not p.landscape for p in parts)
    assert all(fits(p.table) for p in parts)
    titles = [c.title for p in parts for c in p.table.columns]
    # Every figure once, the name and the marks in every part, the order kept.
    assert sorted(x for x in titles if x.startswith("Figure")) == sorted(
        c.title for c in t.columns[1:-1]
    )
    for p in parts:
        assert p.table.columns[0].title == "Config" and p.table.columns[-1].title == ""
        assert p.table.rows[0][-1].text == "failed check, tied"
    # The notes under the last part only; parts as even as they can be.
    assert [bool(p.table.notes) for p in parts] == [False] * (len(parts) - 1) + [True]
    counts = [len(p.table.columns) for p in parts]
    assert max(counts) - min(counts) <= 1


def test_a_slightly_wide_table_gets_its_columns_closer_instead() -> None:
    t = _wide(3)
    while fits(t):  # widen the name until the table is just over the line
        t.rows[0][0] = Cell(t.rows[0][0].text + "x")
    (part,) = layout(t)
    assert part.sep < 3.0 and part.parts == 1 and part.table is t


def test_a_table_that_cannot_be_split_goes_on_a_turned_page() -> None:
    t = Table("one", [Column("Config", "l"), Column("Long", "l")], [[Cell("a"), Cell("b" * 140)]])
    (part,) = layout(t)
    assert part.landscape


# --- a report of the seed campaign's shape ---------------------------------------------------

SEED_LABELS = {
    "ar": "Autoregressive",
    "dflash": "DFlash (linear, block 16)",
    **{f"ddtree-{b}": f"DDTree (budget {b})" for b in (8, 16, 32, 64, 128, 256)},
}
SEED_PLAN = '[campaign]\nname = "syn"\nbaseline = "ar"\n\n[checks]\ngreedy_equivalence = true\n'


def _seed_shaped(root: Path) -> Path:
    """8 configs with the seed's labels at TP 1, 4 and 8, single-stream cells of 5 prompt sets
    x 3 lengths, an agentic cell and a concurrency sweep on TP 4 and 8, figures with
    thousands and wide intervals, a config that failed its check at every TP size, and the
    client-lag warning that names a list of cells."""
    from support.results_builder import ResultsBuilder

    b = ResultsBuilder(root, title="DDTree vs DFlash vs autoregressive decoding, Qwen3.6-27B")
    for k, (cfg, lab) in enumerate(SEED_LABELS.items()):
        speed = 40.0 * (1 + k)
        for tp in (1, 4, 8):
            b.group(cfg, tp, label=lab)
            gid = f"sim.{cfg}.tp{tp}"
            b.ready(gid)
            for pset in ("code", "math", "chat", "summarize", "translate"):
                for mt in (256, 1024, 2048):
                    cid = f"{cfg}-{tp}-{pset}-{mt}"
                    b.cell(cid, cfg, tp, "single", "single", prompt_set=pset, max_tokens=mt)
                    rows = [
                        dict(
                            prompt_id=f"{pset}-{i}",
                            repeat=r,
                            prompt_set=pset,
                            max_tokens=mt,
                            output_tokens=mt,
                            ttft_s=0.05 + 0.01 * r,
                            e2e_s=0.05 + (mt - 1) / (speed * tp * (1 + 0.4 * r)),
                            spec_verify_ct=None if cfg == "ar" else mt // (2 + k),
                            accept_length=None if cfg == "ar" else float(2 + k),
                        )
                        for r in range(3)
                        for i in range(2)
                    ]
                    b.finished(cid, rows)
            cid = f"{cfg}-{tp}-agentic"
            b.cell(cid, cfg, tp, "agentic", "agentic", prompts=("code",), max_tokens=256)
            b.finished(
                cid,
                [
                    dict(session=s, turn=t, e2e_s=1.0 + t, ttft_s=0.1 * (t + 1), output_tokens=256)
                    for s in range(2)
                    for t in range(8)
                ],
            )
            if tp > 1:
                for level in (1, 2, 4, 8, 16, 32):
                    cid = f"{cfg}-{tp}-c{level}"
                    b.cell(cid, cfg, tp, "concurrency", "concurrency", concurrency=level)
                    b.finished(
                        cid,
                        [
                            dict(prompt_id=f"chat-{i}", e2e_s=3.0, output_tokens=512)
                            for i in range(4)
                        ],
                        figures={
                            "throughput_tok_s": 1234.5 * level * (1 + k),
                            "itl_s_p50": 0.012,
                            # As the seed rehearsal on two cores flags a score of them.
                            "client_lagged": level >= 16,
                        },
                    )
            b.group_done(gid)
            status = "fail" if cfg == "ddtree-64" else "pass"
            if cfg != "ar":
                b.verdict(
                    cfg, tp, status, f"{cfg}: diverged at token 3" if status == "fail" else "ok"
                )
    return b.write(plan=SEED_PLAN)


def test_a_huge_cell_is_measured_once_and_the_split_search_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 100 KB label once made the layout try every split of the columns, walking every
    character of every cell each time (108 s, and a 5 MB label over 12 minutes, deaf to
    signals). Each cell is measured once now, and a table no split can fit is known at once."""
    from specbench_tui.report import tex_fit

    calls = []
    real = tex_fit.text_width
    monkeypatch.setattr(tex_fit, "text_width", lambda s, **kw: calls.append(s) or real(s, **kw))
    cols = [Column("Config", "l")] + [Column(f"figure {i}") for i in range(16)]
    rows = [[Cell("x" * 100_000)] + [Cell("1,234.5") for _ in range(16)]]
    rows += [[Cell(f"c{r}")] + [Cell("9.99x [1.00x-19.99x]") for _ in range(16)] for r in range(5)]
    parts = layout(Table("huge", cols, rows, small=True))
    assert [p.landscape for p in parts] == [True]
    assert len(calls) <= 17 * (len(rows) + 2), len(calls)  # each cell and heading line once

    # Many columns that each fit but no even split does: the search stops at MAX_SPLITS.
    tried = []
    real_partitions = tex_fit._partitions

    def counted(items: list[int], k: int):  # type: ignore[no-untyped-def]
        for groups in real_partitions(items, k):
            tried.append(k)
            yield groups

    monkeypatch.setattr(tex_fit, "_partitions", counted)
    wide = [Column("Config", "l")] + [Column(f"f{i}") for i in range(24)]
    big = [[Cell("DDTree (budget 256)")] + [Cell("W" * 22) for _ in range(24)]]
    layout(Table("many", wide, big, small=True))
    assert len(tried) == tex_fit.MAX_SPLITS + 1  # it did search, and stopped there


@pytest.mark.system
def test_a_seed_shaped_report_has_no_overfull_box(tmp_path: Path) -> None:
    from support.report_pdf import overfull_boxes

    from specbench_tui.report.build import build_report
    from specbench_tui.report.render import render_texts

    root = _seed_shaped(tmp_path / "syn")
    md, tex = render_texts(build_report(root))
    (root / "report.tex").write_text(tex)
    assert overfull_boxes(root / "report.tex", tmp_path / "tex") == []
    # The lossy config is marked in the per-TP tables and on the speed-up chart's labels.
    assert "DDTree (budget 64) [failed check]" in tex.replace("-{}", "-")
    assert md.count("failed check") >= 9


@pytest.mark.system
def test_without_the_fit_the_same_report_overflows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: every table set whole, as before tables were fitted, overflows the page."""
    from support.report_pdf import overfull_boxes

    from specbench_tui.report import render
    from specbench_tui.report.build import build_report
    from specbench_tui.report.tex_fit import SMALL_SEP, Part

    monkeypatch.setattr(render, "layout", lambda t: [Part(t, SMALL_SEP)])
    root = _seed_shaped(tmp_path / "syn")
    _, tex = render.render_texts(build_report(root))
    (root / "report.tex").write_text(tex)
    assert len(overfull_boxes(root / "report.tex", tmp_path / "tex")) >= 10


@pytest.mark.system
def test_a_long_interpreter_path_breaks_inside_its_column(tmp_path: Path) -> None:
    """A server's interpreter in a deep checkout (a CI clone's hashed folder, pytest's own
    test folders) has path parts longer than the software table's column: each breaks where
    it must, never past the page's edge."""
    import json

    from support.report_pdf import overfull_boxes

    from specbench_tui.report.build import build_report
    from specbench_tui.report.render import render_texts

    root = _seed_shaped(tmp_path / "syn")
    deep = (
        "/tmp/pytest-of-root/pytest-12/popen-gw1/"
        + "test_a_lossy_config_is_flagged_in_every_table0"
    )
    entry = {
        "engine": "sglang",
        "probe": {
            "python": {
                "version": "3.11.7",
                "executable": f"{deep}/specbench-{'0f' * 20}/bin/python3",
            },
            "packages": {"sglang": {"version": "0.5.23"}, "torch": {"version": "2.9.1"}},
            "os": {"name": "Debian GNU/Linux 12 (bookworm)", "kernel": "6.1.0-28-cloud-amd64"},
        },
    }
    (root / "manifest.json").write_text(json.dumps({"groups": {"sim.ar.tp1": entry}}))
    _, tex = render_texts(build_report(root))
    assert "specbench" in tex
    (root / "report.tex").write_text(tex)
    assert overfull_boxes(root / "report.tex", tmp_path / "tex") == []

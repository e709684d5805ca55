"""The report: aggregation from a synthetic results directory, Markdown and LaTeX rendering,
and the PDF build with the real TeX engine.

The results directory is written by hand with polars so that every expected figure is known:
medians of 100 / 184 / 150 tok/s at TP 1 give speed-ups of 1.00x / 1.84x / 1.50x.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import need_program
from support.results_builder import ResultsBuilder

from specbench_tui.errors import InputError
from specbench_tui.report import render
from specbench_tui.report.aggregate import build_report, load_inputs
from specbench_tui.report.render import md_escape, render_report, tex_escape

NASTY_LABEL = r"DFlash_{x} & 50% #1 $~^\ok"

PLAN = f"""\
[campaign]
name = "syn"
title = "Synthetic campaign"
baseline = "ar"

[hosts.sim]
sim = true
gpus = 8

[configs.ar]
label = "Autoregressive"

[configs.dflash]
label = '''{NASTY_LABEL}'''

[configs.eagle]
label = "EAGLE-3"

[matrix]
configs = ["ar", "dflash", "eagle"]
tp = [1, 4]

[workloads.single]
kind = "single"
prompts = ["chat"]
max_tokens = [64]

[workloads.agentic]
kind = "agentic"
turns = 3

[workloads.concurrency]
kind = "concurrency"
levels = [1, 4]
requests = 4

[checks]
greedy_equivalence = true
"""

# Per-request output tok/s of the single-stream cells: medians 100/184/150 at TP 1, 200/400/300
# at TP 4.
SINGLE_TOK_S = {
    ("ar", 1): [100, 110, 90, 100],
    ("dflash", 1): [180, 190, 170, 184, 184],
    ("eagle", 1): [150, 140, 160, 150],
    ("ar", 4): [200, 200, 200, 200],
    ("dflash", 4): [400, 400, 400, 400],
    ("eagle", 4): [300, 300, 300, 300],
}


def write_results(root: Path) -> Path:
    """A small but complete results directory: 3 configs x TP 1 and 4, all three workload
    kinds, a failed and a skipped cell, a rerun cell and one divergent greedy output."""
    b = ResultsBuilder(root, title="Synthetic campaign")
    labels = {"ar": "Autoregressive", "dflash": NASTY_LABEL, "eagle": "EAGLE-3"}
    for cfg, tp in SINGLE_TOK_S:
        b.group(cfg, tp, label=labels[cfg])
    for (cfg, tp), speeds in SINGLE_TOK_S.items():
        cid = f"s-{cfg}-{tp}"
        b.cell(cid, cfg, tp, "single", "single")
        rows = []
        for i, tok_s in enumerate(speeds):
            pid = f"chat-{i:02d}"
            sha = f"sha-{pid}"
            if (cfg, tp, pid) == ("eagle", 4, "chat-02"):
                sha = "sha-something-else"
            rows.append(
                dict(
                    prompt_id=pid,
                    repeat=0,
                    output_tok_s=float(tok_s),
                    output_sha256=sha,
                    accept_length=None if cfg == "ar" else 3.0 + tp / 4,
                )
            )
        if (cfg, tp) == ("dflash", 1):  # the first, broken attempt: slow and wrong
            broken = [
                dict(
                    prompt_id=f"chat-{i:02d}",
                    repeat=0,
                    output_tok_s=10.0,
                    output_sha256="sha-broken",
                    accept_length=1.0,
                )
                for i in range(4)
            ]
            b.failed(cid, "server crashed", rows=broken)
            b.queued(cid, 2)
            b.finished(cid, rows, attempt=2)
        else:
            b.finished(cid, rows)
    for cfg in ("ar", "dflash"):
        cid = f"a-{cfg}"
        b.cell(cid, cfg, 1, "agentic", "agentic", prompts=("code",), max_tokens=256)
        b.finished(
            cid,
            [
                dict(prompt_set="code", prompt_id="code-01", session=0, turn=turn, ttft_s=ttft)
                for turn, ttft in enumerate((0.5, 0.25, 0.125))
            ],
        )
    for level in (1, 4):
        cid = f"c-ar-{level}"
        b.cell(cid, "ar", 1, "concurrency", "concurrency", concurrency=level, prompt_set="chat")
        b.finished(
            cid,
            [
                dict(prompt_id=f"chat-{i:02d}", e2e_s=1.0 + i, ttft_s=0.1 * (i + 1))
                for i in range(4)
            ],
            figures={"throughput_tok_s": 123.4 * level},
        )
    b.cell("c-eagle-4", "eagle", 4, "concurrency", "concurrency", concurrency=4)
    b.failed("c-eagle-4", "CUDA_ERROR: out of memory & 100% #oops")
    b.cell("skip-1", "eagle", 1, "agentic", "agentic")
    b.skipped("skip-1", "skipped by operator")
    b.telemetry(
        {
            "time": [1.0, 2.0, 1.0],
            "host": ["sim", "sim", "sim"],
            "gpu": [0, 0, 1],
            "util_pct": [50.0, 100.0, 0.0],
            "mem_used_mib": [1000.0, 3000.0, 500.0],
            "mem_total_mib": [80000.0] * 3,
            "power_w": [100.0, 300.0, 50.0],
            "temp_c": [40.0, 60.0, 30.0],
        }
    )
    return b.write(plan=PLAN, torn_tail=True)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    return write_results(tmp_path / "results" / "syn")


@pytest.fixture
def no_tex(monkeypatch: pytest.MonkeyPatch) -> None:
    """Most tests check the text, not the PDF: keep them fast on machines that have TeX."""
    monkeypatch.setattr(render, "tex_engine", lambda: None)


def _single_rows(root: Path) -> dict[tuple[str, int], dict[str, Any]]:
    report = build_report(root)
    return {(r["config"], r["tp"]): r for sec in report.single for r in sec["rows"]}


def test_speedups_against_baseline_at_same_tp(results: Path, no_tex: None) -> None:
    rows = _single_rows(results)
    assert rows[("ar", 1)]["speedup"] == pytest.approx(1.0)
    assert rows[("dflash", 1)]["speedup"] == pytest.approx(1.84)
    assert rows[("eagle", 1)]["speedup"] == pytest.approx(1.5)
    assert rows[("dflash", 4)]["speedup"] == pytest.approx(2.0)
    written = render_report(results)
    assert [p.name for p in written] == ["report.md", "report.tex"]
    md = (results / "report.md").read_text()
    assert "| 184.0 | 1.84x |" in md
    assert "| 400.0 | 2.00x |" in md
    assert "| 150.0 | 1.50x |" in md
    assert "SIMULATED RESULTS" in md
    assert md.startswith("# Synthetic campaign")


def test_only_latest_attempt_is_aggregated(results: Path, no_tex: None) -> None:
    row = _single_rows(results)[("dflash", 1)]
    assert row["n"] == 5
    assert row["tok_s"] == pytest.approx(184.0)
    report = build_report(results)
    assert any("earlier attempts" in n for n in report.notes)
    # The broken first attempt's accept length (1.0) must not pull the mean down.
    accept = {r["config"]: r["all"] for r in report.accept["rows"]}
    assert accept["dflash"] == pytest.approx((5 * 3.25 + 4 * 4.0) / 9)
    # The first attempt failed, the rerun finished: not listed as a problem any more.
    assert {p["cell_id"] for p in report.problems} == {"c-eagle-4", "skip-1"}


def test_greedy_divergence_is_listed(results: Path, no_tex: None) -> None:
    report = build_report(results)
    summary = {(s["config"], s["tp"]): s for s in report.greedy["summary"]}
    assert summary[("eagle", 4)]["diverged"] == 1
    assert summary[("dflash", 1)]["diverged"] == 0  # the broken attempt's outputs ignored
    assert [(d["config"], d["tp"], d["prompt_id"]) for d in report.greedy["divergent"]] == [
        ("eagle", 4, "chat-02")
    ]
    render_report(results)
    md = (results / "report.md").read_text()
    assert "Outputs that differ from the baseline" in md
    assert "| EAGLE-3 | 4 | single | chat | chat-02 | 64 | 0 |" in md


def test_other_sections(results: Path, no_tex: None) -> None:
    report = build_report(results)
    agentic = {r["config"]: r["values"] for r in report.agentic[0]["rows"]}
    assert agentic["ar"] == [0.5, 0.25, 0.125]
    conc = {r["concurrency"]: r for r in report.concurrency[0]["rows"]}
    assert conc[4]["throughput"] == pytest.approx(493.6)
    assert conc[1]["e2e_p50"] == pytest.approx(2.5)
    tel = {r["gpu"]: r for r in report.telemetry}
    assert tel[0]["util"] == pytest.approx(75.0)
    assert tel[0]["mem_peak"] == pytest.approx(3000.0)
    assert tel[0]["power"] == pytest.approx(200.0)
    render_report(results)
    md = (results / "report.md").read_text()
    assert "CUDA\\_ERROR: out of memory & 100% #oops" in md
    assert "skipped by operator" in md
    assert "| 1 | 4 | 0 | 123.4 |" in md


def test_results_with_no_rows_render_with_a_message(tmp_path: Path, no_tex: None) -> None:
    root = ResultsBuilder(tmp_path / "syn", simulated=False).write(finished=False, plan=PLAN)
    (root / "requests.parquet").unlink()
    written = render_report(root)
    md = (root / "report.md").read_text()
    tex = (root / "report.tex").read_text()
    assert "requests.parquet is missing" in md
    assert "requests.parquet is missing" in tex
    assert "No single-stream results yet." in md
    assert "No GPU telemetry recorded." in md
    assert "SIMULATED" not in md
    assert "interrupted" in md  # no end in the log and no process behind it
    assert written == [root / "report.md", root / "report.tex"]


def test_a_directory_without_a_campaign_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no campaign here"):
        render_report(tmp_path)
    assert not (tmp_path / "report.md").exists()


def test_labels_come_from_the_log(tmp_path: Path) -> None:
    """Expanded config names and their labels are what the campaign's groups recorded, in
    plan order; the plan file is not read for them."""
    b = ResultsBuilder(tmp_path)
    b.group("ar", 1, label="AR")
    b.group("dflash-8", 1, label="DFlash (block 8)")
    b.group("dflash-16", 1, label="DFlash (block 16)")
    labels = load_inputs(b.write()).labels
    assert labels["dflash-16"] == "DFlash (block 16)"
    assert list(labels) == ["ar", "dflash-8", "dflash-16"]


def test_latex_special_characters_are_escaped(results: Path, no_tex: None) -> None:
    assert tex_escape(NASTY_LABEL) == (
        r"DFlash\_\{x\} \& 50\% \#1 \$\textasciitilde{}\textasciicircum{}\textbackslash{}ok"
    )
    assert tex_escape("ddtree-16 — ×") == r"ddtree-{}16 --- $\times$"
    assert tex_escape("café ✓") == "cafe ?"
    render_report(results)
    tex = (results / "report.tex").read_text()
    assert tex_escape(NASTY_LABEL) in tex
    assert NASTY_LABEL not in tex
    assert r"CUDA\_ERROR: out of memory \& 100\% \#oops" in tex
    assert r"\usepackage{booktabs}" in tex
    assert "SIMULATED RESULTS" in tex


def test_markdown_cells_cannot_break_tables() -> None:
    assert md_escape("a|b *c* d_e\nf") == r"a\|b \*c\* d\_e f"


def test_tex_failure_costs_only_the_pdf(
    results: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "broken-tex"
    broken.write_text("#!/bin/sh\necho '! Undefined control sequence.'\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setattr(render, "tex_engine", lambda: str(broken))
    (results / "report.pdf").write_bytes(b"%PDF stale")
    written = render_report(results)
    assert [p.name for p in written] == ["report.md", "report.tex"]
    assert not (results / "report.pdf").exists()
    log = (results / "report.tex.log").read_text()
    assert "exited with status 1" in log and "Undefined control sequence" in log


def test_pdflatex_builds_the_pdf(
    results: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pdflatex = need_program("pdflatex")
    monkeypatch.setattr(render, "tex_engine", lambda: pdflatex)
    written = render_report(results)
    pdf = results / "report.pdf"
    assert pdf in written, (
        (results / "report.tex.log").read_text()
        if (results / "report.tex.log").exists()
        else "no log"
    )
    assert pdf.read_bytes().startswith(b"%PDF")
    assert not (results / "report.tex.log").exists()
    assert not list(results.glob("*.aux"))  # built elsewhere, nothing left behind
    # The same engine on a campaign with nothing in it: the empty report compiles too.
    empty = ResultsBuilder(tmp_path / "empty").write()
    assert empty / "report.pdf" in render_report(empty)

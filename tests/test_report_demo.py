"""The demo campaign's own report, end to end: the demo plan run headless on the simulated host
(faster, on a free port), then its PDF built by pdflatex and read back with poppler's tools:
its pages, every chart as a numbered figure, every table, every section the plan calls for.
And ``--report`` from the command line, for one campaign and for several side by side."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import IN_CI, PLANS, ROOT, free_port, need_program
from support.report_pdf import check_pdf, overfull_boxes
from support.results_builder import ResultsBuilder

from specbench_tui.cli import main

pytestmark = pytest.mark.system


def test_demo_report_pdf_has_every_section_chart_and_table(tmp_path: Path) -> None:
    need_program("pdflatex")
    plan = (PLANS / "demo.toml").read_text()
    plan = re.sub(r"(?m)^port = \d+", f"port = {free_port()}", plan)
    plan = re.sub(r"(?m)^speed = \d+", "speed = 50", plan)
    path = tmp_path / "demo.toml"
    path.write_text(plan)
    results = str(tmp_path / "res")
    proc = subprocess.run(
        [sys.executable, "-m", "specbench_tui", str(path), "--headless", "--results", results],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    root = tmp_path / "res" / "demo"
    assert (root / "report.pdf").exists(), (root / "report.tex.log").read_text()
    text = check_pdf(root, min_pages=10)
    assert overfull_boxes(root / "report.tex", tmp_path / "tex") == []  # every table fits
    flat = " ".join(text.split())
    for title in (
        "Single-stream decoding",
        "Agentic sessions",
        "Concurrency",
        "Server view beside the client view",
        "GPU telemetry per service group",
        "Environment",
        "Methodology",
    ):
        assert title in flat, title
    for chart in (
        "Speed-up per config and TP",
        "ddtree: accept length against budget",
        "ddtree: speed-up against budget",
        "TTFT per turn",
        "Decode tok/s per turn",
        "Cell throughput, TP 4",
        "Pareto view, TP 1",
    ):
        assert chart in flat, chart
    assert "SIMULATED RESULTS" in flat
    assert "finished: every planned cell ran" in flat


def test_cli_report_one_and_several(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    roots = []
    for name in ("a", "b"):
        b = ResultsBuilder(tmp_path / name)
        b.cell("s1", "ar", 1, "single", "single")
        b.finished("s1", [dict(prompt_id="p", repeat=r) for r in range(3)])
        roots.append(b.write())
    assert main(["--report", str(roots[0])]) == 0
    assert (roots[0] / "report.md").exists()
    assert main(["--report", str(roots[0]), str(roots[1])]) == 0
    out = capsys.readouterr().out
    assert str(roots[0] / "comparison.md") in out
    assert "2 campaigns side by side" in (roots[0] / "comparison.md").read_text()
    assert main(["--report", str(roots[0]), str(tmp_path / "nothing")]) == 2
    assert "no such results directory" in capsys.readouterr().err


def test_report_on_a_read_only_directory_is_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A results directory on a filesystem mounted read-only (a real tmpfs, remounted)."""
    if os.geteuid() != 0:
        if IN_CI:
            pytest.fail("the read-only test needs root (to mount a tmpfs) under CI")
        pytest.skip("needs root to mount a tmpfs")
    mnt = tmp_path / "ro"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], check=True)
    try:
        b = ResultsBuilder(mnt / "syn")
        b.cell("s1", "ar", 1, "single", "single")
        b.finished("s1", [dict(prompt_id="p", repeat=0)])
        root = b.write()
        other = ResultsBuilder(tmp_path / "other").write()
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        assert main(["--report", str(root)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "render it elsewhere" in err
        assert main(["--report", str(root), str(other)]) == 2
        assert "render it elsewhere" in capsys.readouterr().err
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)

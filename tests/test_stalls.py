"""A request far outside its cell is flagged, counted, and its effect said.

A server frozen (SIGSTOP) for 60 s mid-cell gave a done cell with one request at 64 s among
4.2 s ones, and nothing said so. The rule (bench/figures.py, "stalled request"): over 10x the
cell's median e2e, or a gap over 30 s between two chunks of the stream.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench_tui.bench.figures import STALL_FLAG, stall_columns, stall_said
from specbench_tui.bench.metrics import summarize
from specbench_tui.engine.headless import format_event
from specbench_tui.report.build import build_report
from specbench_tui.report.render import render_texts
from specbench_tui.results.events import CellFinished
from specbench_tui.results.records import RequestRecord
from tests.support.results_builder import ResultsBuilder


def _req(e2e: float, gaps: list[float] | None = None) -> RequestRecord:
    return RequestRecord(
        ttft_s=0.2,
        e2e_s=e2e,
        itl_s=gaps or [0.05],
        output_tokens=65,
        decode_s=e2e - 0.2,
        decode_tok_s=64 / (e2e - 0.2),
    )


FROZEN = [_req(4.2) for _ in range(7)] + [_req(64.0, [0.05, 59.8])]


def test_a_request_frozen_mid_stream_is_flagged_with_its_effect() -> None:
    cols = stall_columns(FROZEN)
    assert cols["stalled_requests"] == 1
    assert cols["stalled_worst_e2e_s"] == 64.0 and cols["stalled_longest_gap_s"] == 59.8
    assert cols["decode_tok_s_without_stalled"] == pytest.approx(64 / 4.0)
    s = summarize(FROZEN, wall_s=100.0)
    assert s["stalled_requests"] == 1 and s["e2e_s_p50"] == pytest.approx(4.2)
    said = stall_said(s)
    assert said.startswith(f"{STALL_FLAG} 1 of 8 requests took up to 64.0 s (15x the median 4.2 s")
    assert "a 59.8 s gap in the stream" in said
    assert f"with, {64 / 4.0:.1f} without" in said  # the cell's figure still counts it
    line = format_event(CellFinished(cell_id="c1", cell="g/w/c1", requests=8, figures=s))
    assert line is not None and STALL_FLAG in line


def test_ordinary_spread_and_small_cells_are_not_flagged() -> None:
    spread = [_req(e) for e in (1.0, 2.0, 4.0, 8.0, 9.5)]  # a 9.5x spread: not a stall
    assert stall_columns(spread) == {"stalled_requests": 0}
    assert stall_said(summarize(spread)) == ""
    two = [_req(1.0), _req(30.0)]  # too few requests for a median to judge by
    assert stall_columns(two) == {"stalled_requests": 0}
    gap = [_req(40.0, [0.05, 35.0])]  # one request, but a gap no decode step takes
    assert stall_columns(gap)["stalled_requests"] == 1


def test_the_report_names_the_stalled_cell(tmp_path: Path) -> None:
    b = ResultsBuilder(tmp_path / "syn")
    b.cell("c1", "ar", 1, "single", "single")
    rows = [
        {"prompt_id": f"p{i}", "e2e_s": r.e2e_s, "decode_s": r.decode_s}
        for i, r in enumerate(FROZEN)
    ]
    b.finished("c1", rows, figures=summarize(FROZEN, wall_s=100.0))
    root = b.write(plan='[campaign]\nname = "syn"\n')
    md, _ = render_texts(build_report(root))
    assert "1 cell has requests far outside the rest" in md
    line = next(ln for ln in md.splitlines() if STALL_FLAG in ln)
    assert "sim.ar.tp1/single/c1" in line and "64.0 s" in line


@pytest.mark.system
def test_a_real_server_frozen_mid_cell_is_flagged(write_plan, tmp_path: Path) -> None:
    """The simulated server of a campaign, stopped with SIGSTOP for 20 s while its cell runs
    (0.9 s requests), then let go: the cell is done, and flagged with its effect."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time
    import tomllib

    from tests.conftest import MINIMAL_PLAN, ROOT

    plan = write_plan(
        MINIMAL_PLAN.replace('configs = ["ar", "dflash"]', 'configs = ["ar"]')
        .replace("speed = 50", "speed = 1")
        .replace("samples = 2", "samples = 2\nrepeats = 8")
    )
    root = tmp_path / "res" / "t"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results",
         str(tmp_path / "res")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        events: list[dict] = []
        while not any(e["event"] == "cell_started" for e in events):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
            if (root / "events.jsonl").exists():
                lines = (root / "events.jsonl").read_text().splitlines()
                events = [json.loads(x) for x in lines if x.endswith("}")]
        time.sleep(2.0)  # the warm-up is over, measured requests run
        port = tomllib.loads(plan.read_text())["server"]["port"]
        found = subprocess.run(
            ["pgrep", "-f", f"specbench_tui.sim .*--port {port}( |$)"],
            capture_output=True,
            text=True,
        ).stdout.split()
        assert len(found) == 1, found
        pid = int(found[0])
        os.kill(pid, signal.SIGSTOP)
        time.sleep(20.0)  # over 10x the median even when load slows every request
        os.kill(pid, signal.SIGCONT)
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out
    done = next(ln for ln in out.splitlines() if " done " in ln)
    assert STALL_FLAG in done and "counted: decode" in done, done
    assert f"{STALL_FLAG} 1 of 16 requests" in (root / "report.md").read_text()

"""A signal while the report is written stops it within seconds, and the report can be
written later from what was kept.

The report used to be written in a thread of the campaign's process, and a signal was an
abort command the ended campaign refused: a headless run went on 108 s after SIGTERM on a
100 KB label, and over 12 minutes on a 5 MB one. Here the TeX engine is a stand-in that
never ends (it marks that it started, then sleeps), so the signal lands inside the report
whatever the machine's load.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import MINIMAL_PLAN, ROOT

pytestmark = pytest.mark.system

STUCK_TEX = """#!/bin/sh
# A TeX engine that starts and never ends.
echo $$ >> "{marks}"
exec sleep 600
"""


def _alive(pid: int, within_s: float = 2.0) -> bool:
    """Whether ``pid`` still runs ``within_s`` from now (a zombie waiting for its reaper,
    which a killed orphan is for a moment, does not count)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return False
        if state == "Z":
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_the_report_ends_the_run_within_seconds(
    write_plan, tmp_path: Path, sig: signal.Signals
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marks = tmp_path / "tex-started"
    tex = bin_dir / "pdflatex"
    tex.write_text(STUCK_TEX.format(marks=marks))
    tex.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    plan = write_plan(MINIMAL_PLAN)
    results = tmp_path / "res"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results", str(results)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        deadline = time.monotonic() + 300
        while not marks.exists():
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the report's TeX run never started"
            time.sleep(0.05)
        tex_pid = int(marks.read_text().split()[0])
        sent = time.monotonic()
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert took < 5.0, (took, out)
    assert proc.returncode == 130, out
    assert f"report not written: {sig.name} stopped it" in out, out
    assert not _alive(tex_pid), "the TeX engine outlived the run"
    root = results / "t"
    events = [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]
    ended = [e for e in events if e["event"] == "campaign_finished"]
    assert ended and ended[-1]["finished"] == 2  # both cells measured before the report
    assert not (root / "report.md").exists() or "report.md" not in out
    # What was measured is kept: the report is written later, here without TeX.
    bare = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    again = subprocess.run(
        [sys.executable, "-m", "specbench_tui", "--report", str(root)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=bare,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert "| AR |" in (root / "report.md").read_text()


def test_a_signal_that_stops_the_campaign_leaves_the_report_for_later(
    write_plan, tmp_path: Path
) -> None:
    """A SIGTERM while cells run stops the campaign, and the run writes no report after it
    (its TeX run would hold the exit): the line says how to write it."""
    plan = write_plan(MINIMAL_PLAN.replace("samples = 2", "samples = 2\nrepeats = 40"))
    from tests.conftest import start_headless

    proc = start_headless(plan, tmp_path / "res")
    try:
        time.sleep(1.0)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, out
    assert "report not written: SIGTERM stopped the run" in out, out
    assert f"--report {tmp_path / 'res' / 't'}" in out
    assert took < 15.0, (took, out)  # the servers' stop included

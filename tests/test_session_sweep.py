"""What the suite starts is stopped at the end of its session, even when the session is cut
short: SIGTERM (a CI limit) ends it with its summary and teardown, and what a session killed
outright left is found by its mark and stopped by the next session or ``.ci/run``'s trap."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
from support import sweep

PROBE = "tests/support/session_probe.py"


def _gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not sweep._alive(pid):
            return True
        time.sleep(0.05)
    return False


def _sleeper(mark: str | None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != sweep.MARK}
    if mark is not None:
        env[sweep.MARK] = mark
    return subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)


def test_a_sweep_stops_the_marked_and_spares_the_rest() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone_owner = f"{dead.pid}:{sweep.mark_of(os.getpid()).split(':')[1]}"
    mine, orphan, other, plain = (
        _sleeper("4242:1"),
        _sleeper(gone_owner),
        _sleeper(sweep.mark_of(os.getpid())),  # a live session's
        _sleeper(None),
    )
    try:
        assert sweep.sweep("4242:1", grace_s=2) == [f"{mine.pid} sleep"]
        assert sweep.sweep(dead_owners=True, grace_s=2) == [f"{orphan.pid} sleep"]
        for p in (mine, orphan):
            assert p.wait(5) is not None
        assert other.poll() is None and plain.poll() is None
    finally:
        for p in (mine, orphan, other, plain):
            p.kill()
            p.wait()


def _session(tmp_path: Path, mark: str) -> tuple[subprocess.Popen[str], int]:
    """A pytest session of its own running the probe; returns once the probe's process runs."""
    pid_file = tmp_path / "left.pid"
    env = {**os.environ, sweep.MARK: mark, "SWEEP_PROBE_PID": str(pid_file)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "", PROBE],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not pid_file.exists() or not pid_file.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout
        time.sleep(0.1)
    return proc, int(pid_file.read_text())


@pytest.mark.system
def test_sigterm_ends_a_session_with_its_summary_and_nothing_left(tmp_path: Path) -> None:
    proc, left = _session(tmp_path, "1:1")  # an owner that is not alive: the session's own
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert "KeyboardInterrupt" in out and "signal SIGTERM" in out
    assert "processes left by this session, stopped" in out and f"{left} sleep" in out
    assert _gone(left)


@pytest.mark.system
def test_what_a_killed_session_left_is_stopped_by_its_mark(tmp_path: Path) -> None:
    mark = sweep.mark_of(os.getpid()).split(":")[0] + ":1"  # a mark no live owner has
    proc, left = _session(tmp_path, mark)
    proc.kill()  # no teardown, no summary: what CI's SIGKILL does
    proc.wait()
    assert sweep._alive(left)
    said = subprocess.run(
        [sys.executable, "tests/support/sweep.py", mark], cwd=ROOT, capture_output=True, text=True
    )
    assert said.stdout.strip() == f"stopped what the test session left: {left} sleep"
    assert _gone(left)

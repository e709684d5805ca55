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


def _own() -> str:
    """This session's mark: the marks a test makes lie below it, so that another suite
    running beside this one (its own dead-owner sweep at its start) never takes them."""
    return os.environ.get(sweep.MARK) or sweep.mark_of(os.getpid())


def test_a_sweep_stops_the_marked_and_spares_the_rest() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone_owner = f"{_own()}/{dead.pid}:{sweep.mark_of(os.getpid()).split(':')[1]}"
    mine, orphan, other, plain = (
        _sleeper(f"{_own()}/4242:1"),
        _sleeper(gone_owner),
        _sleeper(sweep.mark_of(os.getpid())),  # a live session's
        _sleeper(None),
    )
    try:
        assert sweep.sweep(f"{_own()}/4242:1", grace_s=2) == [f"{mine.pid} sleep"]
        # A live session's marks are never another's to sweep: their owner (this session)
        # runs. Within this session, the mark whose last owner is gone is found.
        assert orphan.pid not in sweep.left_over(dead_owners=True)
        assert sweep.sweep(dead_owners=True, within=_own(), grace_s=2) == [f"{orphan.pid} sleep"]
        for p in (mine, orphan):
            assert p.wait(5) is not None
        assert other.poll() is None and plain.poll() is None
    finally:
        for p in (mine, orphan, other, plain):
            p.kill()
            p.wait()


def test_a_session_whose_owners_are_all_gone_is_swept_by_anyone() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    start = sweep.mark_of(os.getpid()).split(":")[1]
    # A session and its worker both gone (pids that cannot run with this start time): a
    # killed suite's leftovers, which the next suite's start sweeps.
    gone = f"{dead.pid}:{start}/{dead.pid}:{start}"
    left = _sleeper(gone)
    try:
        assert left.pid in sweep.left_over(dead_owners=True)
        assert sweep.owner_alive(f"{_own()}/{dead.pid}:{start}")  # a live part: not gone
        assert not sweep.owner_alive(f"{_own()}/{dead.pid}:{start}", last_only=True)
    finally:
        left.kill()
        left.wait()


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
    # An owner that is not alive, below this live session (no suite beside sweeps it).
    proc, left = _session(tmp_path, f"{_own()}/1:1")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert "KeyboardInterrupt" in out and "signal SIGTERM" in out
    assert "processes left by this session, stopped" in out and f"{left} sleep" in out
    assert _gone(left)


@pytest.mark.system
def test_what_a_killed_session_left_is_stopped_by_its_mark(tmp_path: Path) -> None:
    mark = f"{_own()}/" + sweep.mark_of(os.getpid()).split(":")[0] + ":1"  # its owner gone
    proc, left = _session(tmp_path, mark)
    proc.kill()  # no teardown, no summary: what CI's SIGKILL does
    proc.wait()
    assert sweep._alive(left)
    said = subprocess.run(
        [sys.executable, "tests/support/sweep.py", mark], cwd=ROOT, capture_output=True, text=True
    )
    assert said.stdout.strip() == f"stopped what the test session left: {left} sleep"
    assert _gone(left)

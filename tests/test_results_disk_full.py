"""A results disk that fills up, on a real (small) tmpfs: before the start it is one line and
exit 2; mid-run the campaign waits with a notice and goes on once space is back, losing
nothing; if space never comes back it ends with exit status 3, nothing torn."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import IN_CI, MINIMAL_PLAN, ROOT

from specbench_tui.errors import EXIT_INPUT, EXIT_OK, EXIT_STORAGE
from specbench_tui.results.files import read_events
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.state import CampaignState

PLAN = MINIMAL_PLAN.replace('prompts = ["chat"]', 'prompts = ["chat", "code", "math"]').replace(
    "speed = 50", "speed = 10"
)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 6 MiB tmpfs, mounted for the test (root only: skipped elsewhere, never under CI)."""
    if os.geteuid() != 0:
        if IN_CI:
            pytest.fail("the disk-full tests need root (to mount a tmpfs) under CI")
        pytest.skip("needs root to mount a tmpfs")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(where: Path) -> Path:
    """Take every free byte of the filesystem with one file."""
    ballast = where / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT, 0o600)
    with contextlib.suppress(OSError):
        while True:
            os.write(fd, b"\0" * 65536)
    os.close(fd)
    return ballast


class _Headless:
    def __init__(self, plan: Path, results: Path) -> None:
        cmd = [sys.executable, "-m", "specbench_tui", str(plan), "--headless"]
        self.proc = subprocess.Popen(
            [*cmd, "--results", str(results)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for(self, text: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"never saw {text!r}:\n{''.join(self.lines)[-3000:]}")
            time.sleep(0.05)

    def finish(self, timeout: float = 180.0) -> int:
        code = self.proc.wait(timeout)
        time.sleep(0.2)
        return code


@pytest.mark.system
def test_a_disk_that_fills_mid_run_holds_the_campaign_until_space_returns(
    write_plan, small_disk: Path
) -> None:
    run = _Headless(write_plan(PLAN), small_disk)
    run.wait_for(" done ")
    ballast = _fill(small_disk)
    run.wait_for("the campaign waits")
    time.sleep(3)
    assert run.proc.poll() is None  # waiting, not dead
    ballast.unlink()
    assert run.finish() == EXIT_OK, "".join(run.lines)[-3000:]
    out = "".join(run.lines)
    assert "results are written again" in out
    layout = ResultsLayout(small_disk / "t")
    state = CampaignState.from_events(read_events(layout.events), layout.rows_exist)
    assert len(state.cells) == 6 and {c.status for c in state.cells.values()} == {"done"}
    text = layout.events.read_text()
    assert text.endswith("\n") and all(line.startswith("{") for line in text.splitlines())


@pytest.mark.system
def test_a_disk_that_stays_full_ends_the_run_with_its_own_status(
    write_plan, small_disk: Path
) -> None:
    plan = write_plan(PLAN.replace('name = "t"', 'name = "t"\nstorage_wait = "4s"'))
    run = _Headless(plan, small_disk)
    run.wait_for(" done ")
    _fill(small_disk)
    assert run.finish() == EXIT_STORAGE, "".join(run.lines)[-3000:]
    assert "giving up" in "".join(run.lines)
    layout = ResultsLayout(small_disk / "t")
    text = layout.events.read_text()
    assert all(line.startswith("{") and line.endswith("}") for line in text.splitlines())


@pytest.mark.system
def test_a_full_disk_before_the_start_is_one_line(write_plan, small_disk: Path) -> None:
    _fill(small_disk)
    cmd = [sys.executable, "-m", "specbench_tui", str(write_plan()), "--headless"]
    proc = subprocess.run(
        [*cmd, "--results", str(small_disk)], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert proc.returncode == EXIT_INPUT
    assert "cannot be written" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1

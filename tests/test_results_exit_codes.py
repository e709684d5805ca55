"""Exit statuses of the CLI contract for what is not the plan's fault: a results directory
that cannot be written is one line and exit 2 (on a real read-only mount), a bug in the tool
is exit 70 with a request to report it and the traceback kept in the results directory."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import IN_CI, MINIMAL_PLAN, ROOT

from specbench_tui.errors import EXIT_INPUT, EXIT_INTERNAL, EXIT_OK

FAST = ("speed = 50", "speed = 200")


def _headless(plan: Path, results: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results"]
    return subprocess.run(
        [*cmd, str(results), *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs, mounted for the test (root only: skipped elsewhere, never under CI)."""
    if os.geteuid() != 0:
        if IN_CI:
            pytest.fail("the read-only tests need root (to mount a tmpfs) under CI")
        pytest.skip("needs root to mount a tmpfs")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _one_clear_line(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    assert proc.returncode == EXIT_INPUT, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("specbench-tui: ")
    for w in words:
        assert w in line, line
    return line


@pytest.mark.system
def test_a_read_only_results_directory_is_one_line_and_exit_2(write_plan, tmpfs: Path) -> None:
    plan = write_plan(MINIMAL_PLAN.replace(*FAST))
    first = _headless(plan, tmpfs)  # a campaign that ran here while it could be written
    assert first.returncode == EXIT_OK, first.stdout[-2000:] + first.stderr[-2000:]
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)

    _one_clear_line(_headless(plan, tmpfs), f"{tmpfs / 't'}:", "Read-only file system")
    _one_clear_line(_headless(plan, tmpfs / "new"), f"{tmpfs / 'new' / 't'}:", "cannot be written")
    _one_clear_line(_headless(plan, tmpfs, "--fresh"), "--fresh cannot move", "Read-only")


BUG = """
import sys
import specbench_tui.engine.cell_runner as cell_runner
from specbench_tui.cli import main

def summarize(*args, **kwargs):
    raise ZeroDivisionError("an injected bug")

cell_runner.summarize = summarize  # what a cell's figures are computed with
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.system
def test_an_internal_bug_is_exit_70_with_its_traceback_kept(write_plan, tmp_path: Path) -> None:
    plan = write_plan(MINIMAL_PLAN.replace(*FAST))
    results = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-c", BUG, str(plan), "--headless", "--results", str(results)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == EXIT_INTERNAL, proc.stdout[-2000:] + proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "internal error (ZeroDivisionError: an injected bug)" in last
    assert "please report it" in last and "running the plan again resumes it" in last
    (kept,) = (results / "t").glob("internal-error-*.txt")
    assert str(kept) in last
    text = kept.read_text()
    assert "ZeroDivisionError: an injected bug" in text and "cell_runner.py" in text
    assert "'--headless'" in text.splitlines()[1]  # the arguments it ran with
    assert "some cells failed" not in proc.stderr
    assert not (results / "t" / "control.sock").exists()  # no socket left that none answers


def test_an_internal_bug_before_any_campaign_keeps_its_traceback_in_the_temp_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from specbench_tui import cli

    def broken(args: object) -> int:
        raise KeyError("no such thing")

    monkeypatch.setattr(cli, "_dispatch", broken)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR is read again
    assert cli.main(["--report", str(tmp_path)]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    (kept,) = tmp_path.glob("internal-error-*.txt")
    assert f"the traceback is in {kept}" in err and "KeyError: 'no such thing'" in err
    assert "--report" in kept.read_text()

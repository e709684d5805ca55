"""What stands at the name of one of the tool's own files in a results directory is never
followed or waited on: a symbolic link at ``.lock`` had its target overwritten with the pid,
and a FIFO at ``events.jsonl`` hung ``--report`` and a resume. Each is one line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from specbench_tui.cli import main
from tests.conftest import ROOT


def _campaign_dir(tmp_path: Path) -> Path:
    root = tmp_path / "res" / "t"
    root.mkdir(parents=True)
    return root


def _one_line(capsys: pytest.CaptureFixture[str], code: int) -> str:
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_a_link_at_the_lock_is_refused_and_its_target_left_alone(
    capsys: pytest.CaptureFixture[str], write_plan: Callable[..., Path], tmp_path: Path
) -> None:
    root = _campaign_dir(tmp_path)
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    (root / ".lock").symlink_to(target)
    code = main([str(write_plan()), "--headless", "--results", str(tmp_path / "res")])
    err = _one_line(capsys, code)
    assert ".lock is a symbolic link, not a file" in err and "move it away" in err
    assert target.read_text() == "keep me\n"
    assert not (root / "events.jsonl").exists()  # nothing ran


def test_a_fifo_at_the_event_log_is_refused_by_a_run(
    capsys: pytest.CaptureFixture[str], write_plan: Callable[..., Path], tmp_path: Path
) -> None:
    root = _campaign_dir(tmp_path)
    os.mkfifo(root / "events.jsonl")
    code = main([str(write_plan()), "--headless", "--results", str(tmp_path / "res")])
    err = _one_line(capsys, code)
    assert "events.jsonl is a FIFO, not a file" in err


@pytest.mark.system
def test_a_fifo_at_the_event_log_is_refused_by_report_without_waiting(tmp_path: Path) -> None:
    root = _campaign_dir(tmp_path)
    os.mkfifo(root / "events.jsonl")
    proc = subprocess.run(
        [sys.executable, "-m", "specbench_tui", "--report", str(root)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,  # it blocked forever before
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"specbench-tui: {root / 'events.jsonl'} is a FIFO, not a file: the tool keeps only "
        "plain files under this name and will not read or write through it; move it away and "
        "run again"
    ]

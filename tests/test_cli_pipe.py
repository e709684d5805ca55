"""A closed pipe on stdout (``specbench-tui ... | head``) ends the tool as it ends any Unix
tool: quietly, with status 0 or 141, no traceback and no internal-error file; a headless
campaign whose reader left is aborted cleanly (servers stopped, what it measured kept)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MINIMAL_PLAN, PLANS, ROOT, free_port

from specbench_tui.errors import EXIT_PIPE
from specbench_tui.hosts.local_leftovers import marked_processes, results_owner
from specbench_tui.stdout import is_closed_pipe, reader_gone

SEED = PLANS / "ddtree-qwen36-ct200.toml"


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "TMPDIR": str(tmp)}  # where an internal-error file would go


def _reader_gone_at_once(argv: list[str], cwd: Path, tmp: Path) -> subprocess.CompletedProcess:
    """The tool with a stdout whose reader closed before the first line: every write fails."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "specbench_tui", *argv],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=_env(tmp),
            timeout=300,
        )
    finally:
        os.close(write)
    return proc


def _internal_error_files(*dirs: Path) -> list[Path]:
    return [p for d in dirs for p in d.rglob("internal-error-*.txt")]


def test_a_pipe_whose_reader_left_is_told_from_a_broken_socket() -> None:
    read, write = os.pipe()
    with os.fdopen(write, "w") as stream:
        assert not reader_gone(stream)
        os.close(read)
        assert reader_gone(stream)
    assert not is_closed_pipe(BrokenPipeError())  # this process's stdout is fine: a socket's


@pytest.mark.system
def test_dry_run_into_head_ends_quietly(tmp_path: Path) -> None:
    for args in (["--dry-run"], ["--dry-run", "--json"]):
        proc = _reader_gone_at_once([str(SEED), *args], tmp_path, tmp_path)
        assert proc.returncode == EXIT_PIPE, proc.stderr
        assert proc.stderr == ""
    proc = _reader_gone_at_once(["--help"], tmp_path, tmp_path)  # argparse drops the error
    assert proc.returncode in (0, EXIT_PIPE) and proc.stderr == ""
    # As a shell runs it: one line read, then the pipe closed (0 when the rest fit the pipe).
    for args in (["--dry-run"], ["--dry-run", "--json"]):
        cmd = [sys.executable, "-m", "specbench_tui", str(SEED), *args]
        head = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env=_env(tmp_path)
        )
        assert head.stdout is not None and head.stdout.readline()
        head.stdout.close()
        assert head.wait(60) in (0, EXIT_PIPE)
        assert head.stderr is not None and head.stderr.read() == b""
    assert _internal_error_files(tmp_path) == []
    assert not (tmp_path / "results").exists()


@pytest.mark.system
def test_headless_into_head_aborts_cleanly_and_resumes(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(MINIMAL_PLAN.replace("{port}", str(free_port())))
    results = tmp_path / "results"
    argv = [str(plan), "--headless", "--results", str(results)]
    proc = _reader_gone_at_once(argv, ROOT, tmp_path)
    assert proc.returncode == EXIT_PIPE, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert _internal_error_files(tmp_path) == []
    events = [json.loads(x) for x in (results / "t" / "events.jsonl").read_text().splitlines()]
    assert [e["by"] for e in events if e["event"] == "aborted"] == ["SIGPIPE"]
    assert events[-1]["event"] in ("campaign_finished", "notice")  # it ended, not died
    assert marked_processes(results_owner(results / "t")) == []  # no server left
    # The next run, with a reader, finishes what the first one left.
    again = subprocess.run(
        [sys.executable, "-m", "specbench_tui", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "0 failed, 0 skipped" in again.stdout

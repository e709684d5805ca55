"""Servers a crashed run left on this machine: found by their record in the results (their
session) and the mark in their environment, stopped by the next run of the same results or
``--cleanup`` with a notice naming each process; anyone else's, and a live run's, left alone."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.host_events import Recorded

from specbench_tui.hosts.cleanup import cleanup_results
from specbench_tui.hosts.host import SimHost
from specbench_tui.hosts.local_leftovers import (
    SERVER_MARK_ENV,
    find_local_leftovers,
    marked_processes,
    records_dir,
    results_owner,
)
from specbench_tui.hosts.server_records import new_record, proc_stat, write_record
from tests.conftest import ROOT

pytestmark = pytest.mark.system


def _marked(owner: str, host: str, group: str, tool_pid: int) -> subprocess.Popen[bytes]:
    mark = json.dumps([owner, host, group, tool_pid])
    return subprocess.Popen(
        ["sleep", "600"], env={**os.environ, SERVER_MARK_ENV: mark}, start_new_session=True
    )


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


async def test_a_resume_stops_what_a_dead_run_left_and_nothing_else(tmp_path: Path) -> None:
    owner = results_owner(tmp_path / "res")
    dead = _dead_pid()
    left = _marked(owner, "sim", "sim.ar.tp1", dead)
    other_host = _marked(owner, "sim2", "sim2.ar.tp1", dead)
    other_results = _marked(results_owner(tmp_path / "elsewhere"), "sim", "sim.ar.tp1", dead)
    ours = _marked(owner, "sim", "sim.dflash.tp1", os.getpid())  # this process's own server
    notices: list[tuple[str, str]] = []
    host = SimHost("sim", 1, owner=owner, events=Recorded(notices))
    try:
        (found,) = find_local_leftovers(owner, "sim")
        assert found.group == "sim.ar.tp1" and found.pids == (left.pid,)
        await host.settle_leftovers({"sim.ar.tp1"})
        assert left.wait(timeout=5) is not None
        for p in (other_host, other_results, ours):
            assert p.poll() is None
        ((level, text),) = notices
        assert level == "info"
        assert text.startswith("sim: stopped sim.ar.tp1's server left running by an earlier run")
        assert find_local_leftovers(owner, "sim") == []
        assert find_local_leftovers("", "sim") == []  # a host with no owner finds nothing
    finally:
        await host.close()
        for p in (left, other_host, other_results, ours):
            p.kill()
            p.wait()


# A server's leader that starts one worker the way vLLM starts its engine core: the worker
# renames itself (which wipes what /proc/<pid>/environ shows; here it simply has none) and
# lives on once the leader is gone.
_LEADER = """
import subprocess, sys
worker = subprocess.Popen([sys.executable, "-c", sys.argv[1]], env={})
print(worker.pid, flush=True)
sys.stdin.read()
"""
_WORKER = """
import ctypes, time
ctypes.CDLL(None).prctl(15, b"VLLM::EngineCore", 0, 0, 0)
time.sleep(600)
"""


def _comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def _gone(pid: int) -> bool:
    st = proc_stat(pid)
    return st is None or st.state in ("Z", "X")


def test_a_renamed_worker_without_the_mark_is_found_by_its_session(tmp_path: Path) -> None:
    root = tmp_path / "res" / "camp"
    root.mkdir(parents=True)
    owner = results_owner(root)
    mark = json.dumps([owner, "cpu", "cpu.ar.tp1", _dead_pid()])
    leader = subprocess.Popen(
        [sys.executable, "-c", _LEADER, _WORKER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, SERVER_MARK_ENV: mark},
        start_new_session=True,
    )
    assert leader.stdout is not None and leader.stdin is not None
    worker = int(leader.stdout.readline())
    # On record as a dead run's server would be: started by a tool process that is gone.
    rec = dataclasses.replace(
        new_record("cpu", "cpu.ar.tp1", leader.pid), tool_pid=_dead_pid(), tool_ticks=0
    )
    path = write_record(records_dir(owner), rec)
    leader.stdin.close()
    leader.wait(timeout=10)
    try:
        deadline = time.monotonic() + 10
        while _comm(worker) != "VLLM::EngineCor" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _comm(worker) == "VLLM::EngineCor"
        assert Path(f"/proc/{worker}/environ").read_bytes() == b""  # no mark to read
        assert marked_processes(owner, "cpu") == []  # the environment alone finds nothing
        (found,) = find_local_leftovers(owner, "cpu")
        assert found.pids == (worker,) and found.records == (path,)
        assert find_local_leftovers(owner, "other") == []
        # --cleanup stops it and says what, by name and pid; the record goes with it.
        proc = subprocess.run(
            [sys.executable, "-m", "specbench_tui", "--cleanup", str(root)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert proc.returncode == 0, proc.stderr
        assert (
            f"stopped cpu.ar.tp1's server left running by an earlier run (process group "
            f"{leader.pid}, 1 process: VLLM::EngineCor (pid {worker}))"
        ) in proc.stderr
        assert f"{root}: 1 process stopped" in proc.stderr
        assert _gone(worker) and not path.exists()
        again = subprocess.run(
            [sys.executable, "-m", "specbench_tui", "--cleanup", str(root)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert again.returncode == 0 and f"{root}: 0 processes stopped" in again.stderr
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, 9)


async def test_a_live_runs_servers_are_left_alone(tmp_path: Path) -> None:
    root = tmp_path / "camp"
    owner = results_owner(root)
    server = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        # Started by this very process, which runs: a campaign still going.
        write_record(records_dir(owner), new_record("cpu", "cpu.ar.tp1", server.pid))
        assert find_local_leftovers(owner, None) == []
        done = await cleanup_results(root)
        assert done.stopped == 0 and not done.failed
        assert done.lines == [
            f"cpu.ar.tp1's server (pid {server.pid}) belongs to the run still going "
            f"(pid {os.getpid()}): left alone"
        ]
        assert server.poll() is None
    finally:
        server.kill()
        server.wait()

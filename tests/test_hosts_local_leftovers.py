"""Servers a crashed run left on this machine: found by the mark in their environment,
stopped by the next run of the same results with a notice; anyone else's left alone."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.host_events import Recorded

from specbench_tui.hosts.host import SimHost
from specbench_tui.hosts.local_leftovers import (
    SERVER_MARK_ENV,
    find_local_leftovers,
    results_owner,
)

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

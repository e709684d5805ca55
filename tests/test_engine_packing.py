"""Packing: groups side by side on disjoint GPUs of a host. The placement rule alone, then a
long packed campaign on the simulated host whose every placement is checked from its log,
then a kill -9 in the middle of a packed run and a resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import MINIMAL_PLAN, ROOT

from specbench_tui.hosts.local_leftovers import SERVER_MARK_ENV, marked_processes, results_owner
from specbench_tui.plan.loader import load_plan
from specbench_tui.plan.packing import Placer
from specbench_tui.plan.review import review
from specbench_tui.results.files import read_events
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.state import CampaignState


def test_placer_hands_out_aligned_blocks_from_the_top() -> None:
    p = Placer(range(8))
    assert p.place(1) == (7,)
    assert p.place(4) == (0, 1, 2, 3)  # 4-7 is broken up by GPU 7: the other aligned block
    assert p.place(4) is None
    assert p.place(2) == (4, 5)
    p.release((0, 1, 2, 3))
    assert p.place(8) is None and p.place(4) == (0, 1, 2, 3)
    assert Placer(range(8)).place(8, exclusive=True) == tuple(range(8))
    q = Placer([2, 3, 5, 6])  # the plan's gpu_ids, not 0..n-1
    assert q.place(2) == (5, 6) and q.offset((5, 6)) == 2


TREE = """
[configs.tree]
params = { budget = [8, 16, 32] }
args = ["--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "{budget}"]
"""
PACKED = (
    MINIMAL_PLAN.replace('name = "t"', 'name = "t"\npack = true')
    .replace("gpus = 4", "gpus = 8")
    .replace("speed = 50", "speed = 100")
    .replace('[configs.ar]\nlabel = "AR"', '[configs.ar]\nlabel = "AR"\n' + TREE)
    .replace('configs = ["ar", "dflash"]', 'configs = ["ar", "dflash", "tree"]')
    .replace("tp = [1]", "tp = [1, 2, 4]")
    .replace("samples = 2", "samples = 1")
)


def _headless(plan: Path, results: Path, **env: str) -> subprocess.Popen[str]:
    cmd = [
        sys.executable,
        "-m",
        "specbench_tui",
        str(plan),
        "--headless",
        "--results",
        str(results),
    ]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env},
    )


def _placements(root: Path) -> list[tuple[str, float, float, tuple[int, ...], int]]:
    """(group, start, end, GPUs, port) of every server the log says ran."""
    start: dict[str, tuple[float, tuple[int, ...], int]] = {}
    out = []
    for ev in read_events(ResultsLayout(root).events):
        if ev.name == "group_started":
            start[ev.group] = (ev.ts, tuple(ev.gpu_ids), ev.port)
        elif ev.name == "group_finished" and ev.group in start:
            t0, gpus, port = start.pop(ev.group)
            out.append((ev.group, t0, ev.ts, gpus, port))
    return out


@pytest.mark.system
def test_a_long_packed_run_never_shares_a_gpu_or_a_port(write_plan, tmp_path: Path) -> None:
    path = write_plan(PACKED)
    r = review(load_plan(path), tmp_path)
    assert r.estimate.total_s < 0.6 * r.estimate.unpacked_s
    proc = _headless(path, tmp_path)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    places = _placements(tmp_path / "t")
    assert len(places) == 15  # 5 configs x 3 TP sizes, each started once
    together = 0
    for i, (g1, s1, e1, gpus1, port1) in enumerate(places):
        for g2, s2, e2, gpus2, port2 in places[i + 1 :]:
            if s1 < e2 and s2 < e1:  # ran at the same time
                together += 1
                assert not set(gpus1) & set(gpus2), (g1, gpus1, g2, gpus2)
                assert port1 != port2, (g1, g2, port1)
    assert together >= 10  # it did pack
    state = CampaignState.from_events(read_events(ResultsLayout(tmp_path / "t").events))
    assert {c.status for c in state.cells.values()} == {"done"}


@pytest.mark.system
def test_kill_9_during_a_packed_run_loses_and_repeats_nothing(write_plan, tmp_path: Path) -> None:
    path = write_plan(PACKED)
    proc = _headless(path, tmp_path)
    root = tmp_path / "t"
    deadline = time.monotonic() + 120
    while True:  # several groups running, some cells finished
        time.sleep(0.2)
        text = (root / "events.jsonl").read_text() if (root / "events.jsonl").exists() else ""
        if text.count('"cell_finished"') >= 6:
            break
        assert proc.poll() is None and time.monotonic() < deadline, "never got going"
    proc.kill()
    proc.communicate(timeout=30)
    owner = results_owner(root)
    deadline = time.monotonic() + 10
    while marked_processes(owner) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not marked_processes(owner), "a server outlived the tool"
    # What PR_SET_PDEATHSIG cannot reach: a TP worker the killed server started, marked as
    # the crashed run's servers are. The resume must find and stop it.
    mark = json.dumps([owner, "sim", "sim.ar.tp1", proc.pid])
    worker = subprocess.Popen(
        ["sleep", "600"], env={**os.environ, SERVER_MARK_ENV: mark}, start_new_session=True
    )
    try:
        again = _headless(path, tmp_path)
        out, _ = again.communicate(timeout=600)
        assert again.poll() is not None
        assert worker.wait(timeout=5) is not None  # stopped by the resume
    finally:
        worker.kill()
    assert again.returncode == 0, out[-3000:]
    assert "stopped sim.ar.tp1's server left running by an earlier run" in out
    assert not marked_processes(owner), "a server outlived the campaign"
    layout = ResultsLayout(root)
    events = read_events(layout.events)
    state = CampaignState.from_events(events, layout.rows_exist)
    assert len(state.cells) == 15 and {c.status for c in state.cells.values()} == {"done"}
    finished = Counter(e.cell_id for e in events if e.name == "cell_finished")
    assert set(finished.values()) == {1}

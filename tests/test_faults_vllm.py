"""Faults of a real vLLM 0.32 engine on this CPU, through the whole tool run as a user runs
it (headless, in its own process): the engine core killed mid-cell costs one attempt and a
restart, never a cell done with a request lost to the dead server; the tool killed with -9
mid-cell leaves a server (API server, engine core) that the next run stops, every process of
it, checked by pid against the tree on record before the kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from specbench_tui.hosts.server_records import proc_stat, read_records
from tests.conftest import ROOT, free_port
from tests.test_engines_vllm import need_vllm

pytestmark = pytest.mark.system

PLAN = """\
[campaign]
name = "vllm-faults"
baseline = "ngram"

[hosts.cpu]
local = true
gpus = 1

[server]
engine = "vllm"
python = "{python}"
model = "{model}"
port = {port}
ready_timeout = "20m"
args = ["--max-model-len", "1024", "--dtype", "bfloat16", "--served-model-name", "tiny"]
env = {{ VLLM_CPU_KVCACHE_SPACE = "1", VLLM_CPU_OMP_THREADS_BIND = "nobind" }}

[configs.ngram]
args = ["--speculative-config", '{spec}', "--per-request-spec-decode-metrics", "summary"]

[matrix]
configs = ["ngram"]
tp = [1]

[workloads.single]
kind = "single"
prompts = ["chat"]
samples = 3
max_tokens = [256]

[workloads.load]
kind = "concurrency"
levels = [2]
requests = 6
prompts = ["chat"]
max_tokens = 256

[checks]
noise_floor = false
"""
GROUP = "cpu.ngram.tp1"
TIMEOUT_S = 1500


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    python = need_vllm()
    tmp = tmp_path_factory.mktemp("vllm-faults")
    model = tmp / "tiny-qwen3"
    subprocess.run(
        [python, "-m", "specbench_tui.engines.tiny_model", str(model)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=600,
    )
    spec = '{{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}}'
    path = tmp / "plan.toml"
    path.write_text(PLAN.format(python=python, model=model, port=free_port(), spec=spec))
    yield path


def _start(plan: Path, results: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results", str(results)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )


def _events(root: Path) -> list[dict]:
    path = root / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _wait_cell(proc: subprocess.Popen[str], root: Path, nth: int) -> None:
    """Until the ``nth`` cell_started of the run is in its log."""
    deadline = time.monotonic() + TIMEOUT_S
    while sum(e["event"] == "cell_started" for e in _events(root)) < nth:
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "no cell started in time"
        time.sleep(0.2)


def _server_tree(root: Path) -> list[tuple[int, int, str]]:
    """(pid, start time, name) of every process of the group's server, from its record."""
    ((_, rec),) = [(p, r) for p, r in read_records(root / "servers") if r.group == GROUP]
    return [(p.pid, p.start_ticks, p.name) for p in rec.members()]


def _alive(pid: int, ticks: int) -> bool:
    st = proc_stat(pid)
    return st is not None and st.start_ticks == ticks and st.state not in ("Z", "X")


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out


def test_engine_core_killed_mid_cell_costs_one_attempt(plan: Path, tmp_path: Path) -> None:
    root = tmp_path / "res" / "vllm-faults"
    proc = _start(plan, tmp_path / "res")
    try:
        _wait_cell(proc, root, 1)
        time.sleep(1.0)  # inside the first cell's requests (3 of 256 tokens)
        tree = _server_tree(root)
        cores = [pid for pid, _, name in tree if "EngineCor" in name]
        assert cores, tree  # vLLM's engine core, renamed, in the server's session
        for pid in cores:
            os.kill(pid, signal.SIGKILL)
    finally:
        code, out = _finish(proc)
    assert code == 0, out
    ev = _events(root)
    died = [e for e in ev if e["event"] == "server_died"]
    assert len(died) == 1 and died[0]["restart"] == 1, out
    assert [e["attempt"] for e in ev if e["event"] == "group_started"] == [1, 2]
    assert [e["by"] for e in ev if e["event"] == "cell_queued"] == ["server died"]
    assert not [e for e in ev if e["event"] == "cell_failed"]
    cells = pl.read_parquet(root / "cells.parquet")
    assert cells.height == 2 and set(cells["status"]) == {"done"}
    # No done cell holds a request lost to the dead server: every counted row is good.
    req = pl.read_parquet(root / "requests.parquet")
    counted = req.join(cells.select("cell_id", "attempt"), on=["cell_id", "attempt"])
    assert counted.height == 3 + 6 and counted["error"].null_count() == counted.height
    # The cut attempt's rows are kept, apart.
    cut = died[0]["cell_id"]
    assert cells.filter(pl.col("cell_id") == cut)["attempt"].item() == 2
    assert "1 server death(s)" in (root / "report.md").read_text()


def test_tool_killed_mid_cell_leaves_no_process_of_its_server(plan: Path, tmp_path: Path) -> None:
    root = tmp_path / "res" / "vllm-faults"
    proc = _start(plan, tmp_path / "res")
    try:
        _wait_cell(proc, root, 1)
        time.sleep(1.0)
        tree = _server_tree(root)
        assert any("EngineCor" in name for _, _, name in tree), tree
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    time.sleep(2.0)
    survivors = [(pid, name) for pid, ticks, name in tree if _alive(pid, ticks)]
    assert survivors, "nothing of the server outlived the tool: the test shows nothing"
    again = _start(plan, tmp_path / "res")
    code, out = _finish(again)
    assert code == 0, out
    left = [(pid, name) for pid, ticks, name in tree if _alive(pid, ticks)]
    assert not left, left
    notes = [e["text"] for e in _events(root) if e["event"] == "notice"]
    stopped = [n for n in notes if f"stopped {GROUP}'s server left running by an earlier run" in n]
    assert len(stopped) == 1, notes
    for pid, name in survivors:
        assert f"{name} (pid {pid})" in stopped[0], (stopped, survivors)
    cells = pl.read_parquet(root / "cells.parquet")
    assert set(cells["status"]) == {"done"}
    assert not list((root / "servers").glob("*.json"))

"""Campaigns on ``local = true`` hosts of this GPU-less machine, through the real telemetry
chain (no simulated NVML): the venv's pynvml finds no driver, ``python3`` has no pynvml,
there is no nvidia-smi. The server is a real HTTP server process (the simulator's server
command), as a user would point a plan at any engine."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, free_port, tiny_model

pytestmark = pytest.mark.system

PLAN = """\
[campaign]
name = "here"
baseline = "ar"

[hosts.here]
local = true
gpus = 1
stop_before = ["ddtree-qwen.service"]

[server]
python = "{python}"
model = "{model}"
port = {port}
launch = ["{{python}}", "-m", "specbench_tui.sim", "--model-path", "{{model}}", "--tp-size",
          "{{tp}}", "--host", "127.0.0.1", "--port", "{{port}}", "--speed", "50"]
ready_timeout = "60s"

[configs.ar]
[configs.dflash]
args = ["--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "8"]

[matrix]
configs = ["ar", "dflash"]
tp = [1]

[workloads.single]
kind = "single"
prompts = ["chat"]
samples = 2
max_tokens = [16]
"""


def real_gpu_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECBENCH_SIM_")}
    env["HTTP_PROXY"] = env["HTTPS_PROXY"] = "http://127.0.0.1:9"  # nothing listens there
    env["NO_PROXY"] = env["no_proxy"] = ""
    return env


def headless(plan: Path, results: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results"]
    return subprocess.run(
        [*argv, str(results), *extra],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        env=real_gpu_env(),
    )


def events_of(root: Path) -> list[dict]:
    return [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]


@pytest.mark.timing
def test_local_host_without_gpu_telemetry_finishes_without_a_gpu_wait(tmp_path: Path) -> None:
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi: its telemetry is not 'none'")
    plan = tmp_path / "plan.toml"
    port = free_port()
    plan.write_text(PLAN.format(python=sys.executable, port=port, model=tiny_model(tmp_path)))
    t0 = time.monotonic()
    # a proxy in the environment: health checks and the bench client must both ignore it
    proc = headless(plan, tmp_path / "res")
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    root = tmp_path / "res" / "here"
    events = events_of(root)
    (chosen,) = [e for e in events if e["event"] == "telemetry_chosen"]
    assert chosen["source"] == "none" and chosen["host"] == "here"
    warnings = [e["text"] for e in events if e["event"] == "notice" and e["level"] == "warning"]
    assert sum("no GPU telemetry" in w for w in warnings) == 1
    unverified = [e for e in events if e["event"] == "gpus_unverified"]
    assert [e["group"] for e in unverified] == ["here.ar.tp1", "here.dflash.tp1"]
    assert sum(e["event"] == "cell_finished" for e in events) == 2
    assert any("cannot stop ddtree-qwen.service" in w for w in warnings)
    assert wall < 200  # a GPU wait of the old kind alone took 300 s per group
    report = (root / "report.md").read_text()
    assert "GPU telemetry" in report and "not verified" in report
    assert "GPU board energy not measured" in report  # said once, where the host's mode is
    assert "telemetry: no GPU telemetry" in proc.stdout  # the headless line
    assert "energy: not measured (no GPU readings on this host)" in proc.stdout


def test_busy_base_port_on_a_local_host_takes_a_free_one(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    port = free_port()
    plan.write_text(PLAN.format(python=sys.executable, port=port, model=tiny_model(tmp_path)))
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", port))
        blocker.listen()
        proc = headless(plan, tmp_path / "res")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = events_of(tmp_path / "res" / "here")
    texts = [e.get("text", "") for e in events if e["event"] == "notice"]
    assert sum(f"port {port} is in use by pid {os.getpid()}" in t for t in texts) == 1
    assert sum(e["event"] == "cell_finished" for e in events) == 2


def test_dry_run_check_shows_the_telemetry_chain(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    port = free_port()
    plan.write_text(PLAN.format(python=sys.executable, port=port, model=tiny_model(tmp_path)))
    proc = subprocess.run(
        [sys.executable, "-m", "specbench_tui", str(plan), "--dry-run", "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=real_gpu_env(),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "host here (local)" in out and f"port {port} free" in out
    if not shutil.which("nvidia-smi"):
        assert "GPU telemetry: no GPU telemetry" in out and f"{sys.executable}: NVML" in out
        assert "energy: not measured" in out  # where energy would come from: nowhere
    js = subprocess.run(
        [sys.executable, "-m", "specbench_tui", str(plan), "--dry-run", "--check", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=real_gpu_env(),
    )
    doc = json.loads(js.stdout)
    (host,) = doc["preflight"]
    assert host["host"] == "here" and host["telemetry"]["source"] in ("none", "nvml", "nvidia-smi")
    assert host["ports"] == [f"{port} free"] and host["problems"] == []


def test_dry_run_check_names_a_local_model_that_is_missing(tmp_path: Path) -> None:
    """The model path is checked on a local host as on an SSH one: missing is exit 2 with
    the path, before any server would wait out its ready timeout; a hub id is only said."""
    missing = tmp_path / "gone" / "Qwen3-8B"
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(python=sys.executable, port=free_port(), model=missing))
    cmd = [sys.executable, "-m", "specbench_tui", str(plan), "--dry-run", "--check"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"specbench-tui: preflight: host here: model {missing} not found"
    )
    assert "Traceback" not in proc.stderr
    plan.write_text(PLAN.format(python=sys.executable, port=free_port(), model="Qwen/Qwen3-8B"))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "model Qwen/Qwen3-8B is no path here" in proc.stdout

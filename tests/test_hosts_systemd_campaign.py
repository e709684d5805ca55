"""Whole campaigns whose servers are transient units of a real systemd (reached over SSH,
tests/support/systemd_host.py), with a foreign service in ``stop_before`` as in the seed plan:
it holds GPU 0, TP1 runs beside it on the top GPU, TP4 needs GPU 0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, free_port
from support.systemd_host import SystemdHost, systemd_host  # noqa: F401 (the fixture)

pytestmark = pytest.mark.system

PLAN = """\
[campaign]
name = "{name}"
baseline = "ar"

[hosts.box]
ssh = "{alias}"
gpus = 4
services = "systemd"
workdir = "{workdir}"
stop_before = ["gpu0-hog.service", "anygpu.service"]

[server]
python = "{python}"
model = "{model}"
port = {port}
launch = ["{{python}}", "-m", "specbench_tui.sim", "--model-path", "{{model}}", "--tp-size",
          "{{tp}}", "--host", "127.0.0.1", "--port", "{{port}}", "--speed", "50",
          "--sim-require-model"]
ready_timeout = "60s"
env = {{ SPECBENCH_SIM_STATE = "{simgpu}", SPECBENCH_SIM_GPUS = "4" }}

[configs.ar]
[configs.dflash]
args = ["--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "8"]

[matrix]
configs = ["ar", "dflash"]
tp = [1, 4]

[workloads.single]
kind = "single"
prompts = ["chat"]
samples = 2
max_tokens = [16]
"""


def foreign_units(host: SystemdHost) -> None:
    """gpu0-hog: a simulated server on GPU 0 (its unit says CUDA_VISIBLE_DEVICES=0);
    anygpu: a service that says nothing about its GPUs."""
    sim = [sys.executable, "-m", "specbench_tui.sim", "--tp-size", "1", "--speed", "50"]
    hog = " ".join([*sim, "--port", str(free_port())])
    host.install_unit(
        "gpu0-hog.service",
        "[Service]\n"
        f"Environment=CUDA_VISIBLE_DEVICES=0 SPECBENCH_SIM_STATE={host.simgpu} "
        "SPECBENCH_SIM_GPUS=4\n"
        f"ExecStart={hog}",
    )
    host.install_unit("anygpu.service", "[Service]\nExecStart=/bin/sleep 600")
    host.ssh("systemctl start gpu0-hog.service anygpu.service")


def run(host: SystemdHost, tmp_path: Path, alias: str, name: str) -> tuple[int, str, list[dict]]:
    model = host.root / "model"
    model.mkdir(exist_ok=True)
    plan = tmp_path / "plan.toml"
    plan.write_text(
        PLAN.format(
            name=name,
            alias=alias,
            workdir=host.root / "work",
            python=sys.executable,
            model=model,
            port=free_port(),
            simgpu=host.simgpu,
        )
    )
    cli = [sys.executable, "-m", "specbench_tui", str(plan), "--headless"]
    proc = subprocess.run(
        [*cli, "--results", str(tmp_path / "res"), "--ssh-config", str(host.config)],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=ROOT,
    )
    log = tmp_path / "res" / name / "events.jsonl"
    events = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return proc.returncode, proc.stdout + proc.stderr, events


def order(events: list[dict]) -> tuple[int, int, int | None]:
    """(last TP1 group_finished, first TP4 group_started, the hog's stop notice) positions."""
    last_tp1 = max(
        i
        for i, e in enumerate(events)
        if e["event"] == "group_finished" and e["group"].endswith("tp1")
    )
    first_tp4 = next(
        i
        for i, e in enumerate(events)
        if e["event"] == "group_started" and e["group"].endswith("tp4")
    )
    stopped = next(
        (i for i, e in enumerate(events) if "stopped gpu0-hog.service" in e.get("text", "")), None
    )
    return last_tp1, first_tp4, stopped


def test_foreign_service_stopped_when_its_gpu_is_seen_held(
    systemd_host: SystemdHost,  # noqa: F811
    tmp_path: Path,
) -> None:
    foreign_units(systemd_host)
    try:
        code, out, events = run(systemd_host, tmp_path, "sdns-sim", "held")
        assert code == 0, out
        (chosen,) = [e for e in events if e["event"] == "telemetry_chosen"]
        assert chosen["source"] == "nvml"  # the simulator's NVML, read over SSH
        last_tp1, first_tp4, stopped = order(events)
        assert stopped is not None and last_tp1 < first_tp4 < stopped
        texts = [e.get("text", "") for e in events]
        assert any("started gpu0-hog.service, anygpu.service again" in t for t in texts)
        assert sum(e["event"] == "cell_finished" for e in events) == 4
        assert not any(e["event"] == "gpus_unverified" for e in events)
        assert systemd_host.ssh("systemctl is-active gpu0-hog.service").strip() == "active"
    finally:
        systemd_host.ssh("systemctl stop gpu0-hog.service anygpu.service", check=False)


def test_without_telemetry_only_a_service_set_up_for_the_gpus_is_stopped(
    systemd_host: SystemdHost,  # noqa: F811
    tmp_path: Path,
) -> None:
    """No GPU telemetry (the plain login on this GPU-less machine): gpu0-hog is stopped for
    TP4 only, since its unit says GPU 0; anygpu says nothing and is left running, said once."""
    foreign_units(systemd_host)
    try:
        code, out, events = run(systemd_host, tmp_path, "sdns", "blind")
        assert code == 0, out
        (chosen,) = [e for e in events if e["event"] == "telemetry_chosen"]
        assert chosen["source"] == "none"
        last_tp1, first_tp4, stopped = order(events)
        assert stopped is not None and last_tp1 < first_tp4 < stopped
        warnings = [e["text"] for e in events if e["event"] == "notice" and e["level"] == "warning"]
        assert sum("no GPU telemetry (" in w for w in warnings) == 1
        assert sum("anygpu.service" in w and "left running" in w for w in warnings) == 1
        assert len([e for e in events if e["event"] == "gpus_unverified"]) == 4
        assert sum(e["event"] == "cell_finished" for e in events) == 4
        assert any("started gpu0-hog.service again" in e.get("text", "") for e in events)
        assert systemd_host.ssh("systemctl is-active gpu0-hog.service").strip() == "active"
        assert systemd_host.ssh("systemctl is-active anygpu.service").strip() == "active"
    finally:
        systemd_host.ssh("systemctl stop gpu0-hog.service anygpu.service", check=False)

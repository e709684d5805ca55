"""A whole campaign on a host reached over real SSH (OpenSSH sshd on 127.0.0.1): servers
started there as processes, reached through port forwards, GPUs read by the agent over SSH."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from conftest import ROOT, free_port
from sshd_fixture import Sshd, sshd  # noqa: F401 (the fixture)

pytestmark = pytest.mark.system

PLAN = """\
[campaign]
name = "remote"
baseline = "ar"

[hosts.box]
ssh = "sbtest"
gpus = 4
services = "process"
workdir = "{workdir}"

[server]
python = "{python}"
model = "{model}"
port = {port}
launch = ["{{python}}", "-m", "specbench_tui.sim", "--model-path", "{{model}}", "--tp-size",
          "{{tp}}", "--host", "127.0.0.1", "--port", "{{port}}", "--speed", "50",
          "--sim-require-model"]
ready_timeout = "60s"

[configs.ar]
[configs.dflash]
args = ["--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "8"]

[matrix]
configs = ["ar", "dflash"]
tp = [1, 2]

[workloads.single]
kind = "single"
prompts = ["chat"]
samples = 2
max_tokens = [24]
"""


def write(tmp_path: Path, **kw: str) -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    values = {
        "workdir": str(tmp_path / "remote"),
        "python": sys.executable,
        "model": str(model),
        "port": str(free_port()),
    } | kw
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(**values))
    return path


def run(plan: Path, sshd: Sshd, results: Path) -> subprocess.CompletedProcess[str]:  # noqa: F811
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "specbench_tui",
            str(plan),
            "--headless",
            "--results",
            str(results),
            "--ssh-config",
            str(sshd.config),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )


def test_campaign_over_ssh(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    proc = run(write(tmp_path), sshd, tmp_path / "res")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    root = tmp_path / "res" / "remote"
    events = [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "cell_finished" for e in events) == 4
    assert sum(e["event"] == "service_ready" for e in events) == 4
    req = pl.read_parquet(root / "requests.parquet")
    assert req.height == 8 and req["error"].null_count() == 8
    # the server log came back over SSH, and was written on the host too
    assert "ready to roll" in (root / "logs" / "box.dflash.tp2.log").read_text()
    assert (tmp_path / "remote" / "remote" / "logs" / "box.dflash.tp2.log").exists()  # its folder
    tele = pl.read_parquet(root / "telemetry.parquet")
    assert tele.height > 0 and set(tele["host"]) == {"box"}


def test_missing_model_is_one_line_before_anything_runs(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    proc = run(write(tmp_path, model="/dev/shm/not-there"), sshd, tmp_path / "res")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "specbench-tui: host box: model /dev/shm/not-there not found "
        "(a prepare command in the plan can fix it)"
    )


def test_prepare_fixes_what_preflight_finds_missing(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    model = tmp_path / "shm-model"
    plan = write(tmp_path, model=str(model))
    plan.write_text(
        plan.read_text().replace(
            'services = "process"', f'services = "process"\nprepare = ["mkdir -p {model}"]'
        )
    )
    proc = run(plan, sshd, tmp_path / "res")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert model.is_dir()


def test_unknown_host_key_is_refused_with_exit_2(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    config = tmp_path / "ssh_config"
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    config.write_text(sshd.config.read_text().replace(str(sshd.known_hosts), str(empty)))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "specbench_tui",
            str(write(tmp_path)),
            "--headless",
            "--results",
            str(tmp_path / "res"),
            "--ssh-config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert f"host key of sbtest (127.0.0.1 port {sshd.port}) is not in {empty}" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


@pytest.mark.timing
def test_campaign_over_ssh_whose_python3_has_no_pynvml(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    """The normal GPU server: pynvml only in a venv, not in the login's python3. Here the
    login is plain (nothing simulated) and the machine has no NVIDIA driver either: the chain
    ends at "none", the campaign says so once and finishes without a GPU wait."""
    plan = write(tmp_path)
    plan.write_text(plan.read_text().replace('ssh = "sbtest"', 'ssh = "sbplain"'))
    login = subprocess.run(
        ["ssh", "-F", str(sshd.config), "sbplain", "python3 -c 'import pynvml'"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert login.returncode != 0 and "No module named 'pynvml'" in login.stderr
    t0 = time.monotonic()
    proc = run(plan, sshd, tmp_path / "res")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert time.monotonic() - t0 < 170  # the old 300 s GPU wait per group is gone
    root = tmp_path / "res" / "remote"
    events = [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]
    (chosen,) = [e for e in events if e["event"] == "telemetry_chosen"]
    assert chosen["source"] == "none" and "python3" in chosen["detail"]
    warnings = [e["text"] for e in events if e["event"] == "notice" and e["level"] == "warning"]
    assert sum("no GPU telemetry" in w for w in warnings) == 1, warnings
    assert len([e for e in events if e["event"] == "gpus_unverified"]) == 4
    assert sum(e["event"] == "cell_finished" for e in events) == 4
    assert (
        not (root / "telemetry.parquet").exists()
        or pl.read_parquet(root / "telemetry.parquet").is_empty()
    )
    assert "GPU freedom not verified before 4 server starts" in (root / "report.md").read_text()


def test_held_port_is_one_line_naming_the_holder(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    plan = write(tmp_path)
    port = int(next(w for w in plan.read_text().split("\n") if w.startswith("port = ")).split()[-1])
    holder = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            if subprocess.run(
                ["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True
            ).stdout:
                break
            time.sleep(0.05)
        proc = run(plan, sshd, tmp_path / "res")
        check = subprocess.run(
            [
                sys.executable,
                "-m",
                "specbench_tui",
                str(plan),
                "--dry-run",
                "--check",
                "--ssh-config",
                str(sshd.config),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
    finally:
        holder.terminate()
        holder.wait(10)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line = proc.stderr.strip()
    assert len(line.splitlines()) == 1
    assert line.startswith(f"specbench-tui: host box: port {port} in use by ")
    assert f"pid={holder.pid}" in line and "stop it or change the plan's port" in line
    assert check.returncode == 2 and f"PROBLEM: port {port} in use by" in check.stdout
    assert "GPU telemetry: simulated" not in check.stdout  # sbtest's fake NVML counts as NVML
    assert "GPU telemetry: NVML (through" in check.stdout


def test_unreachable_host_is_one_line_with_exit_2(tmp_path: Path) -> None:
    plan = write(tmp_path)
    plan.write_text(
        plan.read_text().replace('ssh = "sbtest"', f'ssh = "root@127.0.0.1:{free_port()}"')
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "specbench_tui",
            str(plan),
            "--headless",
            "--results",
            str(tmp_path / "res"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert "connection refused" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_model_gone_mid_campaign_runs_prepare_and_goes_on(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    """A reboot empties /dev/shm between groups: the next start fails, the host's prepare puts
    the model back, the server starts again and the campaign finishes."""
    model = tmp_path / "shm-model"
    plan = write(tmp_path, model=str(model))
    plan.write_text(
        plan.read_text().replace(
            'services = "process"', f'services = "process"\nprepare = ["mkdir -p {model}"]'
        )
    )
    model.mkdir()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specbench_tui",
            str(plan),
            "--headless",
            "--results",
            str(tmp_path / "res"),
            "--ssh-config",
            str(sshd.config),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    log = tmp_path / "res" / "remote" / "events.jsonl"
    try:
        deadline = time.monotonic() + 60
        while not (log.exists() and '"group_finished"' in log.read_text()):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        model.rmdir()  # the "reboot"
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    events = [json.loads(x) for x in log.read_text().splitlines()]
    failed = [e for e in events if e["event"] == "service_failed"]
    assert failed and "exited with code 1 during start-up" in failed[0]["reason"]
    assert any("Can't load the configuration" in ln for ln in failed[0]["log_tail"])
    assert any("running the plan's prepare" in e.get("text", "") for e in events)
    assert sum(e["event"] == "cell_finished" for e in events) == 4
    assert model.is_dir()

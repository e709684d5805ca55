"""Shared fixtures: plan files written into a temporary directory, free loopback ports."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PLANS = ROOT / "plans"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The outage scenarios' tallies (cells done and failed, servers left on the host),
    shown whether their tests passed or not."""
    scenarios = sys.modules.get("support.ssh_scenarios")
    lines: list[str] = getattr(scenarios, "SCENARIO_LINES", [])
    if lines:
        terminalreporter.section("outage scenarios")
        for line in lines:
            terminalreporter.write_line(line)


def need_program(name: str) -> str:
    """A system program a test needs: skipped on a developer's machine, a failure under CI."""
    path = shutil.which(name)
    if path is None:
        if IN_CI:
            pytest.fail(f"{name} is required under CI but is not installed")
        pytest.skip(f"{name} not installed")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MINIMAL_PLAN = """\
[campaign]
name = "t"
baseline = "ar"

[hosts.sim]
sim = true
gpus = 4
speed = 50

[server]
port = {port}

[configs.ar]
label = "AR"

[configs.dflash]
args = ["--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "8"]

[matrix]
configs = ["ar", "dflash"]
tp = [1]

[workloads.single]
kind = "single"
prompts = ["chat"]
samples = 2
max_tokens = [32]
"""


@pytest.fixture
def write_plan(tmp_path: Path) -> Callable[..., Path]:
    def write(text: str = MINIMAL_PLAN, name: str = "plan.toml") -> Path:
        path = tmp_path / name
        path.write_text(text.replace("{port}", str(free_port())))
        return path

    return write


def start_headless(plan: Path, results: Path) -> subprocess.Popen[str]:
    """A headless campaign in its own process; returns once its control socket is there
    (the campaign has started and can be attached to)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results", str(results)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    sock = results / tomllib.loads(plan.read_text())["campaign"]["name"] / "control.sock"
    deadline = time.monotonic() + 30
    while not sock.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no control socket at {sock}: {proc.communicate()[0]}")
        time.sleep(0.05)
    return proc

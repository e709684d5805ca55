"""Two campaigns of one plan at once (different ``--results``), as two users, or one user in
two terminals, would run them: on one local machine and on one host over a real sshd. Neither
takes over, stops or measures the other's server. Locally the second moves to other ports
(the port claims are machine-wide, and the port's listener must be the group's own server);
over SSH the second refuses before anything runs, naming the run that holds the campaign on
the host (whichever of its servers runs then, or none, between two groups)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, free_port
from sshd_fixture import Sshd, sshd  # noqa: F401 (the fixture)

pytestmark = pytest.mark.system

LOCAL = """\
[campaign]
name = "twice"
baseline = "ar"

[hosts.here]
local = true
gpus = 1

[server]
python = "{python}"
model = "tiny-model"
port = {port}
launch = ["{{python}}", "-m", "specbench_tui.sim", "--model-path", "{{model}}", "--tp-size",
          "{{tp}}", "--host", "127.0.0.1", "--port", "{{port}}", "--speed", "20"]
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
max_tokens = [32]
"""

REMOTE = """\
[campaign]
name = "twice-remote"
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
          "{{tp}}", "--host", "127.0.0.1", "--port", "{{port}}", "--speed", "3"]
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
max_tokens = [64]
"""


def _start(plan: Path, results: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results",
         str(results), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )  # fmt: skip


def _events(root: Path) -> list[dict]:
    path = root / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _finish(proc: subprocess.Popen[str], timeout_s: float = 240) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out


def _ports(events: list[dict]) -> dict[str, int]:
    return {e["group"]: e["port"] for e in events if e["event"] == "group_started"}


def test_two_local_campaigns_at_once_each_measure_their_own_server(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(LOCAL.format(python=sys.executable, port=free_port()))
    a = _start(plan, tmp_path / "a")
    b = _start(plan, tmp_path / "b")
    (code_a, out_a), (code_b, out_b) = _finish(a), _finish(b)
    assert code_a == 0, out_a
    assert code_b == 0, out_b
    ev_a, ev_b = _events(tmp_path / "a" / "twice"), _events(tmp_path / "b" / "twice")
    for ev in (ev_a, ev_b):
        done = [e for e in ev if e["event"] == "cell_finished"]
        assert len(done) == 2 and all(e["errors"] == 0 for e in done)
        assert not [e for e in ev if e["event"] in ("service_failed", "server_died")]
        notes = " ".join(e["text"] for e in ev if e["event"] == "notice")
        assert "left running by an earlier run" not in notes  # nothing taken or stopped
    # Never one port for both: where one campaign's server listened, the other's did not.
    pa, pb = _ports(ev_a), _ports(ev_b)
    assert set(pa) == set(pb) == {"here.ar.tp1", "here.dflash.tp1"}
    assert not (set(pa.values()) & set(pb.values())), (pa, pb)
    moved = [
        e["text"]
        for e in ev_a + ev_b
        if e["event"] == "notice" and "another campaign on this machine" in e["text"]
    ]
    in_use = [
        e["text"] for e in ev_a + ev_b if e["event"] == "notice" and "is in use by" in e["text"]
    ]
    assert moved or in_use  # the second said why it took another port
    assert not (tmp_path / "a" / "twice" / "servers").exists() or not list(
        (tmp_path / "a" / "twice" / "servers").glob("*.json")
    )


def test_a_second_campaign_on_one_ssh_host_refuses_the_firsts_server(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    plan = tmp_path / "plan.toml"
    plan.write_text(
        REMOTE.format(
            workdir=tmp_path / "remote", python=sys.executable, model=model, port=free_port()
        )
    )
    ssh = ("--ssh-config", str(sshd.config))
    a = _start(plan, tmp_path / "a", *ssh)
    root_a = tmp_path / "a" / "twice-remote"
    try:
        deadline = time.monotonic() + 120
        while not any(e["event"] == "service_ready" for e in _events(root_a)):
            assert a.poll() is None and time.monotonic() < deadline, a.stdout and a.stdout.read()
            time.sleep(0.1)
        b = subprocess.run(
            [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results",
             str(tmp_path / "b"), *ssh],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )  # fmt: skip
        assert b.returncode == 2, b.stdout + b.stderr
        assert (
            "host box: the campaign twice-remote on this host is being run by another process "
            f"still going (results {root_a.resolve()}, pid {a.pid})"
        ) in b.stderr, b.stderr
        assert "Traceback" not in b.stderr
    finally:
        code_a, out_a = _finish(a)
    assert code_a == 0, out_a
    ev_a = _events(root_a)
    done = [e for e in ev_a if e["event"] == "cell_finished"]
    assert len(done) == 2 and all(e["errors"] == 0 for e in done)
    assert not [e for e in ev_a if e["event"] in ("service_failed", "server_died", "cell_queued")]
    assert not [
        e for e in _events(tmp_path / "b" / "twice-remote") if e["event"] == "group_started"
    ]

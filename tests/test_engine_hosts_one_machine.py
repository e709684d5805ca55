"""Plan hosts that are one machine: two simulated hosts, two SSH aliases of one sshd. Their
servers start at the same moment with the same plan port; each must end on a port of its
own (claimed process-wide, per network namespace) instead of failing "address in use"."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MINIMAL_PLAN, ROOT, free_port
from sshd_fixture import Sshd, sshd  # noqa: F401 (the fixture)
from support.host_events import Recorded

from specbench_tui.hosts import port_claims
from specbench_tui.hosts.host import SimHost
from specbench_tui.plan.loader import load_plan
from specbench_tui.plan.review import render_text, review
from specbench_tui.results.cells import ServiceGroup

TWO_SIM = MINIMAL_PLAN.replace(
    "[hosts.sim]\nsim = true\ngpus = 4\nspeed = 50\n",
    "[hosts.sim]\nsim = true\ngpus = 4\nspeed = 50\n\n"
    "[hosts.sim2]\nsim = true\ngpus = 4\nspeed = 50\n",
).replace("tp = [1]", "tp = [1, 2]")


def _events(root: Path) -> list[dict]:
    return [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]


def _overlapping_ports(events: list[dict]) -> tuple[int, list[tuple[str, str, int]]]:
    """How many pairs of groups of different hosts ran at the same time, and those that
    shared a port meanwhile."""
    start: dict[str, tuple[float, str, int]] = {}
    spans = []
    for e in events:
        if e["event"] == "group_started":
            start[e["group"]] = (e["ts"], e["host"], e["port"])
        elif e["event"] == "group_finished" and e["group"] in start:
            t0, host, port = start.pop(e["group"])
            spans.append((e["group"], host, t0, e["ts"], port))
    together, clashes = 0, []
    for i, (g1, h1, s1, e1, p1) in enumerate(spans):
        for g2, h2, s2, e2, p2 in spans[i + 1 :]:
            if h1 != h2 and s1 < e2 and s2 < e1:
                together += 1
                if p1 == p2:
                    clashes.append((g1, g2, p1))
    return together, clashes


def _headless(plan: Path, results: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "specbench_tui",
            str(plan),
            "--headless",
            "--results",
            str(results),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def _assert_all_done_once(events: list[dict], groups: int) -> None:
    names = [e["event"] for e in events]
    assert "service_failed" not in names, [e for e in events if e["event"] == "service_failed"]
    assert names.count("service_ready") == groups  # each group started once
    assert names.count("cell_finished") == groups and "cell_failed" not in names
    (end,) = [e for e in events if e["event"] == "campaign_finished"]
    assert end["exit_code"] == 0


@pytest.mark.system
def test_two_sim_hosts_on_one_port_each_take_their_own(write_plan, tmp_path: Path) -> None:
    plan = write_plan(TWO_SIM.replace("samples = 2", "samples = 1"))
    proc = _headless(plan, tmp_path / "res")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    events = _events(tmp_path / "res" / "t")
    _assert_all_done_once(events, 8)  # 2 configs x 2 TP x 2 hosts
    together, clashes = _overlapping_ports(events)
    assert together >= 2 and not clashes  # they did run at once, never on one port
    assert "a server of this campaign on the same machine" in proc.stdout


SSH_PLAN = """\
[campaign]
name = "twins"
baseline = "ar"

[hosts.a]
ssh = "sbtest"
gpus = 2
gpu_ids = [0, 1]
services = "process"
workdir = "{workdir}/a"

[hosts.b]
ssh = "sbtwin"
gpus = 2
gpu_ids = [2, 3]
services = "process"
workdir = "{workdir}/b"

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
samples = 1
max_tokens = [24]
"""


@pytest.mark.system
def test_two_ssh_aliases_of_one_sshd_never_share_a_port(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    """``sbtwin`` is a second alias of ``sbtest``'s sshd: the same machine under two names."""
    config = tmp_path / "ssh_config"
    text = sshd.config.read_text()
    twin = text[text.index("Host sbtest") : text.index("Host sbplain")].replace("sbtest", "sbtwin")
    config.write_text(text + twin)
    model = tmp_path / "model"
    model.mkdir()
    plan = tmp_path / "plan.toml"
    plan.write_text(
        SSH_PLAN.format(
            workdir=tmp_path / "remote", python=sys.executable, model=model, port=free_port()
        )
    )
    proc = _headless(plan, tmp_path / "res", "--ssh-config", str(config))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    events = _events(tmp_path / "res" / "twins")
    _assert_all_done_once(events, 4)
    together, clashes = _overlapping_ports(events)
    assert together >= 1 and not clashes
    assert "a server of this campaign on the same machine" in proc.stdout


def _group(port: int, gid: str) -> ServiceGroup:
    return ServiceGroup(
        id=gid,
        host=gid.split(".")[0],
        host_kind="sim",
        config="ar",
        label="AR",
        tp=1,
        gpu_ids=(0,),
        port=port,
        command=("python", "--port", str(port)),
        env=(),
        api="sglang",
        ready_timeout_s=60.0,
        speculative=False,
    )


async def test_claims_are_per_machine_and_given_back(tmp_path: Path) -> None:
    """The unit of the rule: two hosts claim at the same moment; the second is moved; a
    release frees the port for the next group; the notice says why."""
    said = Recorded()
    a, b = SimHost("a", 1, events=said), SimHost("b", 1, events=said)
    port = free_port()
    try:
        ga, gb = _group(port, "a.ar.tp1"), _group(port, "b.ar.tp1")
        wa, wb = await asyncio.gather(a.claim_port(ga), b.claim_port(gb))
        assert wa.port == port and wb.port != port and str(wb.port) in wb.command
        machine = port_claims.local_machine()
        assert port_claims.holder(machine, port) == "a.ar.tp1"
        assert port_claims.holder(machine, wb.port) == "b.ar.tp1"
        ((level, text),) = said.notices
        assert level == "info" and f"port {port} is taken by a.ar.tp1" in text
        a.release_port(ga)
        assert port_claims.holder(machine, port) is None
        again = await a.claim_port(dataclasses.replace(ga, id="a.dflash.tp1"))
        assert again.port == port
    finally:
        await a.close()
        await b.close()
    assert port_claims.holder(port_claims.local_machine(), wb.port) is None  # close gave back


def test_namespace_key_reads_the_probe() -> None:
    assert port_claims.namespace_key("abc\nnet:[4026531833]\n") == "abc/net:[4026531833]"
    assert port_claims.namespace_key("abc\n") is None
    assert port_claims.local_machine().endswith("]")


def test_an_unpacked_multi_host_plan_prints_its_schedule(write_plan, tmp_path: Path) -> None:
    """Hosts run side by side even unpacked: the dry run says when each group runs."""
    text = render_text(review(load_plan(write_plan(TWO_SIM)), tmp_path))
    assert "schedule (predicted" in text
    sched = text[text.index("schedule (predicted") :]
    assert "sim2.ar.tp1" in sched and "sim.ar.tp1" in sched
    one = render_text(review(load_plan(write_plan(MINIMAL_PLAN, "one.toml")), tmp_path))
    assert "schedule (predicted" not in one  # one host, one group at a time: nothing to show

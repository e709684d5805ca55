"""SystemdService and foreign units over a real sshd, against systemd test doubles
(tests/fake_systemd.py) first on the session's PATH."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx
import pytest
from conftest import ROOT, free_port
from fake_systemd import install
from sshd_fixture import Sshd, sshd  # noqa: F401 (the fixture)
from test_hosts_ssh import sim_group

from specbench_tui.hosts.service import READY_LINE, ServiceError
from specbench_tui.hosts.ssh import SshConnection
from specbench_tui.hosts.systemd import (
    ForeignUnits,
    SystemdService,
    journal_message,
    main_exit_status,
    parse_show,
    unit_name,
)


@pytest.fixture
def ssh(sshd: Sshd) -> SshConnection:  # noqa: F811
    install(sshd.fakebin)
    return SshConnection(sshd.alias, **sshd.connect_args())  # type: ignore[arg-type]


def test_parsers() -> None:
    assert unit_name("demo", "ct200.ar.tp1") == "specbench-demo-ct200.ar.tp1.service"
    with pytest.raises(ValueError):
        unit_name("demo", "a b")
    assert parse_show("ActiveState=failed\nResult=exit-code\n") == {
        "ActiveState": "failed",
        "Result": "exit-code",
    }
    assert parse_show("active\nrunning\n", ["ActiveState", "SubState"]) == {
        "ActiveState": "active",
        "SubState": "running",
    }
    assert journal_message({"MESSAGE": [104, 105, 255]}) == "hi\ufffd"
    assert journal_message({"MESSAGE": "x"}) == "x" and journal_message({}) is None
    assert main_exit_status("u: Main process exited, code=exited, status=203/EXEC") == 203
    assert main_exit_status("u: Main process exited, code=killed, status=9/KILL") == -9


async def test_systemd_service_lifecycle(ssh: SshConnection, tmp_path: Path) -> None:
    port = free_port()
    lines: list[str] = []
    svc = SystemdService(
        sim_group(port),
        ssh,
        tmp_path / "logs" / "g.log",
        lines.append,
        campaign="demo",
        cwd=str(ROOT),
        python=sys.executable,
        extra_env={"SPECBENCH_SIM_STATE": str(tmp_path / "state"), "SPECBENCH_SIM_GPUS": "1"},
    )
    try:
        await svc.start()
        assert svc.alive() and svc.main_pid
        await svc.wait_ready()
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
            resp = await client.post(
                svc.base_url + "/generate",
                json={"text": "hi", "sampling_params": {"max_new_tokens": 3, "temperature": 0}},
            )
        assert resp.status_code == 200
        for _ in range(50):
            if any(READY_LINE in x for x in lines):
                break
            await asyncio.sleep(0.05)
        assert sum(READY_LINE in x for x in lines) == 1
        # drop the connection: the journal tail resumes after its cursor, no line twice
        seen = len(lines)
        ssh.drop()
        await asyncio.sleep(0.1)
        await ssh.run("true")
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
            for _ in range(50):
                try:
                    await client.post(
                        svc.base_url + "/generate",
                        json={"text": "a", "sampling_params": {"max_new_tokens": 2}},
                    )
                    break
                except httpx.HTTPError:
                    await asyncio.sleep(0.1)
        for _ in range(50):
            if len(lines) > seen:
                break
            await asyncio.sleep(0.1)
        assert len(lines) > seen
        assert sum(READY_LINE in x for x in lines) == 1
        await svc.stop(grace_s=10)
        assert not svc.alive()
        state = await svc.show()
        assert state["ActiveState"] == "inactive" and state["LoadState"] == "not-found"
        text = (tmp_path / "logs" / "g.log").read_text()
        assert text.count(READY_LINE) == 1 and "Deactivated successfully" in text
        assert (
            await ssh.run(
                [
                    sys.executable,
                    "-c",
                    f"import socket; s=socket.socket(); s.bind(('127.0.0.1', {port}))",
                ]
            )
        ).ok
    finally:
        await svc.stop(grace_s=2)
        await ssh.close()


async def test_bad_execstart_and_early_exit(ssh: SshConnection, tmp_path: Path) -> None:
    port = free_port()
    bad = sim_group(port)
    bad = type(bad)(**{**bad.__dict__, "command": ("/opt/nope/bin/python", "-m", "sglang")})
    svc = SystemdService(bad, ssh, tmp_path / "b.log", campaign="demo", python=sys.executable)
    with pytest.raises(ServiceError) as info:
        await svc.start()
    msg = str(info.value)
    assert "systemd-run failed" in msg and "Job for specbench-demo-" in msg
    assert "/opt/nope/bin/python" in msg
    assert any("status=203/EXEC" in x for x in info.value.log_tail)
    crash = type(bad)(
        **{
            **bad.__dict__,
            "command": (
                sys.executable,
                "-c",
                "import sys; print('boom \\x1b[31mred\\x1b[0m'); sys.exit(4)",
            ),
        }
    )
    svc = SystemdService(crash, ssh, tmp_path / "c.log", campaign="demo", python=sys.executable)
    try:
        await svc.start()
        with pytest.raises(ServiceError, match="exited with code 4 during start-up") as info:
            await svc.wait_ready(20)
        assert any("boom" in x and "red" in x for x in info.value.log_tail)  # MESSAGE as bytes
        assert svc.exit_code == 4
    finally:
        await svc.stop(grace_s=2)
        await ssh.close()


async def test_stop_and_restore_foreign(ssh: SshConnection, sshd: Sshd) -> None:  # noqa: F811
    files = sshd.systemd_state / "unit-files"
    files.mkdir(exist_ok=True)
    (files / "ddtree-qwen.service.json").write_text(json.dumps({"ExecStart": ["sleep", "300"]}))
    (files / "idle.service.json").write_text(json.dumps({"ExecStart": ["sleep", "300"]}))
    try:
        assert (await ssh.run("systemctl start ddtree-qwen.service")).ok
        res = await ssh.run("systemctl stop nope.service")
        assert res.exit_status == 5 and "Unit nope.service not loaded." in res.stderr
        foreign = ForeignUnits(ssh)
        stopped = await foreign.stop(["ddtree-qwen.service", "idle.service"])
        assert stopped == ["ddtree-qwen.service"]  # idle.service was not running
        assert (await ssh.run("systemctl is-active ddtree-qwen.service")).stdout == "inactive\n"
        assert await foreign.restore() == []
        assert (await ssh.run("systemctl is-active ddtree-qwen.service")).stdout == "active\n"
        assert foreign.stopped == []
    finally:
        await ssh.run("systemctl stop ddtree-qwen.service")
        await ssh.close()

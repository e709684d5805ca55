"""The SSH transport and the remote process service against a real sshd on 127.0.0.1."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx
import pytest
from conftest import ROOT, free_port
from sshd_fixture import Sshd, sshd  # noqa: F401 (the fixture)

from specbench_tui.errors import InputError
from specbench_tui.hosts.backends.ssh.remote_process import RemoteProcessService
from specbench_tui.hosts.host import FAKE_NVML_PATH
from specbench_tui.hosts.service import READY_LINE, ServiceError
from specbench_tui.hosts.ssh import (
    Destination,
    PortForward,
    SshAgentRunner,
    SshConnectError,
    SshConnection,
)
from specbench_tui.hosts.telemetry import TelemetryReader
from specbench_tui.results.cells import ServiceGroup

pytestmark = pytest.mark.system


def connection(sshd: Sshd, dest: str = "sbtest", **kw: object) -> SshConnection:  # noqa: F811
    return SshConnection(dest, **{**sshd.connect_args(), **kw})  # type: ignore[arg-type]


def test_destination_parsing() -> None:
    assert Destination.parse("ct200") == Destination("ct200")
    assert Destination.parse("root@ct200") == Destination("ct200", "root")
    assert Destination.parse("root@ct200:2222") == Destination("ct200", "root", 2222)
    assert Destination.parse("[::1]:2200") == Destination("::1", None, 2200)
    assert Destination.parse("root@ct200:2222").ssh_command() == "ssh -p 2222 root@ct200"
    with pytest.raises(InputError, match="not a number"):
        Destination.parse("root@ct200:ssh")


async def test_connect_and_run(sshd: Sshd) -> None:  # noqa: F811
    ssh = connection(sshd)
    try:
        res = await ssh.run("echo out; echo err >&2; exit 3")
        assert (res.exit_status, res.stdout, res.stderr) == (3, "out\n", "err\n")
        res = await ssh.run(["printf", "%s|", "a b", "$HOME"], env={"X": "it's"})
        assert res.stdout == "a b|$HOME|"
        res = await ssh.run(["sh", "-c", 'echo "$X"'], env={"X": "it's; rm -rf /"})
        assert res.stdout == "it's; rm -rf /\n"
        lines = [line async for line in ssh.stream_lines("for i in 1 2 3; do echo l$i; done")]
        assert lines == ["l1", "l2", "l3"]
        # a dropped connection is re-established on the next use
        ssh.drop()
        await asyncio.sleep(0.1)
        assert (await ssh.run("echo again")).stdout == "again\n"
        assert ssh.reconnects == 1
    finally:
        await ssh.close()


async def test_user_host_port_destination(sshd: Sshd) -> None:  # noqa: F811
    import getpass

    ssh = SshConnection(
        f"{getpass.getuser()}@127.0.0.1:{sshd.port}",
        known_hosts=sshd.known_hosts,
        client_keys=[sshd.client_key],
        use_agent=False,
        config=sshd.root / "empty_config",
    )
    (sshd.root / "empty_config").write_text("")
    try:
        assert (await ssh.run("echo ok")).stdout == "ok\n"
    finally:
        await ssh.close()


async def test_unreachable_and_auth_failure(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    port = free_port()
    ssh = connection(sshd, dest=f"127.0.0.1:{port}")
    with pytest.raises(SshConnectError, match=rf"connection refused.*ssh -F \S+ -p {port} "):
        await ssh.run("true")
    key = tmp_path / "stranger"
    import subprocess

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    with pytest.raises(SshConnectError, match="authentication failed"):
        await connection(sshd, client_keys=[key]).run("true")


async def test_port_forward_reaches_remote_loopback(sshd: Sshd) -> None:  # noqa: F811
    ssh = connection(sshd)
    port = free_port()
    server = await ssh.start_process(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    )
    fwd = PortForward(ssh, port)
    try:
        local = await fwd.open()
        assert local != port
        async with httpx.AsyncClient(trust_env=False) as client:
            for _ in range(100):
                try:
                    resp = await client.get(f"http://127.0.0.1:{local}/")
                    break
                except httpx.HTTPError:
                    await asyncio.sleep(0.05)
            assert resp.status_code == 200
            # the forward comes back on the same local port after a reconnect
            ssh.drop()
            await asyncio.sleep(0.1)
            await ssh.run("true")
            for _ in range(50):
                try:
                    resp = await client.get(f"http://127.0.0.1:{local}/")
                    break
                except httpx.HTTPError:
                    await asyncio.sleep(0.1)
            assert resp.status_code == 200
    finally:
        await fwd.close()
        server.close()
        await ssh.run(f"pkill -f 'http.server {port}' || true")
        await ssh.close()


async def test_telemetry_over_ssh(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    ssh = connection(sshd)
    env = {
        "SPECBENCH_SIM_NVML": str(tmp_path),
        "SPECBENCH_SIM_NVML_MODULE": str(FAKE_NVML_PATH),
        "SPECBENCH_SIM_GPUS": "2",
    }
    reader = TelemetryReader(
        "remote", SshAgentRunner(ssh, sys.executable, env), interval_s=0.1, gpus=[0, 1]
    )
    reader.start()
    try:
        for _ in range(100):
            if len(reader.latest()) == 2:
                break
            await asyncio.sleep(0.05)
        latest = reader.latest()
        assert sorted(latest) == [0, 1] and latest[0].host == "remote"
        assert latest[1].mem_total_mib and reader.last_error is None
    finally:
        await reader.stop()
        await ssh.close()


def sim_group(port: int, speed: float = 20, extra: tuple[str, ...] = ()) -> ServiceGroup:
    return ServiceGroup(
        id="remote.ar.tp1",
        host="remote",
        host_kind="ssh",
        config="ar",
        label="AR",
        tp=1,
        gpu_ids=(0,),
        port=port,
        command=(
            sys.executable,
            "-m",
            "specbench_tui.sim",
            "--port",
            str(port),
            "--tp-size",
            "1",
            "--speed",
            str(speed),
            *extra,
        ),
        env=(("SPECBENCH_TEST_MARK", "it's here"),),
        api="sglang",
        ready_timeout_s=30.0,
        speculative=False,
    )


async def test_remote_process_runs_the_simulator(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    ssh = connection(sshd)
    port = free_port()
    lines: list[str] = []
    local_log = tmp_path / "logs" / "remote.ar.tp1.log"
    workdir = str(tmp_path / "work")
    svc = RemoteProcessService(
        sim_group(port),
        ssh,
        local_log,
        lines.append,
        workdir=workdir,
        cwd=str(ROOT),
        python=sys.executable,
        extra_env={"SPECBENCH_SIM_STATE": str(tmp_path / "state"), "SPECBENCH_SIM_GPUS": "1"},
    )
    try:
        await svc.start()
        assert svc.alive() and svc.pid
        assert svc.base_url != f"http://127.0.0.1:{port}"  # through the forward
        startup = await svc.wait_ready()
        assert startup < 30
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
            resp = await client.post(
                svc.base_url + "/generate",
                json={"text": "hi", "sampling_params": {"max_new_tokens": 4, "temperature": 0}},
            )
        assert resp.status_code == 200 and resp.json()["meta_info"]["completion_tokens"] == 4
        for _ in range(50):
            if any(READY_LINE in line for line in lines):
                break
            await asyncio.sleep(0.05)
        assert any(READY_LINE in line for line in lines)
        assert Path(workdir, "remote.ar.tp1.pid").read_text().strip() == str(svc.pid)
        assert (await ssh.run(f"kill -0 {svc.pid}")).ok
        await svc.stop(grace_s=10)
        assert not svc.alive()
        for _ in range(50):  # the remote shell that reaped it may report a moment later
            if not (await ssh.run(f"kill -0 {svc.pid} 2>/dev/null")).ok:
                break
            await asyncio.sleep(0.1)
        assert not (await ssh.run(f"kill -0 {svc.pid} 2>/dev/null")).ok
        text = local_log.read_text()
        assert READY_LINE in text and "stopping remote.ar.tp1" in text
        remote_text = Path(workdir, "logs", "remote.ar.tp1.log").read_text()
        assert remote_text.count(READY_LINE) == text.count(READY_LINE) == 1
        # the port is free again: a new start succeeds on it
        await svc.start()
        await svc.wait_ready()
        await svc.stop(grace_s=10)
    finally:
        await svc.stop(grace_s=2)
        await ssh.close()


async def test_remote_process_early_exit_and_busy_port(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    ssh = connection(sshd)
    port = free_port()
    group = ServiceGroup(
        **{
            **sim_group(port).__dict__,
            "command": (
                sys.executable,
                "-c",
                "import sys; print('Loading weights'); "
                "print('RuntimeError: CUDA error: out of memory'); sys.exit(3)",
            ),
        }
    )
    svc = RemoteProcessService(
        group, ssh, tmp_path / "x.log", workdir=str(tmp_path / "w"), python=sys.executable
    )
    try:
        await svc.start()
        with pytest.raises(ServiceError) as info:
            await svc.wait_ready(20)
        assert "exited with code 3 during start-up" in str(info.value)
        assert info.value.log_tail[-1] == "RuntimeError: CUDA error: out of memory"
        assert svc.exit_code == 3 and not svc.alive()
        await svc.stop(grace_s=2)
        # a port already taken on the host is refused before anything starts
        holder = await ssh.start_process(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
        )
        try:
            for _ in range(100):
                if (
                    await ssh.run(
                        f"{sys.executable} -c 'import socket; "
                        f'socket.create_connection(("127.0.0.1", {port}))\''
                    )
                ).ok:
                    break
                await asyncio.sleep(0.05)
            svc2 = RemoteProcessService(
                sim_group(port),
                ssh,
                tmp_path / "y.log",
                workdir=str(tmp_path / "w"),
                python=sys.executable,
            )
            with pytest.raises(ServiceError, match=f"port {port} already in use"):
                await svc2.start()
        finally:
            holder.close()
            await ssh.run(f"pkill -f 'http.server {port}' || true")
    finally:
        await ssh.close()

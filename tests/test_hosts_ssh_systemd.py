"""SystemdService and foreign units against a real systemd 252 (PID 1 of a private namespace,
reached over a real sshd inside it: tests/support/systemd_host.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import free_port
from support.systemd_host import SystemdHost, systemd_host  # noqa: F401 (the fixture)
from test_hosts_ssh import sim_group

from specbench_tui.hosts.backends.ssh.remote_process import RemoteProcessService
from specbench_tui.hosts.backends.ssh.systemd import (
    ForeignUnits,
    SystemdService,
    escape_dollars,
    journal_message,
    main_exit_status,
    parse_cuda_devices,
    parse_show,
    parse_systemd_version,
    systemd_error,
    unit_name,
)
from specbench_tui.hosts.service import READY_LINE, ServiceError
from specbench_tui.hosts.ssh import SshConnection
from specbench_tui.results.cells import ServiceGroup

pytestmark = pytest.mark.system


@pytest.fixture
def ssh(systemd_host: SystemdHost) -> SshConnection:  # noqa: F811
    return systemd_host.connection()


def command_group(port: int, *command: str, gid: str = "remote.ar.tp1") -> ServiceGroup:
    return dataclasses.replace(sim_group(port), id=gid, command=tuple(command))


async def wait_for(predicate, timeout_s: float = 30.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def test_parsers() -> None:
    assert unit_name("demo", "ct200.ar.tp1") == "specbench-demo-ct200.ar.tp1.service"
    with pytest.raises(ValueError):
        unit_name("demo", "a b")
    assert parse_show("ActiveState=failed\nResult=exit-code\n") == {
        "ActiveState": "failed",
        "Result": "exit-code",
    }
    assert journal_message({"MESSAGE": [104, 105, 255]}) == "hi\ufffd"
    assert journal_message({"MESSAGE": "x"}) == "x" and journal_message({}) is None
    assert journal_message({"MESSAGE": None}) is None  # > 4096 bytes without --all
    assert journal_message({"MESSAGE": ["alpha", "beta"]}) == "alpha\nbeta"
    assert journal_message({"MESSAGE": ["a", [98, 255]]}) == "a\nb\ufffd"
    assert main_exit_status("u: Main process exited, code=exited, status=203/EXEC") == 203
    assert main_exit_status("u: Main process exited, code=killed, status=9/KILL") == -9
    assert escape_dollars("$MODEL ${X} $$") == "$$MODEL $${X} $$$$"
    noisy = "bashrc: pyenv: cannot rehash\nFailed to find executable /x: No such file\n"
    assert systemd_error(noisy) == "Failed to find executable /x: No such file"
    assert systemd_error("only noise\n") == "only noise"
    assert parse_systemd_version("systemd 252 (252.38-1~deb12u1)\n+PAM +AUDIT") == 252
    assert parse_cuda_devices("0,1") == {0, 1} and parse_cuda_devices("") == set()
    assert parse_cuda_devices("GPU-d4422da2-3ec0") is None


async def test_start_ready_stop_and_reconnect(
    ssh: SshConnection,
    systemd_host: SystemdHost,  # noqa: F811
    tmp_path: Path,
) -> None:
    port = free_port()
    lines: list[str] = []
    svc = SystemdService(
        sim_group(port),
        ssh,
        tmp_path / "logs" / "g.log",
        lines.append,
        campaign="demo",
        workdir=str(systemd_host.root / "work"),
        python=sys.executable,
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
        await wait_for(lambda: any(READY_LINE in x for x in lines), what="the ready line")
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
        await wait_for(lambda: len(lines) > seen, what="lines after the reconnect")
        assert sum(READY_LINE in x for x in lines) == 1
        await svc.stop(grace_s=10)
        assert not svc.alive()
        state = await svc.show()
        assert state["ActiveState"] == "inactive" and state["LoadState"] == "not-found"
        text = (tmp_path / "logs" / "g.log").read_text()
        assert text.count(READY_LINE) == 1 and "Deactivated successfully" in text
        assert await svc.released()
    finally:
        await svc.stop(grace_s=2)
        await ssh.close()


async def test_every_run_gets_its_first_line_and_none_of_the_last_run(
    ssh: SshConnection,
    systemd_host: SystemdHost,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Fresh unit names and reused ones (a campaign run again): with a cursor -u does not
    match, journalctl 252 dropped the first matching entry, sometimes the server's own."""
    try:
        names = ["first.a", "first.b", "first.c", "first.d", "first.a", "first.a", "first.b"]
        for i, gid in enumerate([*names, "first.a"]):
            lines: list[str] = []
            group = command_group(
                free_port(), "/bin/sh", "-c", f"echo first-{i}; echo second-{i}", gid=gid
            )
            svc = SystemdService(
                group,
                ssh,
                tmp_path / f"{i}.log",
                lines.append,
                campaign="demo",
                workdir=str(systemd_host.root / "work"),
            )
            await svc.start()
            await asyncio.wait_for(svc.wait_exit(), 30)
            await wait_for(lambda: any("Deactivated" in x for x in lines), what="the end")  # noqa: B023
            await svc.stop(grace_s=2)
            mine = [x for x in lines if x.startswith(("first-", "second-"))]
            assert mine == [f"first-{i}", f"second-{i}"], lines
    finally:
        await ssh.close()


CRASH = """
import os, sys, time
go = sys.argv[1]
print("waiting for", go, flush=True)
while not os.path.exists(go):
    time.sleep(0.05)
for i in range(25):
    print(f"line {i:02d}", flush=True)
def load():
    raise RuntimeError("boom: CUDA out of memory")
load()
"""


async def test_crash_while_the_follower_is_down_comes_back_whole(
    ssh: SshConnection,
    systemd_host: SystemdHost,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The server writes 25 lines, a traceback and dies while nobody follows its journal;
    the follower started again after the cursor gets every line and the exit status (a real
    journalctl without -n all gave 9 of 30 here)."""
    go = systemd_host.root / f"go-{free_port()}"
    lines: list[str] = []
    group = command_group(free_port(), sys.executable, "-c", CRASH, str(go), gid="crash.tp1")
    svc = SystemdService(
        group,
        ssh,
        tmp_path / "c.log",
        lines.append,
        campaign="demo",
        workdir=str(systemd_host.root / "work"),
        python=sys.executable,
    )
    try:
        await svc.start()
        await wait_for(lambda: any("waiting for" in x for x in lines), what="the first line")
        follower = svc._tail_task  # the follower goes down, as with a dropped link
        assert follower is not None
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
        seen = len(lines)
        go.write_text("go")
        code = await asyncio.wait_for(svc.wait_exit(), 30)
        assert len(lines) == seen  # nothing was read meanwhile
        svc._tail_task = asyncio.create_task(svc._follow_journal())  # the link is back
        await wait_for(lambda: any("status=1/FAILURE" in x for x in lines), what="the exit line")
        got = lines[seen:]
        assert [x for x in got if x.startswith("line ")] == [f"line {i:02d}" for i in range(25)]
        assert any(x.startswith("Traceback (most recent call last)") for x in got)
        assert "RuntimeError: boom: CUDA out of memory" in got
        assert svc.exit_code == 1 and code in (1, None)
    finally:
        await svc.stop(grace_s=2)
        await ssh.close()


def _script_unit(
    script: str,
    gid: str,
    ssh: SshConnection,
    systemd_host: SystemdHost,  # noqa: F811
    tmp_path: Path,
    lines: list[str],
) -> SystemdService:
    """A unit that runs a Python script as its server, its log lines into ``lines``."""
    group = command_group(free_port(), sys.executable, "-c", script, gid=gid)
    return SystemdService(
        group,
        ssh,
        tmp_path / f"{gid}.log",
        lines.append,
        campaign="demo",
        workdir=str(systemd_host.root / "work"),
        python=sys.executable,
    )


LONG_AND_MULTI = """
import socket, sys
print("A" * 10240, flush=True)
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.connect("/run/systemd/journal/socket")
s.send(b"MESSAGE=alpha\\nMESSAGE=beta\\nSYSLOG_IDENTIFIER=multi\\n")
print("done", flush=True)
"""


async def test_long_line_and_multivalued_message(
    ssh: SshConnection,
    systemd_host: SystemdHost,  # noqa: F811
    tmp_path: Path,
) -> None:
    lines: list[str] = []
    svc = _script_unit(LONG_AND_MULTI, "long.tp1", ssh, systemd_host, tmp_path, lines)
    try:
        await svc.start()
        await asyncio.wait_for(svc.wait_exit(), 30)
        await wait_for(lambda: "done" in lines and "beta" in lines, what="all lines")
        assert "A" * 10240 in lines  # whole, not null (journalctl --all)
        i = lines.index("alpha")
        assert lines[i + 1] == "beta"  # one entry, MESSAGE twice: both kept, in order
    finally:
        await svc.stop(grace_s=2)
        await ssh.close()


HUGE_LINE = """
import sys
sys.stdout.write("B" * 20_000_000)
sys.stdout.write("\\nafter\\n")
sys.stdout.flush()
"""


async def test_a_20_mb_line_without_newline_reaches_the_log_in_pieces(
    ssh: SshConnection,
    systemd_host: SystemdHost,  # noqa: F811
    tmp_path: Path,
) -> None:
    """journald splits a line at its LineMax, so the tail sees bounded entries and the line
    after it arrives; nothing on this path holds or rejoins the 20 MB."""
    lines: list[str] = []
    svc = _script_unit(HUGE_LINE, "huge.tp1", ssh, systemd_host, tmp_path, lines)
    try:
        await svc.start()
        await asyncio.wait_for(svc.wait_exit(), 60)
        await wait_for(lambda: "after" in lines, what="the line after the long one", timeout_s=120)
        pieces = [line for line in lines if line.startswith("B")]
        assert max(map(len, pieces)) <= 1 << 20
        assert sum(map(len, pieces)) > 1_000_000  # the line is there, in journald's pieces
    finally:
        await svc.stop(grace_s=2)
        await ssh.close()


SHOW = (
    "import json, os, sys; print('ENV ' + json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd(),"
    " 'home': os.environ.get('HOME'), 'path': os.environ.get('PATH')}), flush=True)"
)
ARGS = ("$MODEL", "$$", "${HOME}", "%n", "100%", "a b", "it's")


async def test_dollars_arrive_literally_with_the_login_environment(
    ssh: SshConnection,
    systemd_host: SystemdHost,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The same argv, HOME, PATH and cwd as a unit and as a plain process (process mode)."""
    workdir = str(systemd_host.root / "work")
    login = await ssh.run('printf "%s\\n%s\\n" "$HOME" "$PATH"')
    home, path = login.stdout.splitlines()[:2]
    seen: dict[str, dict[str, object]] = {}
    for kind in ("systemd", "process"):
        lines: list[str] = []
        group = command_group(free_port(), sys.executable, "-c", SHOW, *ARGS, gid=f"env.{kind}")
        svc = (
            SystemdService(
                group, ssh, tmp_path / f"{kind}.log", lines.append, campaign="demo", workdir=workdir
            )
            if kind == "systemd"
            else RemoteProcessService(
                group, ssh, tmp_path / f"{kind}.log", lines.append, workdir=workdir
            )
        )
        try:
            await svc.start()
            await wait_for(lambda: any(x.startswith("ENV ") for x in lines), what="the output")  # noqa: B023
            seen[kind] = json.loads(next(x for x in lines if x.startswith("ENV "))[4:])
        finally:
            await svc.stop(grace_s=2)
    await ssh.close()
    assert seen["systemd"]["argv"] == list(ARGS)
    assert seen["systemd"] == seen["process"]
    assert seen["systemd"]["cwd"] == workdir
    assert seen["systemd"]["home"] == home and seen["systemd"]["path"] == path


async def test_bad_execstart_gives_systemds_error_and_early_exit(
    ssh: SshConnection,
    systemd_host: SystemdHost,  # noqa: F811
    tmp_path: Path,
) -> None:
    workdir = str(systemd_host.root / "work")
    bad = command_group(free_port(), "/opt/nope/bin/python", "-m", "sglang")
    svc = SystemdService(bad, ssh, tmp_path / "b.log", campaign="demo", workdir=workdir)
    with pytest.raises(ServiceError) as info:
        await svc.start()
    msg = str(info.value)
    # the login's rc file prints to stderr first (see systemd_ns.sh); systemd's line wins
    assert "Failed to find executable /opt/nope/bin/python: No such file or directory" in msg
    assert "bashrc" not in msg
    crash = command_group(
        free_port(),
        sys.executable,
        "-c",
        "import sys; print('boom \\x1b[31mred\\x1b[0m', flush=True); sys.exit(4)",
    )
    svc = SystemdService(crash, ssh, tmp_path / "c.log", campaign="demo", workdir=workdir)
    try:
        await svc.start()
        with pytest.raises(ServiceError, match="exited with code 4 during start-up") as info:
            await svc.wait_ready(20)
        assert any("boom" in x and "red" in x for x in info.value.log_tail)  # MESSAGE as bytes
        assert svc.exit_code == 4
    finally:
        await svc.stop(grace_s=2)
        await ssh.close()


async def test_stop_restore_and_configured_gpus_of_foreign_units(
    ssh: SshConnection,
    systemd_host: SystemdHost,  # noqa: F811
) -> None:
    systemd_host.install_unit(
        "gpu0-hog.service",
        "[Service]\nEnvironment=CUDA_VISIBLE_DEVICES=0 OTHER=1\nExecStart=/bin/sleep 300",
    )
    systemd_host.install_unit("anygpu.service", "[Service]\nExecStart=/bin/sleep 300")
    systemd_host.install_unit("idle.service", "[Service]\nExecStart=/bin/sleep 300")
    try:
        systemd_host.ssh("systemctl start gpu0-hog.service anygpu.service")
        res = await ssh.run("systemctl stop nope.service")
        assert res.exit_status == 5 and "Unit nope.service not loaded." in res.stderr
        foreign = ForeignUnits(ssh)
        assert await foreign.configured_gpus("gpu0-hog.service") == {0}
        assert await foreign.configured_gpus("anygpu.service") is None
        assert await foreign.configured_gpus("idle.service") is None  # not running
        stopped = await foreign.stop(["gpu0-hog.service", "idle.service"])
        assert stopped == ["gpu0-hog.service"]  # idle.service was not running
        assert (await ssh.run("systemctl is-active gpu0-hog.service")).stdout == "inactive\n"
        assert await foreign.restore() == []
        assert (await ssh.run("systemctl is-active gpu0-hog.service")).stdout == "active\n"
        assert foreign.stopped == []
    finally:
        systemd_host.ssh("systemctl stop gpu0-hog.service anygpu.service", check=False)
        await ssh.close()

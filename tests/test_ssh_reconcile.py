"""What a start does with what an earlier run left on an SSH host, over a real sshd on
127.0.0.1 (``services = "process"``) and a real systemd 252 reached over its own sshd: a
start that never came up is made afresh and says so; a server under the group's name that is
not this run's (another campaign still going, or a pid file whose pid now names some other
process) is neither stopped nor taken over; one of ours that fails its health check is stopped,
all its processes with it, and a new one serves. The campaign-level counterparts (the link cut
by killing sshd) are in test_hosts_ssh_outages.py and test_hosts_systemd_outages.py.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, free_port
from sshd_fixture import Sshd, sshd  # noqa: F401 (the fixture)
from support.systemd_host import SystemdHost, systemd_host  # noqa: F401 (the fixture)
from test_hosts_ssh import connection, sim_group

from specbench_tui.hosts.backends.ssh import remote_process, systemd
from specbench_tui.hosts.backends.ssh.remote_process import WRAPPER, RemoteProcessService
from specbench_tui.hosts.backends.ssh.remote_service import launch_mark, launch_owner
from specbench_tui.hosts.backends.ssh.systemd import SystemdService, unit_name
from specbench_tui.hosts.leftovers import find_leftovers
from specbench_tui.hosts.server_records import all_processes
from specbench_tui.hosts.service import ServiceError
from specbench_tui.hosts.ssh import SshConnection, SshResultLost

pytestmark = pytest.mark.system

CAMPAIGN = "rec"
GID = "remote.ar.tp1"


@pytest.fixture(autouse=True)
def quick_adopt_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """A leftover must answer within seconds here, not the 15 s a real one gets."""
    monkeypatch.setattr(remote_process, "ADOPT_HEALTH_S", 3.0)
    monkeypatch.setattr(systemd, "ADOPT_HEALTH_S", 3.0)


def sim_env(tmp_path: Path) -> dict[str, str]:
    return {"SPECBENCH_SIM_STATE": str(tmp_path / "state"), "SPECBENCH_SIM_GPUS": "1"}


def wait_until(predicate, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def group_members(pgid: int) -> list[int]:
    """The live processes of process group ``pgid`` on this machine (the sshd's host)."""
    return [p.pid for p in all_processes() if p.pgid == pgid and p.state not in ("Z", "X")]


def spawn(argv: list[str], cwd: Path) -> subprocess.Popen[bytes]:
    """A process group of its own, as a server a crashed run left (or anything else)."""
    return subprocess.Popen(
        ["setsid", *argv], cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )


def spawn_wrapper(workdir: Path, mark: str, *command: str) -> subprocess.Popen[bytes]:
    """The wrapper under ``mark``, as a start of the tool leaves it: pid file and all."""
    pid_file = workdir / CAMPAIGN / f"{GID}.pid"
    pid_file.unlink(missing_ok=True)
    proc = spawn(
        [
            "sh",
            "-c",
            WRAPPER,
            mark,
            str(pid_file),
            str(workdir / CAMPAIGN / f"{GID}.exit"),
            *command,
        ],
        workdir,
    )
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), 10, "the pid file")
    assert int(pid_file.read_text()) == proc.pid
    return proc


@pytest.fixture
def strays() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            for pid in group_members(p.pid) or [p.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
            p.wait(10)


def process_service(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
    port: int,
    notes: list[str],
    results: str,
    ssh: SshConnection | None = None,
) -> RemoteProcessService:
    return RemoteProcessService(
        sim_group(port),
        ssh or connection(sshd),
        tmp_path / "logs" / f"{GID}.log",
        campaign=CAMPAIGN,
        workdir=str(tmp_path / "work"),
        cwd=str(ROOT),
        python=sys.executable,
        extra_env=sim_env(tmp_path),
        on_notice=lambda _level, text: notes.append(text),
        results=results,
    )


# --- process mode: a start that never came up ----------------------------------------------------


async def test_process_a_start_whose_server_never_ran_is_made_afresh(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The pid and exit files of a start whose server never ran (its command not found) are
    left in the workdir: nothing is followed or stopped, a new server starts and serves."""
    work = tmp_path / "work"
    (work / CAMPAIGN).mkdir(parents=True)
    gone = subprocess.Popen(["true"])
    gone.wait()
    (work / CAMPAIGN / f"{GID}.pid").write_text(f"{gone.pid}\n")
    (work / CAMPAIGN / f"{GID}.exit").write_text("127\n")
    notes: list[str] = []
    svc = process_service(sshd, tmp_path, free_port(), notes, str(tmp_path / "res"))
    try:
        await svc.start()
        assert svc.pid is not None and svc.pid != gone.pid and not svc.adopted
        await svc.wait_ready(30)
        assert svc.alive() and svc.exit_code is None  # the old exit file was not read as its
        assert notes == []
    finally:
        await svc.stop(grace_s=5)
        await svc.ssh.close()


async def test_process_a_lost_start_that_never_happened_is_started_again_and_said(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
    strays: list[subprocess.Popen[bytes]],
) -> None:
    """The start command is lost before it ran on the host, and the group's old pid file now
    names another process (its pid reused): that process is left alone, the start is made
    once more, and a notice says so."""
    work = tmp_path / "work"
    (work / CAMPAIGN).mkdir(parents=True)
    stranger = spawn(["sleep", "600"], work)
    strays.append(stranger)
    (work / CAMPAIGN / f"{GID}.pid").write_text(f"{stranger.pid}\n")
    ssh = connection(sshd)
    real_run = ssh.run
    lost: list[str] = []

    async def lossy(command, **kw):  # type: ignore[no-untyped-def]
        if isinstance(command, str) and "nohup setsid" in command and not lost:
            lost.append(command)  # never sent: the start did not happen
            raise SshResultLost("sbtest: the connection dropped while the command ran")
        return await real_run(command, **kw)

    ssh.run = lossy  # type: ignore[method-assign]
    notes: list[str] = []
    svc = process_service(sshd, tmp_path, free_port(), notes, str(tmp_path / "res"), ssh)
    try:
        await svc.start()
        await svc.wait_ready(30)
        assert lost and svc.pid not in (None, stranger.pid)
        assert any(
            n.startswith(f"{GID}: the link to ")
            and n.endswith("dropped during the start and no server came up; starting it again")
            for n in notes
        ), notes
        log = (tmp_path / "logs" / f"{GID}.log").read_text()
        assert log.count(f"starting {GID}") == 2, log
        assert "the reply to the start was lost and no server runs" in log
        assert stranger.poll() is None, "a process the tool did not start was stopped"
    finally:
        await svc.stop(grace_s=5)
        await ssh.close()


# --- process mode: a server under the group's name that is not ours ------------------------------


@pytest.mark.parametrize("where", ["here", "another machine"])
async def test_process_a_server_of_another_live_campaign_is_refused_and_left_running(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
    strays: list[subprocess.Popen[bytes]],
    where: str,
) -> None:
    """The group's pid file names a server marked as what this group starts, by a run of
    other results still going (this process; or a tool on another machine, which nothing
    here can see end): the start refuses naming that run, and the server runs on."""
    work = tmp_path / "work"
    (work / CAMPAIGN).mkdir(parents=True)
    port = free_port()
    theirs = str(tmp_path / "other" / CAMPAIGN)
    owner = launch_owner(theirs)
    if where == "another machine":
        owner = "0" * 12 + owner[12:]
    mark = launch_mark(CAMPAIGN, sim_group(port), sim_env(tmp_path), owner)
    other = spawn_wrapper(work, mark, "sleep", "600")
    strays.append(other)
    notes: list[str] = []
    svc = process_service(sshd, tmp_path, port, notes, str(tmp_path / "mine" / CAMPAIGN))
    try:
        with pytest.raises(ServiceError) as info:
            await svc.start()
        text = str(info.value)
        suffix = " on another machine" if where == "another machine" else ""
        assert (
            f"{GID}: the server of pid {other.pid} on sbtest belongs to another campaign still "
            f"running (results {theirs}, pid {os.getpid()}{suffix}): not taken over or stopped"
        ) in text, text
        assert not svc.alive() and not svc.adopted
        time.sleep(0.3)
        assert other.poll() is None and len(group_members(other.pid)) == 2  # sh and its sleep
        assert (work / CAMPAIGN / f"{GID}.pid").read_text().strip() == str(other.pid)
        assert not any("stopped" in n or "took over" in n for n in notes), notes
    finally:
        await svc.stop(grace_s=2)
        await svc.ssh.close()


async def test_process_a_stale_pid_file_naming_another_process_leaves_it_alone(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
    strays: list[subprocess.Popen[bytes]],
) -> None:
    """After a reboot a pid file's pid may name any process group of the login: it is not
    the wrapper, so neither the leftover search nor the start stops it; the start says so and
    starts the server. An unmarked wrapper (what an older version of the tool started) is
    still found and stopped, as the one it is."""
    work = tmp_path / "work"
    (work / CAMPAIGN).mkdir(parents=True)
    stranger = spawn(["sleep", "600"], work)
    strays.append(stranger)
    (work / CAMPAIGN / f"{GID}.pid").write_text(f"{stranger.pid}\n")
    ssh = connection(sshd)
    try:
        assert (
            await find_leftovers(
                ssh, services="process", campaign=CAMPAIGN, workdir=str(work), group_ids={GID}
            )
            == []
        )
        notes: list[str] = []
        svc = process_service(sshd, tmp_path, free_port(), notes, str(tmp_path / "res"), ssh)
        try:
            await svc.start()
            await svc.wait_ready(30)
            assert svc.pid != stranger.pid and not svc.adopted
            assert notes == [
                f"{GID}: the pid file on sbtest names pid {stranger.pid}, now a process this "
                "tool did not start: left alone; starting a new server"
            ]
            assert stranger.poll() is None, "a process the tool did not start was stopped"
        finally:
            await svc.stop(grace_s=5)
        # an older version's wrapper ($0 "sh", no mark) in the pid file: ours, stopped
        older = spawn_wrapper(work, "sh", "sleep", "600")
        strays.append(older)
        found = await find_leftovers(
            ssh, services="process", campaign=CAMPAIGN, workdir=str(work), group_ids={GID}
        )
        assert [(lo.group, lo.pid) for lo in found] == [(GID, older.pid)]
        notes.clear()
        svc = process_service(sshd, tmp_path, free_port(), notes, str(tmp_path / "res"), ssh)
        try:
            await svc.start()
            assert older.wait(30) is not None and group_members(older.pid) == []
            assert notes == [
                f"{GID}: stopped the server left running on sbtest by an earlier run "
                f"(pid {older.pid}): it carries no launch mark (an older version of the tool "
                "started it)"
            ]
            await svc.wait_ready(30)
        finally:
            await svc.stop(grace_s=5)
    finally:
        await ssh.close()


# --- process mode: ours, but failing its health check --------------------------------------------


async def test_process_a_leftover_of_ours_failing_its_health_check_is_replaced(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
    strays: list[subprocess.Popen[bytes]],
) -> None:
    """A crashed run of these results left the group's server, marked as what the group
    starts, holding the port but answering 404 to its health check: it is stopped (the
    wrapper and its child both gone, the port free), then a new server serves on the port."""
    work = tmp_path / "work"
    (work / CAMPAIGN).mkdir(parents=True)
    port = free_port()
    results = str(tmp_path / "res")
    mark = launch_mark(CAMPAIGN, sim_group(port), sim_env(tmp_path), launch_owner(results))
    sick = spawn_wrapper(
        work, mark, sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"
    )
    strays.append(sick)
    wait_until(lambda: len(group_members(sick.pid)) == 2, 10, "the sick server's child")
    notes: list[str] = []
    svc = process_service(sshd, tmp_path, port, notes, results)
    try:
        await svc.start()
        assert not svc.adopted and svc.pid not in (None, sick.pid)
        assert sick.wait(10) is not None and group_members(sick.pid) == []
        assert len(notes) == 1, notes
        assert notes[0].startswith(
            f"{GID}: stopped its server left running on sbtest by an earlier run "
            f"(pid {sick.pid}): it does not answer its health check (GET /health"
        ), notes
        assert notes[0].endswith("; starting a new one"), notes
        await svc.wait_ready(30)
        assert svc.alive()
        log = (tmp_path / "logs" / f"{GID}.log").read_text()
        assert f"stopping pid {sick.pid}" in log and f"starting {GID}" in log
    finally:
        await svc.stop(grace_s=5)
        await svc.ssh.close()


# --- systemd units over SSH ----------------------------------------------------------------------


UNIT = unit_name(CAMPAIGN, GID)


def unit_service(
    host: SystemdHost, tmp_path: Path, port: int, notes: list[str], results: str
) -> SystemdService:
    return SystemdService(
        sim_group(port),
        host.connection(),
        tmp_path / "logs" / f"{GID}.log",
        campaign=CAMPAIGN,
        workdir=str(host.root / "work"),
        python=sys.executable,
        on_notice=lambda _level, text: notes.append(text),
        results=results,
    )


def leave_unit(host: SystemdHost, mark: str, *command: str, collect: bool = True) -> None:
    """The group's unit as an earlier run (or another campaign) left it."""
    flags = "--collect " if collect else ""
    host.ssh(
        f"systemd-run --unit={UNIT} --description={shlex.quote(mark)} --property=Type=exec "
        f"{flags}--quiet -- {shlex.join(command)}",
        check=collect,  # one that fails at once may fail systemd-run's own wait for its exec
    )


def unit_state(host: SystemdHost) -> dict[str, str]:
    out = host.ssh(f"systemctl show -p ActiveState,MainPID,Description {UNIT}")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@pytest.fixture
def unit_cleanup(systemd_host: SystemdHost) -> Iterator[None]:  # noqa: F811
    yield
    systemd_host.ssh(f"systemctl stop {UNIT}; systemctl reset-failed {UNIT}", check=False)


async def test_systemd_a_unit_that_failed_to_come_up_is_started_afresh(
    systemd_host: SystemdHost,  # noqa: F811
    tmp_path: Path,
    unit_cleanup: None,
) -> None:
    """An earlier start of the group's unit failed at once and the unit stayed loaded,
    failed: the start clears it and starts the server, nothing to take over or stop."""
    port = free_port()
    results = str(tmp_path / "res")
    mark = launch_mark(CAMPAIGN, sim_group(port), {}, launch_owner(results))
    leave_unit(systemd_host, mark, "/bin/false", collect=False)
    wait_until(lambda: unit_state(systemd_host)["ActiveState"] == "failed", 20, "failed")
    notes: list[str] = []
    svc = unit_service(systemd_host, tmp_path, port, notes, results)
    try:
        await svc.start()
        await svc.wait_ready(30)
        assert not svc.adopted and svc.alive() and notes == []
        assert unit_state(systemd_host)["ActiveState"] == "active"
    finally:
        await svc.stop(grace_s=5)
        await svc.ssh.close()


async def test_systemd_a_unit_of_another_live_campaign_is_refused_and_left_running(
    systemd_host: SystemdHost,  # noqa: F811
    tmp_path: Path,
    unit_cleanup: None,
) -> None:
    """The group's unit runs under the mark of what this group starts, by a run of other
    results still going: the start refuses naming that run, and the unit runs on, its
    process the same."""
    port = free_port()
    theirs = str(tmp_path / "other" / CAMPAIGN)
    mark = launch_mark(CAMPAIGN, sim_group(port), {}, launch_owner(theirs))
    leave_unit(systemd_host, mark, "sleep", "600")
    wait_until(lambda: unit_state(systemd_host)["ActiveState"] == "active", 20, "active")
    before = unit_state(systemd_host)["MainPID"]
    notes: list[str] = []
    svc = unit_service(systemd_host, tmp_path, port, notes, str(tmp_path / "mine" / CAMPAIGN))
    try:
        with pytest.raises(ServiceError) as info:
            await svc.start()
        text = str(info.value)
        assert (
            f"{GID}: {UNIT} on sdns belongs to another campaign still running (results "
            f"{theirs}, pid {os.getpid()}): not taken over or stopped"
        ) in text, text
        assert not svc.alive() and not svc.adopted
        time.sleep(0.3)
        state = unit_state(systemd_host)
        assert state["ActiveState"] == "active" and state["MainPID"] == before
        assert state["Description"] == mark
        assert not any("stopped" in n or "took over" in n for n in notes), notes
    finally:
        await svc.stop(grace_s=2)
        await svc.ssh.close()


async def test_systemd_a_leftover_unit_failing_its_health_check_is_replaced(
    systemd_host: SystemdHost,  # noqa: F811
    tmp_path: Path,
    unit_cleanup: None,
) -> None:
    """A crashed run of these results left the group's unit, marked as what the group
    starts, holding the port but answering 404 to its health check: the unit is stopped
    (its process gone, the port free) and a new one serves."""
    port = free_port()
    results = str(tmp_path / "res")
    mark = launch_mark(CAMPAIGN, sim_group(port), {}, launch_owner(results))
    leave_unit(
        systemd_host, mark, sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"
    )
    wait_until(lambda: unit_state(systemd_host)["ActiveState"] == "active", 20, "active")
    sick = int(unit_state(systemd_host)["MainPID"])
    assert sick > 0
    notes: list[str] = []
    svc = unit_service(systemd_host, tmp_path, port, notes, results)
    try:
        await svc.start()
        assert not svc.adopted
        assert len(notes) == 1, notes
        assert notes[0].startswith(
            f"{GID}: stopped {UNIT}, left running on sdns by an earlier run: it does not "
            "answer its health check (GET /health"
        ), notes
        assert notes[0].endswith("; starting a new one"), notes
        await svc.wait_ready(30)
        assert svc.alive() and svc.main_pid not in (None, sick)
        assert systemd_host.ssh(f"kill -0 {sick} 2>/dev/null || echo gone", check=False) == (
            "gone\n"
        )
        state = unit_state(systemd_host)
        assert state["ActiveState"] == "active" and state["Description"] == svc.mark
    finally:
        await svc.stop(grace_s=5)
        await svc.ssh.close()


async def test_process_two_campaigns_in_one_workdir_keep_their_own_files(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Two campaigns of other names run the same group id on one host and one workdir: each
    server has its own pid file and log, both start, and stopping one leaves the other. The
    pid file was named by the group alone: one campaign lost its group, told to use another
    campaign name, which it already had."""
    notes: list[str] = []
    svcs = []
    for name in ("alpha", "beta"):
        svc = RemoteProcessService(
            sim_group(free_port()),
            connection(sshd),
            tmp_path / "logs" / name / f"{GID}.log",
            campaign=name,
            workdir=str(tmp_path / "work"),
            cwd=str(ROOT),
            python=sys.executable,
            extra_env=sim_env(tmp_path / name),
            on_notice=lambda _level, text: notes.append(text),
            results=str(tmp_path / "res" / name),
        )
        svcs.append(svc)
    try:
        for svc in svcs:
            await svc.start()
        for svc in svcs:
            await svc.wait_ready()
        pids = [int((tmp_path / "work" / n / f"{GID}.pid").read_text()) for n in ("alpha", "beta")]
        assert pids == [svcs[0].pid, svcs[1].pid] and pids[0] != pids[1]
        assert (tmp_path / "work" / "alpha" / "logs" / f"{GID}.log").exists()
        assert (tmp_path / "work" / "beta" / "logs" / f"{GID}.log").exists()
        await svcs[0].stop(grace_s=10)
        assert not svcs[0].alive() and svcs[1].alive()
        assert not [t for t in notes if "another campaign" in t], notes
    finally:
        for svc in svcs:
            with contextlib.suppress(Exception):
                await svc.stop(grace_s=5)


async def test_process_a_pid_file_where_older_versions_kept_it_is_found_to_be_stopped(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
    strays: list[subprocess.Popen[bytes]],
) -> None:
    """Before each campaign had its folder, pid files lay in the workdir itself: a server a
    crashed older run left there is still found (its mark says whose), and marked as one
    its group's start cannot take over (that start looks in the campaign's folder)."""
    work = tmp_path / "work"
    work.mkdir()
    port = free_port()
    mark = launch_mark(CAMPAIGN, sim_group(port), sim_env(tmp_path), launch_owner("gone"))
    pid_file = work / f"{GID}.pid"
    older = spawn(
        ["sh", "-c", WRAPPER, mark, str(pid_file), str(work / f"{GID}.exit"), "sleep", "600"],
        work,
    )
    strays.append(older)
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), 10, "the pid file")
    ssh = connection(sshd)
    try:
        found = await find_leftovers(
            ssh, services="process", campaign=CAMPAIGN, workdir=str(work), group_ids={GID}
        )
        assert [(lo.group, lo.pid, lo.adoptable) for lo in found] == [(GID, older.pid, False)]
        other = await find_leftovers(
            ssh, services="process", campaign="another", workdir=str(work), group_ids={GID}
        )
        assert other == []  # its mark names this campaign: never another's to stop
    finally:
        await ssh.close()

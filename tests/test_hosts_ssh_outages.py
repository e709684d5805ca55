"""SSH hosts that survive, over a real OpenSSH server on 127.0.0.1 (``services = "process"``):
sshd killed (sessions and all) mid-cell, mid-stop and mid-start and started again on the same
port and key; a reply lost during a start (the session's sshd killed from the far side while
the start command runs); this tool killed -9 mid-campaign and the campaign resumed. Each
scenario prints its cells done/failed and the servers left running on the host: the goal is
every cell done and none left. The systemd counterparts are in test_hosts_systemd_outages.py.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
from sshd_fixture import Sshd, killable_sshd  # noqa: F401 (the fixture)
from support.link_faults import (
    FOREIGN,
    FOREIGN_MARK_HASH,
    NOTHING,
    arm_drop,
    arm_foreign,
    arm_nothing,
    drop_fired,
    fired,
)
from support.ssh_scenarios import (
    HeadlessRun,
    Outage,
    PlanValues,
    check_outage_outcome,
    crash_and_resume,
    events_of,
    kill_pids,
    ride_out,
    servers_left,
    tally,
)

from specbench_tui.hosts.backends.ssh.remote_process import WRAPPER
from specbench_tui.hosts.backends.ssh.remote_service import launch_mark
from specbench_tui.plan.expand import expand
from specbench_tui.plan.loader import load_plan

pytestmark = pytest.mark.system

GROUPS = ("box.ar.tp1", "box.dflash.tp1")
# Cells of a few seconds and servers that take 3 s to stop, so each phase can be hit.
SLOW = ["--sim-fault", "slow:60", "--sim-fault", "slow-stop:3"]


def plan_values(tmp_path: Path, name: str) -> PlanValues:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    return PlanValues(
        name=name,
        alias="sbtest",
        services="process",
        workdir=str(tmp_path / "remote"),
        model=str(model),
        args=SLOW,
        tp=[1],
        samples=2,
        max_tokens=[48],
    )


@pytest.mark.parametrize(("phase", "seconds"), [("cell", 5), ("stop", 20), ("start", 5)])
def test_sshd_killed_and_back(
    killable_sshd: Sshd,  # noqa: F811
    tmp_path: Path,
    phase: str,
    seconds: float,
) -> None:
    values = plan_values(tmp_path, f"out-{phase}")
    run = HeadlessRun(
        values.write(tmp_path / "plan.toml"), tmp_path / "res", killable_sshd.config, values.name
    )
    outage = Outage(killable_sshd.kill, killable_sshd.start)
    try:
        ride_out(run, outage, phase, seconds, GROUPS)
        code = run.wait(300)
        done, failed, left = tally(
            run.root, f"process, sshd killed mid-{phase} for {seconds}s", values.model
        )
        assert code == 0, run.output()
        check_outage_outcome(events_of(run.root), phase)
        assert (done, failed, left) == (2, 0, 0)
    finally:
        kill_pids(servers_left(values.model))


def test_reply_lost_during_a_start(killable_sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    """The first start's reply never arrives (its session's sshd dies as the start ends): the
    server it started is followed, not started twice, and the campaign goes on."""
    values = plan_values(tmp_path, "lost-reply")
    arm_drop(killable_sshd.root)
    run = HeadlessRun(
        values.write(tmp_path / "plan.toml"), tmp_path / "res", killable_sshd.config, values.name
    )
    try:
        code = run.wait(300)
        done, failed, left = tally(run.root, "process, reply lost during a start", values.model)
        assert code == 0, run.output()
        assert drop_fired(killable_sshd.root)
        events = events_of(run.root)
        notes = [e["text"] for e in events if e["event"] == "notice"]
        assert any(
            f"{GROUPS[0]}: the link to sbtest dropped during the start; the server it started runs"
            in n
            for n in notes
        ), notes
        log = (run.root / "logs" / f"{GROUPS[0]}.log").read_text()
        assert log.count("starting box.ar.tp1") == 1 and "the reply to the start was lost" in log
        assert not [e for e in events if e["event"] == "service_failed"]
        assert (done, failed, left) == (2, 0, 0)
    finally:
        kill_pids(servers_left(values.model))


def test_reply_lost_before_the_start_happened(killable_sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    """The first start's link drops before anything was started: the pid file says nothing
    came up, so it is started again, once, and the campaign goes on."""
    values = plan_values(tmp_path, "never-started")
    arm_nothing(killable_sshd.root)
    run = HeadlessRun(
        values.write(tmp_path / "plan.toml"), tmp_path / "res", killable_sshd.config, values.name
    )
    try:
        code = run.wait(300)
        done, failed, left = tally(run.root, "process, start never happened", values.model)
        assert code == 0, run.output()
        assert fired(killable_sshd.root, NOTHING)
        events = events_of(run.root)
        notes = [e["text"] for e in events if e["event"] == "notice"]
        assert any(
            f"{GROUPS[0]}: the link to sbtest dropped during the start and no server came up; "
            "starting it again" in n
            for n in notes
        ), notes
        log = (run.root / "logs" / f"{GROUPS[0]}.log").read_text()
        assert "the reply to the start was lost and no server runs" in log
        assert log.count("starting box.ar.tp1") == 2  # the lost one, then the one that ran
        assert not [e for e in events if e["event"] == "service_failed"]
        assert (done, failed, left) == (2, 0, 0)
    finally:
        kill_pids(servers_left(values.model))


def test_reply_lost_and_the_server_found_is_not_ours(killable_sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    """The first start's reply is lost and the group's pid file names a server under another
    launch mark (another command line): it is stopped, not followed, and ours is started."""
    values = plan_values(tmp_path, "not-ours")
    arm_foreign(killable_sshd.root)
    arm_drop(killable_sshd.root)
    run = HeadlessRun(
        values.write(tmp_path / "plan.toml"), tmp_path / "res", killable_sshd.config, values.name
    )
    try:
        code = run.wait(300)
        done, failed, left = tally(run.root, "process, found a server not ours", values.model)
        assert code == 0, run.output()
        assert fired(killable_sshd.root, FOREIGN) and drop_fired(killable_sshd.root)
        log = (run.root / "logs" / f"{GROUPS[0]}.log").read_text()
        stopped = [ln for ln in log.splitlines() if "----- stopping pid" in ln]
        assert len(stopped) == 1 and f":{FOREIGN_MARK_HASH})" in stopped[0], log
        assert log.count("starting box.ar.tp1") == 2
        events = events_of(run.root)
        notes = [e["text"] for e in events if e["event"] == "notice"]
        assert not any("following it" in n for n in notes), notes  # never followed
        assert [e["group"] for e in events if e["event"] == "service_ready"] == list(GROUPS)
        assert (done, failed, left) == (2, 0, 0)
    finally:
        kill_pids(servers_left(values.model))


def test_a_leftover_that_fails_its_health_check_is_replaced(
    killable_sshd: Sshd,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A crashed run of these results left the group's server running, exactly what the plan
    starts (its launch mark says so) but no longer answering: it is stopped, not taken over,
    and a new one runs the cells."""
    values = plan_values(tmp_path, "sick-leftover")
    plan = values.write(tmp_path / "plan.toml")
    group = next(g for g in expand(load_plan(plan)).groups if g.id == GROUPS[0])
    workdir = Path(values.workdir) / values.name  # the campaign's folder of the workdir
    workdir.mkdir(parents=True)
    # The leftover as a crashed run leaves it: the wrapper under the group's mark, its pid
    # file, but a server that never answers (it sleeps).
    sick = subprocess.Popen(
        [
            "setsid", "sh", "-c", WRAPPER, launch_mark(values.name, group, {}),
            str(workdir / f"{group.id}.pid"), str(workdir / f"{group.id}.exit"),
            "sleep", "600",
        ],
        cwd=workdir,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not (workdir / f"{group.id}.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        run = HeadlessRun(plan, tmp_path / "res", killable_sshd.config, values.name)
        code = run.wait(300)
        done, failed, left = tally(run.root, "process, leftover fails its health", values.model)
        assert code == 0, run.output()
        assert sick.wait(timeout=30) is not None  # stopped, not left behind
        notes = [e["text"] for e in events_of(run.root) if e["event"] == "notice"]
        assert any(
            f"{GROUPS[0]}: stopped its server left running on sbtest by an earlier run "
            f"(pid {sick.pid}): it does not answer its health check"
            in n
            and "starting a new one" in n
            for n in notes
        ), notes
        assert not any("took over" in n for n in notes), notes
        assert (done, failed, left) == (2, 0, 0)
    finally:
        if sick.poll() is None:
            sick.kill()
        kill_pids(servers_left(values.model))


def test_cleanup_stops_what_a_killed_run_left_on_the_host(
    killable_sshd: Sshd,  # noqa: F811
    tmp_path: Path,
) -> None:
    """kill -9 of this tool mid-cell leaves its server running on the host; ``--cleanup DIR``
    (no plan, no resume) finds it on record in the results and stops it, naming each
    process; the record goes with it, and a second cleanup finds nothing."""
    values = plan_values(tmp_path, "cleanup")
    run = HeadlessRun(
        values.write(tmp_path / "plan.toml"), tmp_path / "res", killable_sshd.config, values.name
    )
    try:
        run.wait_event("cell_started", group=GROUPS[0])
        run.kill9()
        left = servers_left(values.model)
        assert left, "the server died with the tool: nothing to clean up"
        (record,) = (run.root / "servers").glob(f"{GROUPS[0]}.ssh.json")
        cmd = [sys.executable, "-m", "specbench_tui", "--cleanup", str(run.root)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        said = [ln for ln in proc.stderr.splitlines() if "left running on sbtest" in ln]
        assert len(said) == 1 and f"stopped {GROUPS[0]}'s server" in said[0], proc.stderr
        for pid in left:
            assert f"(pid {pid})" in said[0], (said, left)
        deadline = time.monotonic() + 10
        while servers_left(values.model) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert servers_left(values.model) == []
        assert not record.exists()
        again = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert again.returncode == 0 and "0 processes stopped" in again.stderr
    finally:
        kill_pids(servers_left(values.model))


def test_tool_killed_and_resumed(killable_sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    values = plan_values(tmp_path, "crash")
    try:
        crash_and_resume(
            values,
            tmp_path / "plan.toml",
            tmp_path / "res",
            killable_sshd.config,
            GROUPS,
            "process",
        )
    finally:
        kill_pids(servers_left(values.model))


def test_host_away_past_its_reconnect_timeout_fails_its_cells_then_resumes(
    killable_sshd: Sshd,  # noqa: F811
    tmp_path: Path,
) -> None:
    """sshd dies mid-cell and stays away past the plan's reconnect_timeout (5 s): the cells
    fail with the reason, the server it could not stop is left there; once the host is back,
    --rerun-failed takes that server over and finishes with none left."""
    values = plan_values(tmp_path, "away")
    values.reconnect_timeout = "5s"
    plan = values.write(tmp_path / "plan.toml")
    run = HeadlessRun(plan, tmp_path / "res", killable_sshd.config, values.name)
    try:
        run.wait_event("cell_started", group=GROUPS[0])
        killable_sshd.kill()
        code = run.wait(300)
        killable_sshd.start()
        done, failed, left = tally(
            run.root, "process, host away past reconnect_timeout", values.model, settle=False
        )
        assert code == 1, run.output()
        events = run.events()
        assert [e["state"] for e in events if e["event"] == "host_state"][:2] == [
            "reconnecting",
            "unreachable",
        ]
        reasons = {e["group"]: e["reason"] for e in events if e["event"] == "cell_failed"}
        assert reasons[GROUPS[0]].startswith("host unreachable: sbtest (127.0.0.1 port ")
        assert "unreachable for 5.0s (connection refused" in reasons[GROUPS[0]]
        assert "still unreachable" in reasons[GROUPS[1]]
        assert (done, failed, left) == (0, 2, 1)
        run = HeadlessRun(
            plan, tmp_path / "res", killable_sshd.config, values.name, "--rerun-failed"
        )
        code = run.wait(300)
        done, failed, left = tally(run.root, "process, host back, --rerun-failed", values.model)
        assert code == 0, run.output()
        notes = [e["text"] for e in run.events() if e["event"] == "notice"]
        assert any(n.startswith(f"{GROUPS[0]}: took over") for n in notes), notes
        assert (done, failed, left) == (2, 0, 0)
    finally:
        kill_pids(servers_left(values.model))


@pytest.mark.timing
def test_abort_while_the_host_is_away_does_not_wait_for_it(
    killable_sshd: Sshd,  # noqa: F811
    tmp_path: Path,
) -> None:
    """SIGINT while sshd is down (reconnect_timeout 2 minutes): the campaign ends within
    seconds, leaving the server it cannot reach; once the host is back, the next run takes
    that server over and finishes with none left."""
    values = plan_values(tmp_path, "abort-away")
    plan = values.write(tmp_path / "plan.toml")
    run = HeadlessRun(plan, tmp_path / "res", killable_sshd.config, values.name)
    try:
        run.wait_event("cell_started", group=GROUPS[0])
        killable_sshd.kill()
        run.wait_event("host_state", state="reconnecting")
        t0 = time.monotonic()
        run.proc.send_signal(signal.SIGINT)
        code = run.wait(120)
        ended_s = time.monotonic() - t0
        print(f"\n[SIGINT] with the host away: exit after {ended_s:.1f}s")
        killable_sshd.start()
        done, failed, left = tally(
            run.root, "process, SIGINT while the host is away", values.model, settle=False
        )
        assert code == 130, run.output()
        assert ended_s < 30, f"the abort waited {ended_s:.0f}s for the host"
        assert (done, failed, left) == (0, 0, 1)
        notes = [e["text"] for e in run.events() if e["event"] == "notice"]
        assert any("the host is away; its servers are left as they are" in n for n in notes)
        run = HeadlessRun(plan, tmp_path / "res", killable_sshd.config, values.name)
        code = run.wait(300)
        done, failed, left = tally(run.root, "process, host back, resumed", values.model)
        assert code == 0, run.output()
        assert (done, failed, left) == (2, 0, 0)
    finally:
        kill_pids(servers_left(values.model))


def test_server_that_died_while_the_host_was_away_is_restarted(
    killable_sshd: Sshd,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The host comes back but its server did not survive the outage (a reboot would do
    that): its state is read again, the group restarts it, and the set-aside cell runs."""
    values = plan_values(tmp_path, "died-away")
    run = HeadlessRun(
        values.write(tmp_path / "plan.toml"), tmp_path / "res", killable_sshd.config, values.name
    )
    try:
        run.wait_event("cell_started", group=GROUPS[0])
        killable_sshd.kill()
        run.wait_event("host_state", state="reconnecting")
        kill_pids(servers_left(values.model))
        time.sleep(2.0)
        killable_sshd.start()
        code = run.wait(300)
        done, failed, left = tally(
            run.root, "process, server died while the host was away", values.model
        )
        assert code == 0, run.output()
        events = run.events()
        notes = [e["text"] for e in events if e["event"] == "notice"]
        assert any(
            n.startswith(f"{GROUPS[0]}: server died") and "restarting it" in n for n in notes
        ), notes
        assert [e["by"] for e in events if e["event"] == "cell_queued"] == ["host unreachable"]
        assert (done, failed, left) == (2, 0, 0)
    finally:
        kill_pids(servers_left(values.model))

"""SSH hosts that survive, with servers as transient units of a real systemd 252 (PID 1 of a
private namespace, tests/support/systemd_host.py): its sshd killed (sessions and all) mid-cell,
mid-stop and mid-start and started again after 20, 5 and 60 s; a reply lost during
``systemd-run``; this tool killed -9 mid-campaign and resumed (units found by campaign and
group); abort during a request of minutes. Each scenario prints its cells done/failed and the
servers left running on the host: the goal is every cell done and none left."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
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
from support.systemd_host import SystemdHost, systemd_host  # noqa: F401 (the fixture)

pytestmark = pytest.mark.system

GROUPS = ("box.ar.tp1", "box.dflash.tp1")
SLOW = ["--sim-fault", "slow:60", "--sim-fault", "slow-stop:3"]


@pytest.fixture
def host(systemd_host: SystemdHost) -> Iterator[SystemdHost]:  # noqa: F811
    """The shared systemd host, left as found: its sshd running, no unit of ours active."""
    try:
        yield systemd_host
    finally:
        systemd_host.start_sshd()
        for unit in systemd_host.active_units():
            systemd_host.ssh(f"systemctl stop {unit}", check=False)


def plan_values(host: SystemdHost, tmp_path: Path, name: str) -> PlanValues:
    model = host.root / f"model-{name}"
    model.mkdir(exist_ok=True)
    return PlanValues(
        name=name,
        alias="sdns-sim",
        services="systemd",
        workdir=str(host.root / f"work-{name}"),
        model=str(model),
        args=SLOW,
        env={"SPECBENCH_SIM_STATE": str(host.simgpu), "SPECBENCH_SIM_GPUS": "4"},
        tp=[1],
        samples=2,
        max_tokens=[48],
    )


def units_of(host: SystemdHost, name: str) -> list[str]:
    return host.active_units(f"specbench-{name}-*")


@pytest.mark.parametrize(("phase", "seconds"), [("cell", 20), ("stop", 5), ("start", 60)])
def test_sshd_killed_and_back(
    host: SystemdHost, tmp_path: Path, phase: str, seconds: float
) -> None:
    values = plan_values(host, tmp_path, f"sd-out-{phase}")
    run = HeadlessRun(
        values.write(tmp_path / "plan.toml"), tmp_path / "res", host.config, values.name
    )
    try:
        ride_out(run, Outage(host.kill_sshd, host.start_sshd), phase, seconds, GROUPS)
        code = run.wait(400)
        done, failed, left = tally(
            run.root, f"systemd, sshd killed mid-{phase} for {seconds}s", values.model
        )
        assert code == 0, run.output()
        check_outage_outcome(events_of(run.root), phase)
        assert (done, failed, left) == (2, 0, 0)
        assert units_of(host, values.name) == []
    finally:
        kill_pids(servers_left(values.model))


def test_reply_lost_during_systemd_run(host: SystemdHost, tmp_path: Path) -> None:
    """``systemd-run`` creates the unit, then its session's sshd dies before the reply: the
    unit is followed, not started twice (which would fail on the unit name or the port)."""
    values = plan_values(host, tmp_path, "sd-lost")
    arm_drop(host.root)
    run = HeadlessRun(
        values.write(tmp_path / "plan.toml"), tmp_path / "res", host.config, values.name
    )
    try:
        code = run.wait(400)
        done, failed, left = tally(run.root, "systemd, reply lost during systemd-run", values.model)
        assert code == 0, run.output()
        assert drop_fired(host.root)
        events = events_of(run.root)
        notes = [e["text"] for e in events if e["event"] == "notice"]
        unit = f"specbench-{values.name}-{GROUPS[0]}.service"
        assert any(f"dropped during the start; {unit} runs: following it" in n for n in notes), (
            notes
        )
        log = (run.root / "logs" / f"{GROUPS[0]}.log").read_text()
        assert log.count(f"starting {GROUPS[0]} as {unit}") == 1
        assert not [e for e in events if e["event"] == "service_failed"]
        assert (done, failed, left) == (2, 0, 0)
        assert units_of(host, values.name) == []
    finally:
        (host.root / "drop-start").unlink(missing_ok=True)
        kill_pids(servers_left(values.model))


def test_reply_lost_before_systemd_run_started_anything(host: SystemdHost, tmp_path: Path) -> None:
    """The link drops before ``systemd-run`` ran: the unit's state says nothing came up, so
    the unit is started again, once."""
    values = plan_values(host, tmp_path, "sd-never")
    arm_nothing(host.root)
    run = HeadlessRun(
        values.write(tmp_path / "plan.toml"), tmp_path / "res", host.config, values.name
    )
    unit = f"specbench-{values.name}-{GROUPS[0]}.service"
    try:
        code = run.wait(400)
        done, failed, left = tally(run.root, "systemd, start never happened", values.model)
        assert code == 0, run.output()
        assert fired(host.root, NOTHING)
        notes = [e["text"] for e in events_of(run.root) if e["event"] == "notice"]
        assert any(
            f"dropped during the start and {unit} did not come up; starting it again" in n
            for n in notes
        ), notes
        log = (run.root / "logs" / f"{GROUPS[0]}.log").read_text()
        assert f"the reply to the start was lost and {unit} is not running" in log
        assert log.count(f"starting {GROUPS[0]} as {unit}") == 2
        assert (done, failed, left) == (2, 0, 0)
        assert units_of(host, values.name) == []
    finally:
        (host.root / NOTHING).unlink(missing_ok=True)
        kill_pids(servers_left(values.model))


def test_reply_lost_and_the_unit_found_is_not_ours(host: SystemdHost, tmp_path: Path) -> None:
    """``systemd-run``'s reply is lost and the unit of the group's name that runs carries
    another launch mark: it is stopped, not followed, and ours is started."""
    values = plan_values(host, tmp_path, "sd-foreign")
    arm_foreign(host.root)
    arm_drop(host.root)
    run = HeadlessRun(
        values.write(tmp_path / "plan.toml"), tmp_path / "res", host.config, values.name
    )
    unit = f"specbench-{values.name}-{GROUPS[0]}.service"
    try:
        code = run.wait(400)
        done, failed, left = tally(run.root, "systemd, the unit found is not ours", values.model)
        assert code == 0, run.output()
        assert fired(host.root, FOREIGN) and drop_fired(host.root)
        notes = [e["text"] for e in events_of(run.root) if e["event"] == "notice"]
        assert not any(f"{unit} runs: following it" in n for n in notes), notes
        log = (run.root / "logs" / f"{GROUPS[0]}.log").read_text()
        assert f"----- stopping {unit}" in log
        assert log.count(f"starting {GROUPS[0]} as {unit}") == 2
        assert FOREIGN_MARK_HASH not in " ".join(notes)  # ours ran: no one took its place
        assert (done, failed, left) == (2, 0, 0)
        assert units_of(host, values.name) == []
    finally:
        for trigger in (FOREIGN, "drop-start"):
            (host.root / trigger).unlink(missing_ok=True)
        kill_pids(servers_left(values.model))


def test_tool_killed_and_resumed(host: SystemdHost, tmp_path: Path) -> None:
    values = plan_values(host, tmp_path, "sd-crash")
    try:
        crash_and_resume(
            values, tmp_path / "plan.toml", tmp_path / "res", host.config, GROUPS, "systemd"
        )
        assert units_of(host, values.name) == []
    finally:
        kill_pids(servers_left(values.model))


@pytest.mark.timing
def test_sigterm_cancels_a_request_of_minutes(host: SystemdHost, tmp_path: Path) -> None:
    values = plan_values(host, tmp_path, "sd-abort")
    values.args = ["--sim-fault", "slow:300"]
    values.max_tokens = [4096]
    run = HeadlessRun(
        values.write(tmp_path / "plan.toml"), tmp_path / "res", host.config, values.name
    )
    try:
        run.wait_event("cell_started")
        time.sleep(2.0)
        t0 = time.monotonic()
        run.proc.send_signal(signal.SIGTERM)
        run.wait_event("cell_queued", timeout_s=60)
        cancelled_s = time.monotonic() - t0
        code = run.wait(120)
        print(
            f"\n[SIGTERM] request in flight cancelled after {cancelled_s:.2f}s, "
            f"exit after {time.monotonic() - t0:.2f}s"
        )
        done, failed, left = tally(
            run.root, "systemd, SIGTERM during a request of minutes", values.model
        )
        assert code == 130 and cancelled_s < 15.0  # a request of minutes; room for load 10
        assert (done, failed, left) == (0, 0, 0)
        assert units_of(host, values.name) == []
    finally:
        kill_pids(servers_left(values.model))

"""The console attached to a real campaign on an SSH host whose link drops: a real OpenSSH
server on 127.0.0.1 is killed while a cell runs and started again, and the console, attached
through the campaign's control socket, shows the host away (health line, tree mark, a toast)
and then back, from the engine's own ``host_state`` events."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from sshd_fixture import Sshd, killable_sshd  # noqa: F401 (the fixture)
from support.ssh_scenarios import HeadlessRun, PlanValues, kill_pids, servers_left
from textual.pilot import Pilot

from specbench_tui.engine.control_socket import attach_control
from specbench_tui.tui.app import ConsoleApp
from specbench_tui.tui.plan_tree import NodeRef, PlanTree

pytestmark = pytest.mark.slow


async def _until(pilot: Pilot[int], what: str, ok, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not ok():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await pilot.pause(0.1)


def test_console_shows_a_real_ssh_host_away_and_back(
    killable_sshd: Sshd,  # noqa: F811
    tmp_path: Path,
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    values = PlanValues(
        name="tui-away",
        alias="sbtest",
        services="process",
        workdir=str(tmp_path / "remote"),
        model=str(model),
        args=["--sim-fault", "slow:60"],  # cells of a few seconds: the drop lands in one
        tp=[1],
        samples=2,
        max_tokens=[48],
    )
    run = HeadlessRun(
        values.write(tmp_path / "plan.toml"), tmp_path / "res", killable_sshd.config, values.name
    )
    try:
        run.wait_event("cell_started", group="box.ar.tp1")
        asyncio.run(_watch_the_outage(run, killable_sshd))
        assert run.wait(300) == 0, run.output()
    finally:
        kill_pids(servers_left(values.model))


async def _watch_the_outage(run: HeadlessRun, sshd: Sshd) -> None:
    app = ConsoleApp(attach_control(run.root), results_source=None)
    async with app.run_test(size=(120, 40)) as pilot:
        await _until(pilot, "the replay", lambda: app.progress.runs == 1 and app.frames > 0)
        health = app.main.query_one("#health-text")
        host = lambda: str(  # noqa: E731
            app.main.query_one(PlanTree).nodes_by_ref[NodeRef("host", "box")].label
        )
        assert "⚠" not in str(health.render()) and "⚠" not in host()
        sshd.kill()
        try:
            await _until(pilot, "the host away", lambda: "box ⚠ reconnecting" in host())
            shown = str(health.render())
            assert "box ⚠ reconnecting: " in shown, shown
            await pilot.pause(1.5)  # the toast's burst is held a moment
            shown = [f"{n.title}: {n.message}" for n in app._notifications]
            assert any("host away" in n for n in shown), shown
        finally:
            sshd.start()
        await _until(pilot, "the host back", lambda: "⚠" not in host(), timeout_s=120)
        assert "⚠" not in str(health.render())
        await _until(
            pilot,
            "the toast saying it is back",
            lambda: any(n.title == "host back" for n in app._notifications),
            timeout_s=15,
        )
        await pilot.press("q")  # attached: leaving changes nothing for the campaign

"""The console on real campaigns. An SSH host whose link drops: a real OpenSSH server on
127.0.0.1 is killed while a cell runs and started again, and the console, attached through
the campaign's control socket, shows the host away (health line, tree mark, a toast) and then
back, from the engine's own ``host_state`` events. Groups as parallel batch jobs on a real
Slurm cluster: the console shows every group running at once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from slurm_fixture import clean_slurm, slurm  # noqa: F401 (the fixtures)
from sshd_fixture import Sshd, killable_sshd, sshd  # noqa: F401 (the fixtures)
from support.slurm_cluster import SlurmCluster
from support.ssh_scenarios import HeadlessRun, PlanValues, kill_pids, servers_left
from test_slurm_campaign import coordinator, finish, write_plan
from textual.pilot import Pilot

from specbench_tui.engine.control_socket import attach_control
from specbench_tui.results.events import Event
from specbench_tui.results.files import read_events
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.progress import CampaignProgress
from specbench_tui.tui.app import ConsoleApp
from specbench_tui.tui.plan_tree import NodeRef, PlanTree
from tests.support.scripted import ScriptedControl

pytestmark = [pytest.mark.console, pytest.mark.system]


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


async def _watch_the_outage(run: HeadlessRun, server: Sshd) -> None:
    app = ConsoleApp(attach_control(run.root), results_source=None)
    async with app.run_test(size=(120, 40)) as pilot:
        await _until(pilot, "the replay", lambda: app.progress.runs == 1 and app.frames > 0)
        health = app.main.query_one("#health-text")
        host = lambda: str(  # noqa: E731
            app.main.query_one(PlanTree).nodes_by_ref[NodeRef("host", "box")].label
        )
        assert "⚠" not in str(health.render()) and "⚠" not in host()
        server.kill()
        try:
            await _until(pilot, "the host away", lambda: "box ⚠ reconnecting" in host())
            shown = str(health.render())
            assert "box ⚠ reconnecting: " in shown, shown
            await pilot.pause(1.5)  # the toast's burst is held a moment
            shown = [f"{n.title}: {n.message}" for n in app._notifications]
            assert any("host away" in n for n in shown), shown
        finally:
            server.start()
        await _until(pilot, "the host back", lambda: "⚠" not in host(), timeout_s=120)
        assert "⚠" not in str(health.render())
        await _until(
            pilot,
            "the toast saying it is back",
            lambda: any(n.title == "host back" for n in app._notifications),
            timeout_s=15,
        )
        await pilot.press("q")  # attached: leaving changes nothing for the campaign


def test_parallel_slurm_jobs_show_as_several_running_groups(
    tmp_path: Path,
    clean_slurm: SlurmCluster,  # noqa: F811
    sshd: Sshd,  # noqa: F811
) -> None:
    """Groups as batch jobs on a real Slurm cluster, several at once: the campaign's own log,
    played up to the moment most of them ran, gives the console a line per running group
    (with the node its job got) and a running mark on each of their tree nodes."""
    # Two groups slow enough (simulated time at 5x) that their jobs' events, which the
    # coordinator folds in as it fetches them, interleave in the campaign's log.
    plan = write_plan(tmp_path, clean_slurm, configs='["ar", "dflash"]', tps="[1]", speed=5)
    code, out = finish(coordinator(plan, tmp_path / "results", sshd))
    assert code == 0, out[-6000:]
    evs = list(read_events(ResultsLayout(tmp_path / "results" / "onslurm").events))
    p = CampaignProgress()
    most, upto = 0, 0
    for i, ev in enumerate(evs):
        p.apply(ev)
        if len(p.running_groups) > most:
            most, upto = len(p.running_groups), i + 1
    assert most >= 2, "no two jobs ran at the same time"
    asyncio.run(_show_the_moment(evs[:upto], most, clean_slurm.node))


async def _show_the_moment(evs: list[Event], most: int, node: str) -> None:
    frozen = evs[-1].ts + 1.0
    app = ConsoleApp(ScriptedControl(evs), clock=lambda: frozen, results_source=None)
    async with app.run_test(size=(120, 40)) as pilot:
        await _until(pilot, "the replay", lambda: app.frames > 0 and not len(app.inbox))
        await pilot.pause(0.2)
        running = list(app.progress.running_groups)
        assert len(running) == most
        text = str(app.main.query_one("#health-text").render())
        lines = [line for line in text.splitlines() if " TP" in line]
        assert len(lines) == most, text
        for gid, line in zip(running, lines, strict=True):
            g = app.progress.groups[gid]
            job = app.progress.jobs.get(gid)  # squeue may not have said RUNNING yet
            where = f"{node}:{g.port}" if job is not None and job.node else f" :{g.port}"
            assert f"{g.config} TP{g.tp}" in line and where in line, (gid, line)
            label = str(app.main.query_one(PlanTree).nodes_by_ref[NodeRef("group", gid)].label)
            assert label.startswith("▶"), label

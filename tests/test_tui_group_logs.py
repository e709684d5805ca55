"""The log pane and the plots follow the selection in a packed, several-host campaign: each
group's log is its own, the pane's title says whose it is and whether it still runs, n cycles
through the running groups, and the plots draw one labelled series per running group."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Log

from specbench_tui.results.events import (
    CellFinished,
    CellStarted,
    GroupFinished,
    LogLine,
    RequestDone,
)
from specbench_tui.tui.app import ConsoleApp
from specbench_tui.tui.group_logs import GroupLogs, stored_log_tail
from specbench_tui.tui.log_pane import LogPane
from specbench_tui.tui.plan_tree import NodeRef, PlanTree
from specbench_tui.tui.plots import LivePlot
from specbench_tui.tui.screens import ConfirmScreen
from tests.conftest import MINIMAL_PLAN
from tests.support.console_pilot import frozen_app, settle
from tests.support.scripted import T0, ScriptedControl, packed_campaign

pytestmark = pytest.mark.console

SIZE = (160, 48)
RUNNING = ("h100.ar.tp8", "sim.dflash.tp1", "sim.ddtree-16.tp1", "sim.ddtree-16.tp4")


def make_app() -> tuple[ConsoleApp, ScriptedControl]:
    return frozen_app(packed_campaign())


def log_text(app: ConsoleApp) -> list[str]:
    return list(app.main.query_one("#log", Log).lines)


def title(app: ConsoleApp) -> str:
    return str(app.main.query_one(LogPane).border_title)


async def select(pilot: Pilot[int], app: ConsoleApp, ref: NodeRef) -> None:
    app.follow = False
    app.main.query_one(PlanTree).reveal(ref)
    await settle(pilot, app)


async def test_each_group_shows_its_own_log_and_series() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        for gid in RUNNING:  # every group writes at once, as packed servers do
            control.publish(LogLine(group=gid, line=f"line of {gid}"))
            control.publish(
                RequestDone(
                    cell_id=app.progress.groups[gid].cells[0],
                    group=gid,
                    ttft_s=0.05,
                    e2e_s=1.0,
                    output_tokens=64,
                    output_tok_s=100.0,
                )
            )
        await settle(pilot, app)
        assert app.main.query_one("#plots").display
        for gid in RUNNING:
            await select(pilot, app, NodeRef("group", gid))
            lines = log_text(app)
            assert lines[-1] == f"line of {gid}"
            assert not any(
                f"line of {other}" in x for x in lines for other in RUNNING if other != gid
            )
            assert title(app).startswith(f"Log · {gid} · running")
            assert "of 4 running (n: next)" in title(app)
            plot = app.main.query_one("#plot-tok_s", LivePlot)
            assert plot.drawn_groups is not None and set(plot.drawn_groups) == set(RUNNING)
            assert plot.drawn_groups[gid].startswith("▸")  # the selected group's series
        labels = app.plotted_groups()
        assert labels is not None
        assert (
            labels["h100.ar.tp8"] == "ar TP8@h100" and labels["sim.dflash.tp1"] == "dflash TP1@sim"
        )
        # a cell selects its group's log too
        cell = app.progress.groups["sim.dflash.tp1"].cells[0]
        await select(pilot, app, NodeRef("cell", cell))
        assert log_text(app)[-1] == "line of sim.dflash.tp1"


async def test_n_cycles_the_running_groups_and_an_ended_group_says_so() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        seen = []
        for _ in range(len(RUNNING)):
            await pilot.press("n")
            await settle(pilot, app)
            seen.append(app.main.query_one(LogPane).group)
        assert sorted(seen) == sorted(RUNNING) and not app.follow
        await select(pilot, app, NodeRef("group", "sim.ar.tp1"))  # finished before
        assert "Log · sim.ar.tp1 · ended (done)" in title(app)
        assert any("Decode batch" in x or "▸decode" in x for x in log_text(app))
        await select(pilot, app, NodeRef("group", "sim.dflash.tp1"))
        control.publish(GroupFinished(group="sim.dflash.tp1", status="done"))
        await settle(pilot, app)
        assert "Log · sim.dflash.tp1 · ended (done)" in title(app)  # it stopped: said


def test_group_logs_are_bounded_and_a_stored_log_is_read_from_its_end(tmp_path: Path) -> None:
    logs = GroupLogs(keep_lines=3, keep_groups=2)
    logs.add("a", ["1", "2", "3", "4"])
    assert logs.lines("a") == ["2", "3", "4"]
    logs.add("b", ["x"])
    logs.add("c", ["y"])
    assert not logs.has("a") and logs.lines("c") == ["y"]
    logs.seed("c", ["old"])
    assert logs.lines("c") == ["old", "y"]
    path = tmp_path / "g.log"
    path.write_text("".join(f"line {i}\n" for i in range(10)))
    assert stored_log_tail(path, 3) == ["line 7", "line 8", "line 9"]
    assert stored_log_tail(tmp_path / "missing.log") is None


PACKED_TWO_HOSTS = (
    MINIMAL_PLAN.replace('name = "t"', 'name = "t"\npack = true')
    .replace("speed = 50", "speed = 4")
    .replace("[server]", "[hosts.sim2]\nsim = true\ngpus = 4\nspeed = 4\n\n[server]")
    .replace("tp = [1]", 'tp = [1]\nhosts = ["sim", "sim2"]')
    .replace("max_tokens = [32]", "max_tokens = [32, 48]\nrepeats = 2")
)


@pytest.mark.system
async def test_a_real_packed_two_host_run_shows_each_groups_log_and_series(
    write_plan: Any, tmp_path: Path
) -> None:
    """Four servers at once on two simulated hosts: selecting each running group shows that
    group's own lines and title, and the plots draw a series per running group."""
    from specbench_tui.engine.campaign import Campaign, CampaignOptions
    from specbench_tui.plan.loader import load_plan
    from specbench_tui.results.layout import ResultsLayout

    plan = load_plan(write_plan(PACKED_TWO_HOSTS))
    layout = ResultsLayout.for_campaign(tmp_path, plan.spec.campaign.name)
    app = ConsoleApp(Campaign.prepare(plan, layout, CampaignOptions()), results_source=None)
    async with app.run_test(size=SIZE) as pilot:
        running: list[str] = []
        for _ in range(600):
            await pilot.pause(0.1)
            p = app.progress
            running = [g for g in p.running_groups if app.group_logs.has(g)]
            if len(running) >= 3 and any(c.requests_done for c in p.cells.values()):
                break
        assert len(running) >= 3, (list(app.progress.running_groups), app.progress.counts)
        assert {app.progress.groups[g].host for g in running} == {"sim", "sim2"}
        seen: dict[str, list[str]] = {}
        for gid in running:
            await select(pilot, app, NodeRef("group", gid))
            pane = app.main.query_one(LogPane)
            assert pane.group == gid
            assert title(app).startswith(f"Log · {gid} · running")
            kept = app.group_logs.lines(gid)
            shown = log_text(app)
            assert shown and shown[-1] in kept[-50:]
            seen[gid] = kept
            plot = app.main.query_one("#plot-tok_s", LivePlot)
            assert plot.drawn_groups is not None and gid in plot.drawn_groups
            assert plot.drawn_groups[gid].startswith("▸")
        # each group's log is its own, not one stream shown under every name
        assert len({tuple(lines) for lines in seen.values()}) == len(seen)
        await pilot.press("a", "y")
        for _ in range(300):
            await pilot.pause(0.1)
            if not app.engine_running():
                break
        await pilot.press("q")
        await pilot.pause(0.2)


async def test_following_stays_on_its_group_and_a_key_right_after_a_move_asks() -> None:
    """Packed groups start cells in turn: following stays on the group it shows while that
    group runs a cell, so a key pressed on what the operator reads acts on it; a key that
    lands right after following moved asks first, naming its target, even for one cell."""
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        shown = app.selected_ref()
        assert shown is not None and shown.kind == "cell"
        group = app.progress.cells[shown.key].group
        others = [g for g in RUNNING if g != group and g != "sim.ddtree-16.tp4"]
        for gid in others:  # another group finishes its cell and starts its next one
            cells = app.progress.groups[gid].cells
            now = next(c for c in cells if app.progress.cells[c].status == "running")
            nxt = next(c for c in cells if app.progress.cells[c].status == "pending")
            control.publish(CellFinished(cell_id=now, group=gid, cell=now, requests=8))
            control.publish(CellStarted(cell_id=nxt, group=gid, cell=nxt, requests=8))
            await settle(pilot, app)
            assert app.selected_ref() == shown  # not hopped to the group that started last
        # The followed cell ends: following moves on, and an s right then asks.
        control.publish(CellFinished(cell_id=shown.key, group=group, cell=shown.key, requests=8))
        await settle(pilot, app)
        moved = app.selected_ref()
        assert moved is not None and moved != shown
        await pilot.press("s")
        assert isinstance(app.screen, ConfirmScreen), "a one-cell skip right after a move asks"
        assert "Following moved to it a moment ago" in app.screen.question
        await pilot.press("n")
        await settle(pilot, app)
        assert not [c for c in control.commands if c.action == "skip"]
        app.followed_at = float("-inf")  # long after the move: the cell pointed at, at once
        await pilot.press("s")
        await settle(pilot, app)
        assert not isinstance(app.screen, ConfirmScreen)
        assert [(c.action, c.target) for c in control.commands if c.action == "skip"] == [
            ("skip", moved.key)
        ]


async def test_an_attached_console_shows_a_running_groups_newest_server_run(
    tmp_path: Path,
) -> None:
    """The stream an attached console replays holds only the campaign's last events: for a
    running group it may end on an earlier server's crash. The group's stored log, which
    holds every server run, is read when the group is first shown; the stream's lines from
    before that read are not shown twice, and the lines that come after it are added."""
    events = packed_campaign()
    events[0].results_dir = str(tmp_path / "packed")  # type: ignore[attr-defined]
    gid = "sim.dflash.tp1"
    crash = LogLine(group=gid, line="RuntimeError: CUDA error (the first server)", ts=T0 + 5)
    (tmp_path / "packed" / "logs").mkdir(parents=True)
    (tmp_path / "packed" / "logs" / f"{gid}.log").write_text(
        "RuntimeError: CUDA error (the first server)\n"
        "----- 2026-01-01T00:01:00Z starting sim.dflash.tp1 (restart 1)\n"
        "The server is fired up and ready to roll! (the second)\n"
        "----- 2026-01-01T00:02:00Z starting sim.dflash.tp1 (restart 2)\n"
        "The server is fired up and ready to roll! (the third)\n"
    )
    app, control = frozen_app([*events, crash])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await select(pilot, app, NodeRef("group", gid))
        assert title(app).startswith(f"Log · {gid} · running")
        assert log_text(app)[-1] == "The server is fired up and ready to roll! (the third)"
        assert sum("CUDA error" in x for x in log_text(app)) == 1
        control.publish(LogLine(group=gid, line="Decode batch (after attaching)"))
        control.publish(crash)  # a replayed line from before the read: in the file already
        await settle(pilot, app)
        assert log_text(app)[-1] == "Decode batch (after attaching)"
        assert sum("CUDA error" in x for x in log_text(app)) == 1

"""Keys that act on many cells or on a server, as an operator types them: enter then down on a
collapsed group lands on its first child even when both keys arrive in one burst (as over a
slow SSH link), and skipping many cells, restarting a server and aborting ask first, saying
what they will do."""

from __future__ import annotations

import pytest
from textual import events
from textual.pilot import Pilot

from specbench_tui.tui.app import ConsoleApp
from specbench_tui.tui.plan_tree import NodeRef, PlanTree
from specbench_tui.tui.screens import ConfirmScreen
from tests.support.console_pilot import frozen_app, settle
from tests.support.scripted import ScriptedControl, sample_campaign

pytestmark = pytest.mark.console

SIZE = (120, 40)


def make_app() -> tuple[ConsoleApp, ScriptedControl]:
    return frozen_app(sample_campaign())


async def answered(pilot: Pilot[int], app: ConsoleApp, control: ScriptedControl, n: int) -> None:
    for _ in range(200):
        if len(control.replies) >= n:
            break
        await pilot.pause(0.02)
    await settle(pilot, app)


async def burst(pilot: Pilot[int], *keys: str) -> None:
    """Keys delivered together, the way a terminal hands over typed-ahead input: each is
    queued before the console has handled the one before it."""
    driver = pilot.app._driver
    assert driver is not None
    for key in keys:
        ev = events.Key(key, None)
        ev.set_sender(pilot.app)
        driver.send_message(ev)
    await pilot.pause(0.1)


def cursor(app: ConsoleApp) -> NodeRef | None:
    node = app.main.query_one(PlanTree).cursor_node
    return node.data if node is not None else None


async def put_cursor(pilot: Pilot[int], app: ConsoleApp, ref: NodeRef) -> None:
    app.follow = False
    app.main.query_one(PlanTree).reveal(ref)
    await settle(pilot, app)
    assert cursor(app) == ref


async def test_enter_then_down_lands_on_the_first_child_and_a_group_skip_asks() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        tree = app.main.query_one(PlanTree)
        group = NodeRef("group", "sim.ar.tp1")
        await put_cursor(pilot, app, group)
        assert not tree.nodes_by_ref[group].is_expanded  # folded away while following
        await burst(pilot, "enter", "down")
        assert tree.nodes_by_ref[group].is_expanded
        assert cursor(app) == NodeRef("workload", "sim.ar.tp1/single")
        # the group that was skipped by mistake: s on it asks, with the counts
        await put_cursor(pilot, app, NodeRef("group", "sim.ddtree-16.tp1"))
        await pilot.press("s")
        assert isinstance(app.screen, ConfirmScreen)
        question = app.screen.question
        assert "Skip group sim.ddtree-16.tp1" in question
        assert "2 cells" in question and "1 running" in question and "1 not run yet" in question
        assert "2 finished" in question
        await pilot.press("n")
        await settle(pilot, app)
        assert control.commands == []
        await pilot.press("s", "y")
        await answered(pilot, app, control, 1)
        assert [(c.action, c.target) for c in control.commands] == [("skip", "sim.ddtree-16.tp1")]
        assert app.progress.cells["ddt1conc4"].status == "skipped"


async def test_skipping_one_cell_asks_nothing_and_nothing_left_is_said_here() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await put_cursor(pilot, app, NodeRef("cell", "ddt1conc4"))
        await pilot.press("s")  # one pending cell the operator pointed at: at once
        await answered(pilot, app, control, 1)
        assert not isinstance(app.screen, ConfirmScreen)
        assert app.progress.cells["ddt1conc4"].status == "skipped"
        await put_cursor(pilot, app, NodeRef("group", "sim.ar.tp1"))
        await pilot.press("s")  # every cell has ended: no question, no command
        await settle(pilot, app)
        assert not isinstance(app.screen, ConfirmScreen)
        assert len(control.commands) == 1
        assert any("nothing to skip" in n.message for n in app._notifications)


async def test_restarting_a_server_asks_and_says_it_can_take_minutes() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("g")  # the running group, followed
        assert isinstance(app.screen, ConfirmScreen)
        question = app.screen.question
        assert "Restart the server of sim.ddtree-16.tp1" in question
        assert "can take minutes on a large model" in question
        assert "1 running cell" in question
        await pilot.press("n")
        await settle(pilot, app)
        assert control.commands == []
        await pilot.press("g", "y")
        await answered(pilot, app, control, 1)
        assert [(c.action, c.target) for c in control.commands] == [
            ("retry_group", "sim.ddtree-16.tp1")
        ]


async def test_abort_says_what_it_stops_and_keeps() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("a")
        assert isinstance(app.screen, ConfirmScreen)
        question = app.screen.question
        assert "1 running cell" in question and "5 cells not run yet" in question
        assert "9 finished" in question
        await pilot.press("n")
        await settle(pilot, app)
        assert control.commands == []


async def test_a_skip_is_undone_with_u_its_cells_queued_again() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await put_cursor(pilot, app, NodeRef("group", "sim.ddtree-16.tp4"))
        await pilot.press("s")
        assert isinstance(app.screen, ConfirmScreen) and "u undoes" in app.screen.question
        await pilot.press("y")
        await answered(pilot, app, control, 1)
        tp4 = ["ddt4co64", "ddt4ma64", "ddt4agent", "ddt4conc4"]
        assert all(app.progress.cells[c].status == "skipped" for c in tp4)
        await pilot.press("u")
        await answered(pilot, app, control, 1 + len(tp4))
        # one rerun per skipped cell (a rerun of the group would re-measure its finished ones)
        assert [(c.action, c.target) for c in control.commands[1:]] == [("rerun", c) for c in tp4]
        assert all(app.progress.cells[c].status == "pending" for c in tp4)
        await pilot.press("u")  # once only
        await settle(pilot, app)
        assert len(control.commands) == 1 + len(tp4)
        assert any("no skip to undo" in n.message for n in app._notifications)

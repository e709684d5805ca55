"""The look of the console at 120x40, fixed by SVG snapshots (pytest-textual-snapshot).

Deterministic by construction: scripted events with fixed timestamps, a frozen clock (so
elapsed, uptime and ETA do not move), notifications cleared before the shot. Regenerate
after an intended change with ``pytest tests/test_tui_snapshots.py --snapshot-update`` and
look at the report before committing.
"""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot

from specbench_tui.tui.app import ConsoleApp
from specbench_tui.tui.plan_tree import NodeRef, PlanTree
from specbench_tui.tui.scripted import ScriptedControl, sample_campaign

SIZE = (120, 40)


def make_app() -> ConsoleApp:
    events = sample_campaign()
    frozen = events[-1].ts + 1.0
    return ConsoleApp(ScriptedControl(events), theme="dark", clock=lambda: frozen)


async def settle(pilot: Pilot[Any]) -> None:
    app = pilot.app
    assert isinstance(app, ConsoleApp)
    for _ in range(100):
        await pilot.pause(0.02)
        if not len(app.inbox) and app.frames:
            break
    await pilot.pause(0.1)
    app._paint()
    app._redraw_plots(force=True)
    app.clear_notifications()
    await pilot.pause(0.1)


def test_main_screen(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=SIZE, run_before=settle)


def test_help_screen(snap_compare: Any) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_failed_cell_detail(snap_compare: Any) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        app = pilot.app
        assert isinstance(app, ConsoleApp)
        await pilot.press("f")  # stop following, then walk to the failed cell
        app.query_one(PlanTree).reveal(NodeRef("cell", "dfl1conc4"), collapse_others=True)
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)

"""The look of the console at 120x40 and 80x24, fixed by SVG snapshots (pytest-textual-snapshot).

Deterministic by construction: scripted events with fixed timestamps, a frozen clock (so
elapsed, uptime and ETA do not move), a fixed results table, notifications cleared before the
shot. Regenerate after an intended change with
``pytest tests/test_tui_snapshots.py --snapshot-update`` and look at the report before
committing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from textual.pilot import Pilot

from specbench_tui.results.events import HostState
from specbench_tui.tui.app import ConsoleApp
from specbench_tui.tui.plan_tree import NodeRef, PlanTree
from specbench_tui.tui.results_source import COLUMNS
from tests.support.scripted import ScriptedControl, packed_campaign, sample_campaign

pytestmark = pytest.mark.console

SIZES = {"120x40": (120, 40), "80x24": (80, 24)}


def results(_root: Path) -> pl.DataFrame:
    """A fixed comparison table: two TP sizes, an interval, a best and a failed check."""
    base = dict(host="sim", workload="single", max_tokens=64, repeats=2)
    rows: list[dict[str, Any]] = []
    for ps in ("code", "math"):
        rows += [
            {
                **base,
                "prompt_set": ps,
                "tp": 1,
                "config": "ar",
                "baseline": True,
                "tok_s": 38.0,
                "tok_s_lo": 36.5,
                "tok_s_hi": 39.5,
                "speedup": 1.0,
            },
            {
                **base,
                "prompt_set": ps,
                "tp": 1,
                "config": "ddtree-16",
                "tok_s": 131.0,
                "tok_s_lo": 127.0,
                "tok_s_hi": 135.0,
                "speedup": 3.45,
                "speedup_lo": 3.3,
                "speedup_hi": 3.6,
                "accept": 7.9,
                "best": True,
            },
            {
                **base,
                "prompt_set": ps,
                "tp": 1,
                "config": "dflash",
                "tok_s": 95.0,
                "tok_s_lo": 90.0,
                "tok_s_hi": 100.0,
                "speedup": 2.5,
                "speedup_lo": 2.3,
                "speedup_hi": 2.7,
                "accept": 5.8,
                "failed_check": "greedy outputs differ from the baseline",
            },
        ]
    rows.append(
        {
            **base,
            "prompt_set": "code",
            "tp": 4,
            "config": "ar",
            "baseline": True,
            "tok_s": 70.0,
            "speedup": 1.0,
        }
    )
    return pl.DataFrame([{k: r.get(k) for k in COLUMNS} for r in rows], schema=COLUMNS)


def make_app(*, finish: bool = False, with_results: bool = False) -> ConsoleApp:
    events = sample_campaign(finish=finish)
    frozen = events[-1].ts + 1.0
    return ConsoleApp(
        ScriptedControl(events, close_after_replay=finish),
        theme="dark",
        clock=lambda: frozen,
        results_source=results if with_results else None,
    )


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
    # The tree scrolls to the followed cell once its lines are laid out; on a loaded machine
    # that can come after the pause above, so it is done once more, now that they are.
    tree = app.query_one("#tree")
    if getattr(tree, "_moved_to", None) is not None:
        tree._move_to(tree._moved_to)  # type: ignore[attr-defined]
    await pilot.pause(0.1)


@pytest.mark.parametrize("size", SIZES)
def test_main_screen(snap_compare: Any, size: str) -> None:
    assert snap_compare(make_app(), terminal_size=SIZES[size], run_before=settle)


@pytest.mark.parametrize("size", SIZES)
def test_help_screen(snap_compare: Any, size: str) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=SIZES[size], run_before=run_before)


def test_failed_cell_detail(snap_compare: Any) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        app = pilot.app
        assert isinstance(app, ConsoleApp)
        await pilot.press("f")  # stop following, then walk to the failed cell
        app.main.query_one(PlanTree).reveal(NodeRef("cell", "dfl1conc4"), collapse_others=True)
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=SIZES["120x40"], run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_finished_with_failures_and_results(snap_compare: Any, size: str) -> None:
    """The end of a campaign with a failed cell: the badge and bar say so; the results
    table takes the plots' place (at 80x24, 6 shows it)."""

    async def run_before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        app = pilot.app
        assert isinstance(app, ConsoleApp)
        if size == "80x24":
            await pilot.press("6")
        for _ in range(40):
            await pilot.pause(0.1)
            if app.results_computed:
                break
        await settle(pilot)

    app = make_app(finish=True, with_results=True)
    assert snap_compare(app, terminal_size=SIZES[size], run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_quit_question(snap_compare: Any, size: str) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        await pilot.press("q")
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=SIZES[size], run_before=run_before)


def test_plots_at_80x24(snap_compare: Any) -> None:
    async def run_before(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        await pilot.press("4")
        await settle(pilot)

    assert snap_compare(make_app(), terminal_size=SIZES["80x24"], run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_packed_groups_and_a_host_away(snap_compare: Any, size: str) -> None:
    """Three groups packed on the simulated host, one on an SSH host that is reconnecting:
    every server has its line, the host that is away says so in the pane and the tree."""
    events = packed_campaign()
    frozen = events[-1].ts + 1.0
    events.append(
        HostState(
            host="h100",
            state="reconnecting",
            reason="connection lost (Connection reset by peer); retrying",
            ts=events[-1].ts - 60.0,  # history: shown, but no toast (its timing would vary)
        )
    )
    app = ConsoleApp(
        ScriptedControl(events), theme="dark", clock=lambda: frozen, results_source=None
    )
    assert snap_compare(app, terminal_size=SIZES[size], run_before=settle)

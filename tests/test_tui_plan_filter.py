"""The plan tree's filter by name and status (ctrl+f): the words it takes, and the tree it
leaves on a scripted campaign, kept current as cells change status."""

from __future__ import annotations

import pytest

from specbench_tui.results.events import CellFinished, CellStarted
from specbench_tui.results.progress import CampaignProgress
from specbench_tui.tui.plan_filter import PlanFilter, PlanFilterInput
from specbench_tui.tui.plan_tree import NodeRef, PlanTree
from tests.support.console_pilot import frozen_app, settle
from tests.support.scripted import sample_campaign


def _progress() -> CampaignProgress:
    p = CampaignProgress()
    p.apply_all(sample_campaign())
    return p


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 16),
        ("ddtree", 8),
        ("ddtree tp4", 4),
        ("tp1 code", 3),
        ("failed", 1),
        ("running pending", 6),
        ("ddtree pending", 5),
        ("DFLASH failed", 1),
        ("ar", 4),  # a config's name is that config, not every name with "ar" in it
        ("ar failed", 0),
        ("linear", 4),  # dflash's label
    ],
)
def test_words_of_a_name_and_status_words(text: str, expected: int) -> None:
    p = _progress()
    f = PlanFilter(text)
    got = f.cells(p) if f.active else frozenset(p.cells)
    assert len(got) == expected, sorted(got)


def _cells_shown(tree: PlanTree) -> set[str]:
    return {ref.key for ref in tree.nodes_by_ref if ref.kind == "cell"}


@pytest.mark.console
async def test_ctrl_f_filters_the_tree_and_follows_status_changes() -> None:
    events = sample_campaign()
    app, control = frozen_app(events)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        tree = app.main.query_one(PlanTree)
        assert len(_cells_shown(tree)) == 16
        await pilot.press("ctrl+f")
        box = app.main.query_one(PlanFilterInput)
        assert box.display and app.focused is box
        await pilot.press(*"ddtree running", "enter")
        await settle(pilot, app)
        assert _cells_shown(tree) == {"ddt1agent"}
        assert app.focused is tree and "ddtree running (1)" in str(tree.border_title)
        assert NodeRef("group", "sim.ar.tp1") not in tree.nodes_by_ref  # no empty branches
        # the running cell ends and the next starts: the filtered tree follows
        t = events[-1].ts
        control.publish(CellFinished(cell_id="ddt1agent", ts=t + 0.1))
        control.publish(CellStarted(cell_id="ddt1conc4", ts=t + 0.2))
        await settle(pilot, app, 0.2)
        assert _cells_shown(tree) == {"ddt1conc4"}
        await pilot.press("ctrl+f", "escape")  # esc clears: every cell again
        await settle(pilot, app)
        assert len(_cells_shown(tree)) == 16 and not box.display
        assert str(tree.border_title) == "Plan"
        await pilot.press("ctrl+f", *"nothing-like-this", "enter")
        await settle(pilot, app)
        assert not _cells_shown(tree)
        labels = [str(n.label) for n in tree.root.children]
        assert any("no cell matches 'nothing-like-this'" in x for x in labels)


@pytest.mark.console
@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_messages_cover_no_pane_and_no_dialog(size: tuple[int, int]) -> None:
    """Notifications are said on the message line above the footer: the newest, with how
    many more are live; no toast floats over the Service & GPUs pane, the log or the help
    screen."""
    from textual.widgets._toast import Toast

    from specbench_tui.tui.messages import MessageBar
    from specbench_tui.tui.screens import HelpScreen

    app, _ = frozen_app(sample_campaign())
    async with app.run_test(size=size, notifications=True) as pilot:
        await settle(pilot, app)
        for i in range(4):
            app.notify(f"notice {i}: " + "a long message that wraps " * 4, timeout=30)
        app.notify("no GPU telemetry on sim", severity="warning", timeout=30)
        await pilot.pause(0.3)
        bar = app.main.query_one(MessageBar)
        said = str(bar.render())
        assert "no GPU telemetry on sim" in said and "(+4 more)" in said
        assert bar.has_class("-warning")
        assert not [t for t in app.screen.query(Toast) if t.region.area]  # none drawn
        panes = [w.region for w in app.main.query(".pane") if w.display]
        assert panes and all(r.y + r.height <= bar.region.y for r in panes)
        await pilot.press("question_mark")
        await settle(pilot, app)
        assert isinstance(app.screen, HelpScreen)
        assert not [t for t in app.screen.query(Toast) if t.region.area]
        app.clear_notifications()  # the line goes blank at once, not at the next tick
        assert str(bar.render()) == "" and bar.has_class("-empty")


@pytest.mark.console
async def test_the_detail_leaves_a_cell_the_filter_hides() -> None:
    """Follow off, the operator looks at an autoregressive cell, then filters to DDTree: the
    detail moves to a cell the tree still shows, never stays on one it hides."""
    app, _ = frozen_app(sample_campaign())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        await pilot.press("f")  # following off: the selection is the operator's
        tree = app.main.query_one(PlanTree)
        tree.reveal(NodeRef("cell", "ar1co64"))
        await settle(pilot, app)
        assert app._selected == NodeRef("cell", "ar1co64")
        await pilot.press("ctrl+f", *"ddtree", "enter")
        await settle(pilot, app)
        shown = _cells_shown(tree)
        assert app._selected is not None and app._selected.key in shown
        detail = str(app.main.query_one("#detail-text").render())
        assert "sim.ar.tp1" not in detail
        assert app.progress.cells[app._selected.key].name in detail

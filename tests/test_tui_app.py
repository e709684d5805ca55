"""The console driven by keys (Pilot) against a scripted campaign that records commands."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Log
from textual.widgets._footer import FooterKey

from specbench_tui.engine.commands import Command
from specbench_tui.results.events import CellStarted, LogLine, RequestDone
from specbench_tui.tui.app import ConsoleApp
from specbench_tui.tui.header import CampaignHeader
from specbench_tui.tui.log_pane import LogPane
from specbench_tui.tui.plan_tree import NodeRef, PlanTree
from specbench_tui.tui.screens import ConfirmScreen, HelpScreen
from specbench_tui.tui.themes import PACKAGE_THEMES
from tests.support.scripted import ScriptedControl, sample_campaign

pytestmark = pytest.mark.console

SIZE = (120, 40)


def make_app(
    *, finish: bool = False, theme: str | None = None, theme_dirs: list[Path] | None = None
) -> tuple[ConsoleApp, ScriptedControl]:
    events = sample_campaign(finish=finish)
    control = ScriptedControl(events, close_after_replay=finish)
    frozen = events[-1].ts + 1.0
    app = ConsoleApp(control, theme=theme, clock=lambda: frozen, theme_dirs=theme_dirs)
    return app, control


async def settle(pilot: Pilot[int], app: ConsoleApp) -> None:
    """Until every published event has been applied and the screen caught up: the inbox's
    own signal, waited for up to a minute (folding a 10,000-event flood took over the two
    seconds a fixed count of pauses gave it with two full suites side by side)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        await pilot.pause(0.02)
        if not len(app.inbox) and app.frames and app.inbox.received >= 1:
            break
    await pilot.pause(0.06)


async def answered(pilot: Pilot[int], app: ConsoleApp, control: ScriptedControl, n: int) -> None:
    """Until the control has answered ``n`` commands (the console sends from a worker) and
    the screen caught up with what the answers published."""
    for _ in range(200):
        if len(control.replies) >= n:
            break
        await pilot.pause(0.02)
    await settle(pilot, app)


def header_text(app: ConsoleApp) -> str:
    return str(app.query_one(CampaignHeader).render())


def notes(app: ConsoleApp) -> list[str]:
    return [n.message for n in app._notifications]


async def noted(pilot: Pilot[int], app: ConsoleApp, said: Callable[[str], bool]) -> bool:
    """Whether a notification that ``said`` holds shows, waited for up to 30 s: the console
    posts some from a worker or after its first frame, later than the screen settles when
    two full suites run side by side."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if any(said(n) for n in notes(app)):
            return True
        await pilot.pause(0.05)
    return False


async def footer_says(pilot: Pilot[int], app: ConsoleApp, word: str) -> bool:
    """Whether the footer's pause key reads ``word``, waited for up to 10 s (it is composed
    again after the bindings change)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        keys = [k for k in app.query(FooterKey) if k.action == "toggle_pause"]
        if keys and keys[0].description == word:
            return True
        await pilot.pause(0.05)
    return False


def commands(control: ScriptedControl) -> list[tuple[str, str | None]]:
    return [(c.action, c.target) for c in control.commands]


async def test_replay_builds_tree_and_follows_running_cell() -> None:
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        tree = app.query_one(PlanTree)
        assert sum(1 for r in tree.nodes_by_ref if r.kind == "cell") == 16
        assert tree.cursor_node is not None
        assert tree.cursor_node.data == NodeRef("cell", "ddt1agent")
        head = header_text(app)
        assert "RUNNING" in head and "✓9" in head and "✗1" in head and "/16" in head
        assert app.query_one(LogPane).group == "sim.ddtree-16.tp1"


async def test_pause_resume_and_refusal_shown() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("p")
        await settle(pilot, app)
        assert commands(control) == [("pause", None)]
        assert "PAUSED" in header_text(app)
        assert await footer_says(pilot, app, "Resume")  # p resumes now, and says so
        await pilot.press("space")  # space toggles too, even with the tree focused
        await settle(pilot, app)
        assert commands(control)[-1] == ("resume", None)
        assert "RUNNING" in header_text(app)
        assert await footer_says(pilot, app, "Pause")
        app.action_resume()  # from the palette: nothing to resume
        await answered(pilot, app, control, 3)
        assert control.replies[-1].ok is False
        assert await noted(pilot, app, lambda n: "nothing to resume" in n)


async def test_skip_running_cell() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("s")
        await settle(pilot, app)
        assert commands(control) == [("skip", "ddt1agent")]
        assert app.progress.cells["ddt1agent"].status == "skipped"
        assert "↷1" in header_text(app)


async def test_rerun_selected_failed_cell_via_keyboard() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        tree = app.query_one(PlanTree)
        await pilot.press("up")  # navigating by hand stops following
        assert not app.follow
        tree.reveal(NodeRef("cell", "dfl1conc4"))
        await settle(pilot, app)
        assert tree.cursor_node is not None
        assert tree.cursor_node.data == NodeRef("cell", "dfl1conc4")
        await pilot.press("r")
        await settle(pilot, app)
        assert commands(control) == [("rerun", "dfl1conc4")]
        assert app.progress.cells["dfl1conc4"].status == "pending"
        assert "#2" in str(tree.nodes_by_ref[NodeRef("cell", "dfl1conc4")].label)


async def test_rerun_failed_and_retry_group() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("R")
        await pilot.press("g")  # a server restart asks first
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot, app)
        assert commands(control) == [("rerun_failed", None), ("retry_group", "sim.ddtree-16.tp1")]
        assert all(r.ok for r in control.replies)
        assert await noted(pilot, app, lambda n: "queued 1 failed cell again" in n)
        assert await noted(pilot, app, lambda n: "restarting the server of sim.ddtree-16.tp1" in n)
        # The group's running cell runs again whole once its server is back.
        assert app.progress.cells["ddt1agent"].status == "pending"


async def test_abort_is_confirmed() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("a")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await settle(pilot, app)
        assert control.commands == []
        await pilot.press("a")
        await pilot.press("y")
        await settle(pilot, app)
        assert control.commands == [Command("abort", None, "console")]
        assert app.progress.finished and "ABORTED" in header_text(app)
        await pilot.press("q")  # ended: no question asked
        await pilot.pause()
    assert app.return_value == 130


async def test_quit_mid_campaign_asks_and_returns_130() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmScreen)
        assert "The campaign stops" in str(app.screen.question)
        await pilot.press("y")
        await pilot.pause()
    assert app.return_value == 130
    assert control.commands == []


async def test_finished_campaign_quits_with_its_exit_code() -> None:
    app, _ = make_app(finish=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        assert "FINISHED" in header_text(app)
        await pilot.press("q")
        await pilot.pause()
    assert app.return_value == 1


async def test_follow_toggle_and_new_cell_followed() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        tree = app.query_one(PlanTree)
        await pilot.press("f")
        assert not app.follow
        await pilot.press("f")
        assert app.follow
        await pilot.press("s")  # skip: the engine starts the next cell
        await settle(pilot, app)
        control.publish(
            CellStarted(
                cell_id="ddt1conc4",
                group="sim.ddtree-16.tp1",
                cell="sim.ddtree-16.tp1/concurrency/c4",
            )
        )
        await settle(pilot, app)
        assert tree.cursor_node is not None
        assert tree.cursor_node.data == NodeRef("cell", "ddt1conc4")


async def test_search_and_freeze_log() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        pane = app.query_one(LogPane)
        log = app.query_one("#log", Log)
        await pilot.press("slash")
        await pilot.press(*"ready")
        await pilot.press("enter")
        await settle(pilot, app)
        assert pane.query_text == "ready"
        assert log.line_count == 1 and "ready to roll" in log.lines[0]
        assert "filter 'ready'" in str(pane.border_title)
        await pilot.press("slash")
        await pilot.press("escape")
        assert pane.query_text == "" and log.line_count > 1
        await pilot.press("l")
        assert pane.frozen
        n = log.line_count
        control.publish(LogLine(group="sim.ddtree-16.tp1", line="while frozen"))
        await settle(pilot, app)
        assert log.line_count == n and "1 new" in str(pane.border_title)
        assert not app.progress.paused  # freezing the view does not pause the campaign
        await pilot.press("l")
        assert "while frozen" in log.lines[-1]


async def test_panes_toggle_and_maximize() -> None:
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        assert app.query_one("#plots").display
        await pilot.press("4")
        assert not app.query_one("#plots").display
        await pilot.press("4")
        assert app.query_one("#plots").display
        await pilot.press("z")
        assert app.screen.maximized is app.query_one(PlanTree)
        await pilot.press("z")
        assert app.screen.maximized is None
        await pilot.press("tab")
        await pilot.press("tab")
        await pilot.press("z")
        assert app.screen.maximized is app.query_one("#health")


async def test_help_screen_and_palette_cover_every_key() -> None:
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        described = {row[1] for row in app.screen.keys}
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        palette_actions = {action for _, _, action in app.palette_commands()}
        for b in app.BINDINGS:
            assert b.description in described or b.id == "app.quit_ctrl"  # type: ignore[union-attr]
            assert b.action in palette_actions or b.action == "toggle_pause"  # type: ignore[union-attr]
        assert {"pause", "resume"} <= palette_actions


async def test_theme_switch_and_cli_name() -> None:
    app, _ = make_app(theme="light")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        assert app.theme == "specbench-light"
        await pilot.press("t")
        assert app.theme != "specbench-light"
        app.action_set_theme("specbench-ansi16")
        await pilot.pause()
        assert app.theme == "specbench-ansi16"


async def test_invalid_theme_file_reported_and_default_used(tmp_path: Path) -> None:
    (tmp_path / "broken.toml").write_text('name = "x"\nprimary = "not-a-colour"\n')
    app, _ = make_app(theme="x", theme_dirs=[PACKAGE_THEMES, tmp_path])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        assert app.theme == "specbench-dark"
        assert await noted(pilot, app, lambda n: "broken.toml" in n and "primary" in n)
        assert await noted(pilot, app, lambda n: "unknown theme 'x'" in n)


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
async def test_small_and_large_terminals(size: tuple[int, int]) -> None:
    app, control = make_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot, app)
        for pane in ("tree", "detail", "health", "logpane"):
            assert app.query_one(f"#{pane}").region.area > 0, pane
        plots_shown = size[0] >= 100
        assert app.query_one("#plots").display is plots_shown
        await pilot.press("4")
        assert app.query_one("#plots").display is not plots_shown
        await pilot.press("p")
        await settle(pilot, app)
        assert commands(control) == [("pause", None)]


async def test_flood_is_coalesced() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        frames = app.frames
        for i in range(5000):
            control.publish(
                RequestDone(
                    cell_id="ddt1agent",
                    group="sim.ddtree-16.tp1",
                    output_tok_s=100.0 + i % 7,
                    ttft_s=0.05,
                    done=i,
                    total=5000,
                )
            )
            control.publish(
                LogLine(
                    group="sim.ddtree-16.tp1", line=f"line {i}", stats={"gen_throughput": 120.0}
                )
            )
        await settle(pilot, app)
        assert app.progress.cells["ddt1agent"].requests_done == 4999
        assert app.frames - frames < 50  # batches, not one frame per event
        assert app.query_one("#log", Log).lines[-1] == "line 4999"


async def test_live_campaign_runs_to_the_end() -> None:
    """Events arrive over time (not as a replay) and the stream closes at the end."""
    events = sample_campaign(finish=True)
    control = ScriptedControl()
    app = ConsoleApp(control, clock=lambda: events[-1].ts)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.1)
        for i, ev in enumerate(events):
            control.publish(ev)
            if i % 20 == 0:
                await pilot.pause(0.01)
        control.close()
        await settle(pilot, app)
        await pilot.pause(0.2)
        assert app.stream_ended and app.progress.finished
        assert "FINISHED" in header_text(app)
        assert await noted(pilot, app, lambda n: "campaign finished" in n)
        assert app.plot_draws > 0
        await pilot.press("q")
        await pilot.pause()
    assert app.return_value == 1


async def test_health_pane_says_when_a_host_has_no_gpu_telemetry() -> None:
    from specbench_tui.results.events import TelemetryChosen
    from specbench_tui.tui.health import HealthPane

    events = sample_campaign(finish=False)
    events.insert(1, TelemetryChosen(host="sim", source="none", text="no GPU telemetry", ts=0))
    control = ScriptedControl(events, close_after_replay=False)
    frozen = events[-1].ts + 1.0
    app = ConsoleApp(control, clock=lambda: frozen)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        pane = app.query_one(HealthPane)
        assert app.progress.telemetry["sim"].source == "none"
        assert "no GPU telemetry: GPUs not read" in str(pane._shown)

"""Leaving the console of a campaign it started, on real simulated campaigns in a child engine
process: detach (``d``, or Detach in the quit question) leaves the campaign running and
``--attach`` continues the same run; quit stops it and leaves at once, the child writing the
report after the console has gone; a child that fails before its campaign ran is the
command line's error."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from specbench_tui.engine.child import EngineProcess, OwnedControl, engine_argv
from specbench_tui.engine.control_socket import AttachedControl, attach_control
from specbench_tui.errors import InputError
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.tui.app import ConsoleApp
from specbench_tui.tui.console_exit import EXIT_INTERRUPTED
from specbench_tui.tui.screens import ConfirmScreen
from tests.conftest import MINIMAL_PLAN

pytestmark = [pytest.mark.console, pytest.mark.system]

#: Six cells, slow enough that the run outlives a detach and an attach.
SLOW_PLAN = MINIMAL_PLAN.replace(
    "max_tokens = [32]\n", "max_tokens = [32, 48, 64]\nrepeats = 2\n"
).replace("speed = 50", "speed = 4")


def _launch(plan: Path, results: Path) -> tuple[OwnedControl, ResultsLayout]:
    layout = ResultsLayout(results / "t")
    return EngineProcess(engine_argv(plan, results), layout).launch(), layout


def _logged(layout: ResultsLayout) -> list[dict]:
    return [json.loads(x) for x in layout.events.read_text().splitlines() if x.strip()]


async def _until(pilot, cond, seconds: float) -> bool:
    for _ in range(int(seconds / 0.05)):
        if cond():
            return True
        await pilot.pause(0.05)
    return cond()


async def test_detach_leaves_the_run_going_and_attach_continues_it(write_plan, tmp_path) -> None:
    control, layout = _launch(write_plan(SLOW_PLAN), tmp_path)
    proc = control.process.proc
    assert proc is not None
    try:
        app = ConsoleApp(control, results_source=None)
        async with app.run_test(size=(120, 40)) as pilot:
            assert await _until(pilot, lambda: app.progress.counts.running >= 1, 60)
            await pilot.press("q")
            await pilot.pause(0.2)
            assert isinstance(app.screen, ConfirmScreen) and app.screen.other == "Detach"
            await pilot.press("d")  # Detach, in the quit question
            await pilot.pause(0.3)
        assert app.return_value == 0
        assert app.summary_lines(0)[-1] == f"  attach   specbench-tui --attach {layout.root}"
        assert proc.poll() is None  # the campaign goes on without a console
        seen = len(_logged(layout))
        for _ in range(200):  # and it keeps writing its events
            time.sleep(0.05)
            if len(_logged(layout)) > seen:
                break
        assert len(_logged(layout)) > seen

        glance = attach_control(layout.root)  # attach, look, leave: the run goes on, exit 0
        assert isinstance(glance, AttachedControl)
        app_glance = ConsoleApp(glance, results_source=None)
        async with app_glance.run_test(size=(120, 40)) as pilot:
            assert await _until(pilot, lambda: len(app_glance.progress.cells) == 6, 30)
            await pilot.press("q")
            await pilot.pause(0.2)
        assert app_glance.return_value == 0
        assert proc.poll() is None

        again = attach_control(layout.root)
        assert isinstance(again, AttachedControl)
        app2 = ConsoleApp(again, results_source=None)
        async with app2.run_test(size=(120, 40)) as pilot:
            assert await _until(pilot, lambda: len(app2.progress.cells) == 6, 30)
            done_at_attach = app2.progress.counts.done
            assert await _until(pilot, lambda: app2.progress.finished, 120)
            # the same run: one campaign_started, and the cells finished after the attach
            # came in live
            assert app2.progress.counts.done == 6 > done_at_attach
            await pilot.press("q")
            await pilot.pause(0.2)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    events = [e["event"] for e in _logged(layout)]
    assert events.count("campaign_started") == 1 and events.count("cell_finished") == 6


async def test_quit_leaves_at_once_and_the_child_writes_the_report(write_plan, tmp_path) -> None:
    control, layout = _launch(write_plan(SLOW_PLAN), tmp_path)
    proc = control.process.proc
    assert proc is not None
    try:
        app = ConsoleApp(control, results_source=None)
        async with app.run_test(size=(120, 40)) as pilot:
            assert await _until(pilot, lambda: app.progress.counts.running >= 1, 60)
            await pilot.press("q")
            await pilot.pause(0.2)
            await pilot.press("y")
            left = await _until(pilot, lambda: app.return_value is not None, 30)
        gone_at = time.time()
        assert left and app.return_value == EXIT_INTERRUPTED
        assert proc.wait(timeout=60) == EXIT_INTERRUPTED  # the abort reached the child
    finally:
        if proc.poll() is None:
            proc.kill()
    events = _logged(layout)
    assert any(e["event"] == "aborted" for e in events)
    report = layout.root / "report.md"
    # the console did not wait for the report: the child wrote it after the console left
    assert report.exists() and report.stat().st_mtime > gone_at - 0.5


async def test_d_on_a_campaign_in_this_process_is_refused(write_plan, tmp_path) -> None:
    from specbench_tui.engine.campaign import Campaign, CampaignOptions
    from specbench_tui.plan.loader import load_plan

    plan = load_plan(write_plan(SLOW_PLAN))
    campaign = Campaign.prepare(plan, ResultsLayout(tmp_path / "t"), CampaignOptions())
    app = ConsoleApp(campaign, results_source=None)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await _until(pilot, lambda: app.progress.counts.running >= 1, 60)
        await pilot.press("d")
        await pilot.pause(0.3)
        assert app.return_value is None  # still here: leaving would end the campaign
        said = [n.message for n in app._notifications]
        assert any("cannot go on without it" in m for m in said)
        await pilot.press("q")
        await pilot.pause(0.2)
        assert isinstance(app.screen, ConfirmScreen) and app.screen.other is None
        await pilot.press("y")
        await _until(pilot, lambda: app.return_value is not None, 30)


async def test_a_child_that_fails_to_start_is_the_consoles_error(write_plan, tmp_path) -> None:
    plan = write_plan(
        MINIMAL_PLAN.replace(
            "[hosts.sim]\nsim = true", '[hosts.sim]\nssh = "nobody@no-such-host.invalid"'
        )
        .replace("speed = 50\n", "")
        .replace("[server]\n", '[server]\nmodel = "/models/x"\n')
    )
    control, _ = _launch(plan, tmp_path)
    app = ConsoleApp(control, results_source=None)
    t0 = time.monotonic()
    async with app.run_test(size=(80, 24)) as pilot:
        assert time.monotonic() - t0 < 30  # the console is up while the child checks
        assert await _until(pilot, lambda: app.return_value is not None, 120)
    assert isinstance(app.start_error, InputError)
    assert "no-such-host.invalid" in str(app.start_error) and app.return_value == 2

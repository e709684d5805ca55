"""The console on a real in-process campaign: keys reach the engine and change the results."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specbench_tui.engine.campaign import Campaign, CampaignOptions
from specbench_tui.engine.commands import Command
from specbench_tui.plan.loader import load_plan
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.tui.app import ConsoleApp
from tests.conftest import MINIMAL_PLAN

pytestmark = [pytest.mark.console, pytest.mark.system]


async def test_keys_steer_a_real_campaign(write_plan, tmp_path: Path) -> None:
    text = MINIMAL_PLAN.replace("max_tokens = [32]\n", "max_tokens = [32, 48, 64]\nrepeats = 2\n")
    plan = load_plan(write_plan(text.replace("speed = 50", "speed = 10")))
    layout = ResultsLayout.for_campaign(tmp_path, plan.spec.campaign.name)
    campaign = Campaign.prepare(plan, layout, CampaignOptions())
    app = ConsoleApp(campaign)

    def logged() -> list[dict]:
        return [json.loads(x) for x in layout.events.read_text().splitlines()]

    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(300):  # until the first cell is done
            await pilot.pause(0.05)
            if any(e["event"] == "cell_finished" for e in logged()):
                break
        await pilot.press("p")
        for _ in range(100):
            await pilot.pause(0.05)
            if any(e["event"] == "paused" for e in logged()):
                break
        assert any(e["event"] == "paused" for e in logged())
        await pilot.pause(0.5)
        started = sum(1 for e in logged() if e["event"] == "cell_started")
        await pilot.pause(0.8)
        assert sum(1 for e in logged() if e["event"] == "cell_started") == started  # held
        await pilot.press("p")  # resume
        for _ in range(600):
            await pilot.pause(0.05)
            if any(e["event"] == "campaign_finished" for e in logged()):
                break
        for _ in range(400):  # the engine still writes its views and report
            await pilot.pause(0.05)
            if not app.engine_running():
                break
        await pilot.press("q")
        await pilot.pause(0.2)
    events = logged()
    assert [e["event"] for e in events if e["event"] in ("paused", "resumed")] == [
        "paused",
        "resumed",
    ]
    assert sum(1 for e in events if e["event"] == "cell_finished") == 6
    assert app.return_value == 0


def test_core_packages_never_import_textual() -> None:
    code = (
        "import sys\n"
        "import specbench_tui.cli, specbench_tui.plan.loader, specbench_tui.plan.review\n"
        "import specbench_tui.engine.campaign, specbench_tui.engine.headless\n"
        "import specbench_tui.engine.control_socket, specbench_tui.results.progress\n"
        "import specbench_tui.hosts.host, specbench_tui.bench.workloads\n"
        "import specbench_tui.report.render, specbench_tui.sim.server\n"
        "bad = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "print(bad)\n"
        "raise SystemExit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


async def test_console_attached_to_a_headless_campaign(write_plan, tmp_path: Path) -> None:
    """--attach: the console replays a running headless campaign, steers it, and leaving it
    leaves the campaign running."""
    from specbench_tui.engine.control_socket import attach_control
    from tests.conftest import start_headless

    text = MINIMAL_PLAN.replace("max_tokens = [32]\n", "max_tokens = [32, 48, 64]\nrepeats = 2\n")
    path = write_plan(text.replace("speed = 50", "speed = 6"))
    proc = start_headless(path, tmp_path)
    root = tmp_path / "t"
    try:
        app = ConsoleApp(attach_control(root))
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(200):
                await pilot.pause(0.05)
                if app.progress.cells and app.progress.counts.done >= 1:
                    break
            assert len(app.progress.cells) == 6  # the plan came with the replay
            await pilot.press("p")
            for _ in range(100):
                await pilot.pause(0.05)
                if app.progress.paused:
                    break
            assert app.progress.paused  # the pause went to the campaign and came back
            await pilot.press("q")  # a detached console leaves without asking
            await pilot.pause(0.3)
        assert proc.poll() is None  # still running, paused
        reply = await attach_control(root).send(Command("resume", by="test"))
        assert reply.ok
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out


async def test_a_console_campaign_serves_its_socket_and_reruns_after_the_end(
    write_plan, tmp_path: Path
) -> None:
    """A campaign run in the console can be attached to from another terminal while it runs;
    after the end its socket is gone (--attach then opens it read-only) and r on a finished
    cell starts the engine again on the same results, as a new attempt."""
    from specbench_tui.engine.control_socket import AttachedControl, attach_control
    from specbench_tui.engine.replay import ReplayControl
    from specbench_tui.tui.plan_tree import NodeRef, PlanTree
    from tests.support.relaunch import InProcessRelaunch

    plan = load_plan(write_plan(MINIMAL_PLAN.replace("speed = 50", "speed = 20")))
    layout = ResultsLayout.for_campaign(tmp_path, plan.spec.campaign.name)
    options = CampaignOptions()
    campaign = Campaign.prepare(plan, layout, options)
    app = ConsoleApp(
        campaign,
        relaunch=InProcessRelaunch(plan, layout, options),
        results_source=None,
    )

    def logged() -> list[dict]:
        return [json.loads(x) for x in layout.events.read_text().splitlines()]

    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(200):
            await pilot.pause(0.05)
            if layout.control_socket.exists():
                break
        other = attach_control(layout.root)  # a second terminal
        assert isinstance(other, AttachedControl)
        reply = await other.send(Command("pause", by="terminal-2"))
        assert reply.ok, reply.text
        for _ in range(100):
            await pilot.pause(0.05)
            if app.progress.paused:
                break
        assert app.progress.paused  # the console sees what the other terminal did
        await other.send(Command("resume", by="terminal-2"))
        for _ in range(600):
            await pilot.pause(0.05)
            if app.progress.finished and not app.engine_running():
                break
        assert app.progress.finished and app.progress.counts.done == 2
        assert not layout.control_socket.exists()
        assert isinstance(attach_control(layout.root), ReplayControl)
        first = app.progress.cells[campaign.selected[0]]
        app.follow = False
        app.main.query_one(PlanTree).reveal(NodeRef("cell", first.id))
        await pilot.pause(0.2)
        await pilot.press("r")  # one finished cell: no question, the engine starts again
        for _ in range(600):
            await pilot.pause(0.05)
            c = app.progress.cells.get(first.id)
            if c is not None and c.attempt == 2 and app.progress.finished:
                break
        assert app.control is not campaign
        assert app.progress.cells[first.id].attempt == 2
        assert app.progress.cells[first.id].status == "done"
        for _ in range(200):
            await pilot.pause(0.05)
            if not app.engine_running():
                break
        await pilot.press("q")
        await pilot.pause(0.3)
    events = logged()
    assert [e["event"] for e in events].count("campaign_started") == 2
    queued = [e for e in events if e["event"] == "cell_queued"]
    assert [(e["cell_id"], e["attempt"], e["by"]) for e in queued] == [(first.id, 2, "rerun")]
    finished = [e["cell_id"] for e in events if e["event"] == "cell_finished"]
    assert finished.count(first.id) == 2 and len(finished) == 3  # the other cell ran once
    assert app.return_value == 0
    lines = app.summary_lines(0)
    assert lines[0].startswith("specbench-tui: t finished: 2 done") and str(layout.root) in lines[1]


def test_selection_adds_cells_to_rerun_whatever_their_status() -> None:
    from specbench_tui.engine.selection import select_cells
    from specbench_tui.results.state import CampaignState
    from tests.support.scripted import sample_campaign

    state = CampaignState.from_events(sample_campaign(finish=True))
    cells = [c.cell for c in state.cells.values() if c.cell is not None]
    assert select_cells(state, cells) == []  # all ended: nothing to resume
    assert select_cells(state, cells, rerun=["ar1co64"]) == ["ar1co64"]
    assert select_cells(state, cells, rerun_failed=True, rerun=["ar1co64"]) == [
        "ar1co64",
        "dfl1conc4",
    ]

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

pytestmark = pytest.mark.slow


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
        await pilot.pause(0.3)
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

"""A finished campaign opened in the console (``--attach`` on a results directory nothing
runs): a one-line banner says how to run it again, the keys that would change it are not in
the footer and say in one line why they cannot act, and the log pane shows each group's
stored log. Driven on a real campaign's results: a headless run of the simulated host."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import Log, Static
from textual.widgets._footer import FooterKey

from specbench_tui.engine.control_socket import attach_control
from specbench_tui.engine.replay import ReplayControl
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.tui.app import ConsoleApp
from specbench_tui.tui.log_pane import LogPane
from specbench_tui.tui.plan_tree import NodeRef, PlanTree
from specbench_tui.tui.screens import ConfirmScreen
from tests.conftest import MINIMAL_PLAN, ROOT
from tests.support.console_pilot import settle

pytestmark = [pytest.mark.console, pytest.mark.system]

SIZE = (120, 40)


@pytest.fixture(scope="module")
def finished_campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real campaign run to its end headless (two groups, one cell each)."""
    from tests.conftest import free_port

    where = tmp_path_factory.mktemp("ro")
    plan = where / "plan.toml"
    plan.write_text(MINIMAL_PLAN.replace("{port}", str(free_port())))
    proc = subprocess.run(
        [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results", str(where)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return where / "t"


async def test_a_finished_campaign_is_a_read_only_view_with_its_stored_logs(
    finished_campaign: Path,
) -> None:
    layout = ResultsLayout(finished_campaign)
    control = attach_control(finished_campaign)
    assert isinstance(control, ReplayControl)
    app = ConsoleApp(control, results_source=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, 0.1)
        banner = app.main.query_one("#banner", Static)
        assert banner.display
        text = str(banner.render())
        assert "read-only" in text and f"--results {finished_campaign.parent}" in text
        shown = {k.action for k in app.main.query(FooterKey)}
        assert not shown & {"toggle_pause", "skip", "rerun", "abort", "retry_group"}
        assert {"help", "request_quit"} <= shown
        for key in ("p", "s", "r", "a", "g", "R"):
            app._notifications.clear()
            await pilot.press(key)
            await settle(pilot, app, 0.1)
            assert not isinstance(app.screen, ConfirmScreen), key
            said = [n.message for n in app._notifications]
            assert len(said) == 1 and said[0].startswith("read-only view"), (key, said)
            assert "\n" not in said[0]
        assert app.progress.counts.done == 2  # nothing changed
        for gid in app.progress.groups:
            app.follow = False
            app.main.query_one(PlanTree).reveal(NodeRef("group", gid))
            await settle(pilot, app, 0.1)
            pane = app.main.query_one(LogPane)
            assert pane.group == gid
            assert str(pane.border_title).startswith(f"Log · {gid} · stored log")
            stored = layout.log_of(gid).read_text().splitlines()
            assert stored and list(app.main.query_one("#log", Log).lines)[-1] == stored[-1]
        await pilot.press("q")
        await pilot.pause()

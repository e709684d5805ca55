"""A flood of commands that do not apply costs the log a few lines, not one synced notice
each (3000 junk commands once added 350 KB): every sender still gets its answer, the first
ten within a minute are logged, and the next one logged says how many were not."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from specbench_tui.engine import hub as hub_module
from specbench_tui.engine.campaign import Campaign, CampaignOptions
from specbench_tui.engine.commands import Command
from specbench_tui.plan.loader import load_plan
from specbench_tui.results.layout import ResultsLayout
from tests.conftest import MINIMAL_PLAN


def _notices(path: Path) -> list[str]:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return [e["text"] for e in lines if e["event"] == "notice"]


async def test_refused_commands_are_rate_limited_in_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(hub_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    plan_path = tmp_path / "plan.toml"
    plan_path.write_text(MINIMAL_PLAN.replace("{port}", "39997"))
    plan = load_plan(plan_path)
    layout = ResultsLayout.for_campaign(tmp_path / "res", plan.spec.campaign.name)
    c = Campaign.prepare(plan, layout, CampaignOptions())
    try:
        before = layout.events.stat().st_size
        for i in range(3000):
            reply = await c.send(Command("rerun", target=f"junk-{i}", by="flood"))
            assert not reply.ok and f"junk-{i}" in reply.text  # each one answered
        said = _notices(layout.events)
        assert len(said) == hub_module.REFUSALS_BURST
        assert layout.events.stat().st_size - before < 3000  # was about 350 KB
        clock[0] += hub_module.REFUSALS_PER_S / hub_module.REFUSALS_BURST  # room for one
        await c.send(Command("rerun", target="late", by="flood"))
        last = _notices(layout.events)[-1]
        assert "late" in last and "2990 more refused commands before this not logged" in last
        ok = await c.send(Command("pause", by="operator"))  # what applies is always said
        assert ok.ok and _notices(layout.events)[-1] == ok.text
    finally:
        c.store.close()

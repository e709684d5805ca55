"""The results contract on the ground floor: ``specbench_tui/results/`` imports nothing of the
engine, report, console or any other part of the tool above it; and its cells view accounts
for every planned cell, a campaign aborted before running them included."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import polars as pl
import pytest
from conftest import MINIMAL_PLAN

import specbench_tui
from specbench_tui.engine.campaign import Campaign, CampaignOptions
from specbench_tui.engine.commands import Command
from specbench_tui.plan.loader import load_plan
from specbench_tui.results.events import CellFinished
from specbench_tui.results.files import read_events
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.state import CampaignState

PACKAGE = Path(specbench_tui.__file__).parent
RESULTS = PACKAGE / "results"


def imports_above_results(source: str, module: str) -> list[str]:
    """Modules of ``specbench_tui`` outside ``specbench_tui.results`` that ``source`` (the
    text of ``module``) imports, anywhere in it (a function's deferred import too)."""
    found = []
    package = module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's package
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            names = [target] if node.module else [f"{target}.{a.name}" for a in node.names]
        for name in names:
            top = name.split(".")
            if top[0] == "specbench_tui" and (len(top) < 2 or top[1] != "results"):
                found.append(name)
    return found


def test_the_checker_sees_every_kind_of_import() -> None:
    src = (
        "import os\n"
        "import polars as pl\n"
        "from specbench_tui.results.events import Event\n"
        "from . import cells\n"
        "import specbench_tui.report.build\n"
        "from specbench_tui.engine import store\n"
        "from .. import errors\n"
        "def later():\n"
        "    from specbench_tui.tui.app import App\n"
    )
    assert imports_above_results(src, "specbench_tui.results.views") == [
        "specbench_tui.report.build",
        "specbench_tui.engine",
        "specbench_tui.errors",
        "specbench_tui.tui.app",
    ]


def test_the_results_package_imports_nothing_above_it() -> None:
    files = sorted(RESULTS.glob("*.py"))
    assert len(files) >= 8  # the package is where it is thought to be
    bad = {
        f.name: found
        for f in files
        if (found := imports_above_results(f.read_text(), f"specbench_tui.results.{f.stem}"))
    }
    assert bad == {}, f"the results contract must stand on its own: {bad}"


@pytest.mark.system
async def test_an_aborted_campaign_has_a_never_run_row_per_cell_it_did_not_run(
    write_plan, tmp_path: Path
) -> None:
    text = MINIMAL_PLAN.replace("speed = 50", "speed = 10").replace(
        "max_tokens = [32]\n", "max_tokens = [32, 48, 64]\n"
    )
    plan = load_plan(write_plan(text))
    layout = ResultsLayout.for_campaign(tmp_path, plan.spec.campaign.name)
    campaign = Campaign.prepare(plan, layout, CampaignOptions())
    run = asyncio.create_task(campaign.run())

    async def first_finished() -> None:
        async for ev in campaign.subscribe():
            if isinstance(ev, CellFinished):
                return

    await asyncio.wait_for(first_finished(), 60)
    assert (await campaign.send(Command("abort", by="test"))).ok
    assert await asyncio.wait_for(run, 60) == 130

    state = CampaignState.from_events(read_events(layout.events), layout.rows_exist)
    cells = pl.read_parquet(layout.cells)
    assert sorted(cells["cell_id"]) == sorted(state.cells)  # every planned cell has a row
    status = dict(zip(cells["cell_id"], cells["status"], strict=True))
    done = {c.id for c in state.cells.values() if c.status == "done"}
    assert done and {status[c] for c in done} == {"done"}
    never = {cid for cid, s in status.items() if s == "never run"}
    assert never and never == {c.id for c in state.cells.values() if c.status == "pending"}
    assert set(status.values()) <= {"done", "never run"}
    assert cells.filter(pl.col("status") == "never run")["throughput_tok_s"].null_count() == len(
        never
    )  # no figures for what was never measured

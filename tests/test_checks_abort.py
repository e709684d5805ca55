"""A lossy config in a campaign that ends before its group does: aborted by the operator, or
killed outright. Its verdict was never written at a group's end, yet the report (Markdown
and PDF) flags it as failing its check and never ranks it best, from the outputs the
campaign stored."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import MINIMAL_PLAN, ROOT, need_program, start_headless
from support.report_pdf import overfull_boxes, pdf_text

from specbench_tui.engine.campaign import Campaign, CampaignOptions
from specbench_tui.engine.commands import Command
from specbench_tui.engine.report_child import write_report
from specbench_tui.plan.loader import load_plan
from specbench_tui.report.frames import comparison
from specbench_tui.report.inputs import load_inputs
from specbench_tui.results.events import CellFinished
from specbench_tui.results.layout import ResultsLayout

pytestmark = pytest.mark.system

# ar, then a dflash whose outputs leave the baseline's a few tokens in (the simulator's
# diverge fault), three cells each: the campaign ends after dflash's first cell.
PLAN = (
    MINIMAL_PLAN.replace("max_tokens = [32]", "max_tokens = [64, 48, 32]\nrepeats = 2")
    .replace("[configs.dflash]\n", '[configs.dflash]\nlabel = "DFlash (linear, block 8)"\n')
    .replace('"8"]', '"8", "--sim-fault", "diverge"]')
    .replace("[workloads.single]", "[checks]\ngreedy_equivalence = true\n\n[workloads.single]")
)


def _lossy_flagged(root: Path) -> str:
    """dflash fails its check in the comparison, the summary and the tables of report.md."""
    rows = {(r["config"], r["tp"]): r for r in comparison(load_inputs(root)).to_dicts()}
    dflash = rows[("dflash", 1)]
    assert dflash["failed_check"] and not dflash["best"] and not dflash["top_tie"]
    # It has a speed-up, which a lossy config may well have; how large depends on the load
    # the simulator and the client ran under (such a bound failed at load 35-45): no bound.
    assert dflash["speedup"] is not None and dflash["speedup"] > 0
    md = (root / "report.md").read_text()
    assert "No config failed a correctness check" not in md
    assert "Configs that failed a correctness check" in md
    single = md.split("Single-stream decoding")[1]
    assert "failed check" in single.split("\n## ")[0]
    return md


async def test_an_aborted_campaign_flags_its_lossy_config(write_plan, tmp_path: Path) -> None:
    need_program("pdflatex")
    plan = load_plan(write_plan(PLAN))
    layout = ResultsLayout.for_campaign(tmp_path / "res", plan.spec.campaign.name)
    c = Campaign.prepare(plan, layout, CampaignOptions(report=write_report))
    run = asyncio.create_task(c.run())

    async def first_dflash_cell() -> None:
        async for ev in c.subscribe():
            if isinstance(ev, CellFinished) and ev.group == "sim.dflash.tp1":
                return

    await asyncio.wait_for(first_dflash_cell(), 120)
    assert (await c.send(Command("abort", by="test"))).ok
    assert await asyncio.wait_for(run, 120) == 130
    assert c.state.aborted and c.state.counts.pending  # dflash's group never ended
    verdict = c.state.checks[("greedy", "sim", "dflash", 1)]
    assert verdict.status == "fail"  # the engine judged what the aborted run measured
    _lossy_flagged(layout.root)
    pdf = layout.root / "report.pdf"
    assert pdf.exists(), (layout.root / "report.tex.log").read_text()
    _, text = pdf_text(pdf)
    flat = " ".join(text.split())
    assert "Configs that failed a correctness check" in flat
    assert "No config failed" not in flat
    # In the single-stream table beside its figures, and on the speed-up chart's bar label
    # (the label whole, its comma inside: a bar chart of one config once cut it there).
    assert flat.count("failed check") >= 3, flat
    tex = (layout.root / "report.tex").read_text()
    assert "xticklabels={{{DFlash (linear, block 8) [failed check]}}}" in tex
    assert overfull_boxes(layout.root / "report.tex", tmp_path / "tex") == []


def test_a_killed_campaign_is_judged_by_report(write_plan, tmp_path: Path) -> None:
    path = write_plan(PLAN)
    results = tmp_path / "res"
    proc = start_headless(path, results)
    events = results / "t" / "events.jsonl"
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline:
            lines = events.read_text().splitlines() if events.exists() else []
            done = [
                json.loads(x)
                for x in lines
                if '"cell_finished"' in x and '"sim.dflash.tp1"' in x and x.endswith("}")
            ]
            if done:
                break
            assert proc.poll() is None, "the campaign ended before dflash's first cell"
            time.sleep(0.05)
        else:
            pytest.fail("dflash never finished a cell")
    finally:
        proc.kill()  # SIGKILL: its servers die with it (PR_SET_PDEATHSIG)
        proc.communicate(timeout=30)
    root = results / "t"
    log = [json.loads(x) for x in events.read_text().splitlines() if x.endswith("}")]
    recorded = [e for e in log if e["event"] == "check_verdict" and e["config"] == "dflash"]
    assert recorded == []  # nothing judged dflash before the kill
    out = subprocess.run(
        [sys.executable, "-m", "specbench_tui", "--report", str(root)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    md = _lossy_flagged(root)
    assert "interrupted" in md
    assert "fail \\*" in md  # judged from the stored outputs: the log had no verdict

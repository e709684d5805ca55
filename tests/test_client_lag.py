"""A campaign whose client is starved on purpose (a GIL hog in the engine's own process) flags
the cell everywhere it is shown: cells.parquet, cell_finished, the headless line, the console
detail and the report."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from pathlib import Path

import polars as pl
import pytest

from specbench_tui.bench.client_health import LAG_THRESHOLD_S
from specbench_tui.engine.campaign import Campaign, CampaignOptions
from specbench_tui.engine.headless import format_event
from specbench_tui.engine.report_child import write_report
from specbench_tui.engine.store import ResultsStore
from specbench_tui.plan.loader import load_plan
from specbench_tui.results.events import CellFinished, CellStarted
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.progress import CampaignProgress
from specbench_tui.tui.detail import _figures
from tests.conftest import MINIMAL_PLAN
from tests.test_bench_client import gil_hog

pytestmark = pytest.mark.system


async def test_a_starved_client_is_flagged_in_every_view(write_plan, tmp_path: Path) -> None:
    text = MINIMAL_PLAN.replace('configs = ["ar", "dflash"]', 'configs = ["ar"]')
    plan = load_plan(write_plan(text))
    layout = ResultsLayout.for_campaign(tmp_path, plan.spec.campaign.name)
    campaign = Campaign.prepare(plan, layout, CampaignOptions(report=write_report))
    stop = threading.Event()
    hog = threading.Thread(target=gil_hog, args=(stop,), daemon=True)
    switch = sys.getswitchinterval()

    async def hog_during_the_cell() -> None:
        async for ev in campaign.subscribe():
            if isinstance(ev, CellStarted) and not hog.is_alive():
                sys.setswitchinterval(0.02)  # the hog keeps the GIL 20 ms at a time
                hog.start()
            elif isinstance(ev, CellFinished):
                stop.set()

    watcher = asyncio.create_task(hog_during_the_cell())
    try:
        code = await campaign.run()
    finally:
        stop.set()
        if hog.is_alive():
            hog.join()
        sys.setswitchinterval(switch)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(watcher, 5)
    assert code == 0
    finished = [e for e in ResultsStore.read_events(layout.events) if isinstance(e, CellFinished)]
    assert len(finished) == 1
    ev = finished[0]
    f = ev.figures
    assert f["client_lagged"] and f["client_lag_p99_s"] is not None
    assert f["client_lag_p99_s"] > LAG_THRESHOLD_S  # 14.5 ms under two suites, 20 ms quiet
    assert f["client_cpu_share"] is not None and f["client_cpu_share"] > 0  # load-bound
    line = format_event(ev)
    assert line is not None and "CLIENT LAGGED" in line and "cell throughput" in line
    cells = pl.read_parquet(layout.cells)
    assert cells["client_lagged"].to_list() == [True]
    assert cells["client_lag_p99_s"][0] > LAG_THRESHOLD_S
    # A starved client reads several chunks at once (gaps of 0, TTFT equal to e2e): its
    # figures are wrong or undefined, which is what the flag says; the columns are there.
    assert {"decode_tok_s_p50", "itl_token_s_p50", "chunk_gap_s_p50"} <= set(cells.columns)
    progress = CampaignProgress()
    progress.apply_all(ResultsStore.read_events(layout.events))
    shown = dict(_figures(progress.cells[ev.cell_id]))
    assert "timings suspect" in shown["CLIENT LAGGED"]
    report = (layout.root / "report.md").read_text()
    assert "1 cell was measured while the client's event loop lagged" in report

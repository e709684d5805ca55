"""What a cell's end and a telemetry flush write: new part files and the cells view, never a
rewrite of the request or telemetry views (whose cost grows with everything measured before);
those are rebuilt at the end of a run, and every ``WHOLE_VIEWS_EVERY_S`` in between."""

from __future__ import annotations

import asyncio
from pathlib import Path

import polars as pl
import pytest
from support.results_builder import ResultsBuilder

from specbench_tui.engine import store as store_module
from specbench_tui.engine.store import ResultsStore
from specbench_tui.results.events import CellFinished, CellStarted
from specbench_tui.results.records import RequestRecord
from specbench_tui.results.state import CampaignState

SAMPLE = {
    "time": 1.0,
    "host": "sim",
    "gpu": 0,
    "util_pct": 50.0,
    "mem_used_mib": 1.0,
    "mem_total_mib": 2.0,
    "power_w": 100.0,
    "temp_c": 40.0,
}


def _snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every file under ``root``: (inode, size, mtime ns); a rewrite by rename changes the inode."""
    return {
        str(p.relative_to(root)): (p.stat().st_ino, p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


def _setup(tmp_path: Path, cells: int) -> tuple[ResultsStore, CampaignState]:
    b = ResultsBuilder(tmp_path / "syn")
    for n in range(cells):
        b.cell(f"c{n}", "ar", 1, "single", "single")
    b.write(finished=False)
    store = ResultsStore(b.layout)
    store.open("[campaign]\nname = 'syn'\n", "abc123")
    state = store.state()
    store.write_views(state)  # the views as a previous run left them
    return store, state


async def _end_cell(store: ResultsStore, state: CampaignState, cid: str) -> None:
    """What the cell runner does when a cell ends: rows, event, views refresh."""
    c = state.cells[cid]
    records = [RequestRecord(cell_id=cid, prompt_id=f"p{i}", repeat=0) for i in range(2)]
    store.write_cell_requests(cid, 1, records)
    for ev in (
        CellStarted(cell_id=cid, group=c.group, cell=c.name),
        CellFinished(cell_id=cid, group=c.group, cell=c.name, requests=2),
    ):
        store.append_event(ev)
        state.apply(ev)
    store.refresh_views(state)
    assert store._views_task is not None
    await store._views_task  # the refresh, done (settle_views would drop it: a final write follows)


async def test_a_cell_end_and_telemetry_add_parts_and_the_cells_view_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "TELEMETRY_FLUSH_ROWS", 3)
    store, state = _setup(tmp_path, 3)
    root = store.layout.root
    try:
        for n in range(3):
            before = _snapshot(root)
            await _end_cell(store, state, f"c{n}")
            for _ in range(3):  # a flush's worth of samples
                store.add_telemetry({**SAMPLE, "time": float(n)})
            await asyncio.sleep(0.2)  # the flush runs in the default executor
            after = _snapshot(root)
            changed = {k for k in before.keys() & after.keys() if before[k] != after[k]}
            added = after.keys() - before.keys()
            assert changed <= {"cells.parquet", "events.jsonl"}, changed
            assert "cells.parquet" in changed
            assert added == {f"parts/c{n}.a1.parquet", f"telemetry/{n + 1:06d}.parquet"}, added
            assert pl.read_parquet(store.layout.requests).height == 0  # left for later
            cells = pl.read_parquet(store.layout.cells)
            assert cells.filter(pl.col("status") == "done").height == n + 1  # current
        store.write_views(state)  # the end of a run: every view whole
        assert pl.read_parquet(store.layout.requests).height == 6
        assert pl.read_parquet(store.layout.telemetry).height == 9
    finally:
        store.close()


async def test_the_whole_views_are_rebuilt_now_and_then_during_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, state = _setup(tmp_path, 2)
    try:
        monkeypatch.setattr(store_module, "WHOLE_VIEWS_EVERY_S", 0.0)
        await _end_cell(store, state, "c0")
        assert pl.read_parquet(store.layout.requests).height == 2
        monkeypatch.setattr(store_module, "WHOLE_VIEWS_EVERY_S", 3600.0)
        await _end_cell(store, state, "c1")
        assert pl.read_parquet(store.layout.requests).height == 2  # not due yet
    finally:
        store.close()

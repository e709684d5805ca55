"""What a cell's end and a telemetry flush write: new part files and the cells view, never a
rewrite of the request or telemetry views (whose cost grows with everything measured before);
those are rebuilt at the end of a run, and every ``WHOLE_VIEWS_EVERY_S`` in between."""

from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
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


def test_report_brings_the_views_up_to_date_where_no_campaign_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run killed mid-way leaves the whole views behind the parts; --report rebuilds them,
    but never under a running campaign, and never from a directory copied without parts."""
    from specbench_tui.cli import main
    from specbench_tui.report import render

    monkeypatch.setattr(render, "tex_engine", lambda: None)  # the PDF is not the point here

    b = ResultsBuilder(tmp_path / "syn")
    for n in range(3):
        b.cell(f"c{n}", "ar", 1, "single", "single", max_tokens=32 * (n + 1))
    b.finished("c0", [dict(prompt_id="p", repeat=r) for r in range(2)])
    b.finished("c1", [dict(prompt_id="p", repeat=r) for r in range(3)])
    b.telemetry({k: [v] for k, v in SAMPLE.items()})
    root = b.write(finished=False)
    layout = b.layout
    stale = pl.DataFrame({"cell_id": ["c0"], "attempt": [1]})
    stale.write_parquet(layout.requests)  # as the last rebuild before the kill left it
    layout.cells.write_bytes(b"torn")

    fd = os.open(layout.lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a campaign runs here: its views are its own
    try:
        assert main(["--report", str(root)]) == 0
    finally:
        os.close(fd)
    assert pl.read_parquet(layout.requests).height == 1 and layout.cells.read_bytes() == b"torn"

    assert main(["--report", str(root)]) == 0
    assert "cells.parquet could not be read" in capsys.readouterr().err
    assert pl.read_parquet(layout.requests).height == 5
    assert pl.read_parquet(layout.telemetry).height == 1
    cells = pl.read_parquet(layout.cells)
    assert dict(zip(cells["cell_id"], cells["status"], strict=True)) == {
        "c0": "done",
        "c1": "done",
        "c2": "pending",
    }

    shutil.rmtree(layout.parts)  # a copy of the views alone: they are all there is
    views = layout.requests.read_bytes()
    assert main(["--report", str(root)]) == 0
    assert layout.requests.read_bytes() == views

"""Views are derived: a ``cells.parquet``, ``requests.parquet`` or ``telemetry.parquet`` that is
garbage, truncated or missing is moved aside (with a notice; a missing one needs none) and
rebuilt from the event log and the parts, row for row; temp files a crash left in ``parts/``
are removed, complete parts never are."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from support.results_builder import ResultsBuilder

from specbench_tui.engine.store import ResultsStore
from specbench_tui.results.files import remove_torn, tmp_name
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.state import CampaignState
from specbench_tui.results.views import cell_rows

PLAN = "[campaign]\nname = 'syn'\n"


def _campaign(root: Path) -> ResultsLayout:
    """Three cells, as the log tells it: one done (its rows in a part), one failed, one that
    never ran (the campaign ended without it); GPU samples in a telemetry part."""
    b = ResultsBuilder(root)
    b.cell("c1", "ar", 1, "single", "single")
    b.cell("c2", "dflash", 1, "single", "single")
    b.cell("c3", "dflash", 1, "single", "single", max_tokens=128)
    b.ready("sim.ar.tp1")
    b.finished("c1", [dict(prompt_id=f"p{i}", repeat=0, output_tokens=10 + i) for i in range(3)])
    b.failed("c2", "server exited")
    b.telemetry(
        {
            "time": [1.0, 2.0],
            "host": ["sim", "sim"],
            "gpu": [0, 0],
            "util_pct": [10.0, 90.0],
            "mem_used_mib": [1.0, 2.0],
            "mem_total_mib": [100.0, 100.0],
            "power_w": [50.0, 300.0],
            "temp_c": [30.0, 60.0],
        }
    )
    b.write()
    return b.layout


def _open(layout: ResultsLayout) -> ResultsStore:
    store = ResultsStore(layout)
    store.open(PLAN, "abc123")
    return store


def _rows(df: pl.DataFrame) -> list[dict[str, Any]]:
    return sorted(df.iter_rows(named=True), key=repr)


def _expected(layout: ResultsLayout, view: str) -> list[dict[str, Any]]:
    """What the truth says the view holds."""
    if view == "cells":
        store = ResultsStore(layout)
        store.opening_events = ResultsStore.read_events(layout.events)
        rows = cell_rows(store.state())
        return _rows(pl.DataFrame(rows, infer_schema_length=None))
    if view == "requests":
        return _rows(
            pl.concat([pl.read_parquet(p) for p in sorted(layout.parts.glob("*.parquet"))])
        )
    return _rows(pl.concat([pl.read_parquet(p) for p in sorted(layout.telemetry_parts.glob("*"))]))


def _damage(path: Path, how: str) -> bytes | None:
    good = path.read_bytes()
    if how == "missing":
        path.unlink()
        return None
    bad = {
        "garbage": os.urandom(len(good)),
        "truncated": good[: len(good) // 2],
        "empty": b"",
    }[how]
    path.write_bytes(bad)
    return bad


@pytest.mark.parametrize("view", ["cells", "requests", "telemetry"])
@pytest.mark.parametrize("how", ["garbage", "truncated", "empty", "missing"])
def test_an_unreadable_view_is_moved_aside_and_rebuilt(tmp_path: Path, view: str, how: str) -> None:
    layout = _campaign(tmp_path / "syn")
    store = _open(layout)
    store.write_views(store.state())  # every view good, as a run leaves them
    store.close()
    path = getattr(layout, view)
    bad = _damage(path, how)

    store = _open(layout)
    try:
        moved = sorted(layout.set_aside.glob(f"{path.name}.*")) if layout.set_aside.exists() else []
        if bad is None:  # nothing to keep, nothing to say
            assert moved == [] and not any(path.name in n for n in store.notices)
        else:
            (aside,) = moved
            assert aside.read_bytes() == bad  # kept as it was, for whoever wants to look
            (notice,) = [n for n in store.notices if path.name in n]
            assert "could not be read" in notice and "rebuilt" in notice
            assert str(aside.relative_to(layout.root)) in notice
        assert not path.exists() or bad is None
        store.write_views(store.state())
    finally:
        store.close()
    assert _rows(pl.read_parquet(path)) == _expected(layout, view)
    if view == "cells":  # every planned cell, with the status the log gives it
        cells = pl.read_parquet(path)
        assert dict(zip(cells["cell_id"], cells["status"], strict=True)) == {
            "c1": "done",
            "c2": "failed",
            "c3": "never run",
        }
    again = _open(layout)  # the rebuilt view is readable: no second notice
    again.close()
    assert not any("could not be read" in n for n in again.notices)


def test_a_view_with_a_garbled_middle_is_moved_aside(tmp_path: Path) -> None:
    """The footer intact, a data page garbled: the schema reads, the rows do not."""
    layout = _campaign(tmp_path / "syn")
    store = _open(layout)
    store.write_views(store.state())
    store.close()
    data = bytearray(layout.cells.read_bytes())
    mid = len(data) // 3
    data[mid : mid + 64] = b"\xa5" * 64
    layout.cells.write_bytes(bytes(data))
    store = _open(layout)
    store.close()
    assert any("cells.parquet could not be read" in n for n in store.notices)
    assert list(layout.set_aside.glob("cells.parquet.*"))


def test_torn_temp_files_are_removed_complete_parts_never(tmp_path: Path) -> None:
    layout = _campaign(tmp_path / "syn")
    part = layout.part_path("c1", 1)
    whole = part.read_bytes()
    torn_part = tmp_name(layout.part_path("c2", 1))  # a crash mid-write of c2's rows
    torn_part.write_bytes(whole[:100])
    torn_texts = tmp_name(layout.texts_path("c1", 1))
    torn_texts.write_text('{"p0": "hal')
    torn_tel = tmp_name(layout.telemetry_parts / "000002.parquet")
    torn_tel.write_bytes(b"PAR1")
    keep = [layout.parts / "notes.tmp", layout.parts / ".hidden-but-complete.parquet"]
    for p in keep:
        p.write_bytes(b"not ours to delete")
    (layout.parts / ".a-directory.tmp").mkdir()

    assert sorted(remove_torn(layout.parts)) == sorted([torn_part, torn_texts])
    assert not torn_part.exists() and not torn_texts.exists()
    assert part.read_bytes() == whole and all(p.exists() for p in keep)
    assert (layout.parts / ".a-directory.tmp").is_dir()
    assert remove_torn(layout.parts) == []
    assert remove_torn(tmp_path / "nowhere") == []

    store = _open(layout)  # opening does the same for every directory it writes
    store.close()
    assert not torn_tel.exists()
    assert any(torn_tel.name in n and "a crash left behind" in n for n in store.notices)
    assert part.read_bytes() == whole
    assert CampaignState.from_events(store.opening_events, layout.rows_exist).cells[
        "c1"
    ].status == ("done")

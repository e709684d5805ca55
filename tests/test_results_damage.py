"""One damaged file costs only itself: a request part that cannot be read is moved to
``unreadable/`` with a notice, its cell is pending again (so a run measures it again) and the
report is built from the other cells and names the file; a line of the event log that is not
an event (valid JSON with a wrong-typed field, nesting too deep, a torn last line) is copied
aside and said, and every open of the campaign still works."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.results_builder import ResultsBuilder

from specbench_tui.engine.store import ResultsStore
from specbench_tui.report.inputs import load_inputs
from specbench_tui.results.damaged import BAD_LINES
from specbench_tui.results.events import CellFinished, Event, InvalidEvent, Notice
from specbench_tui.results.files import read_event_log
from specbench_tui.results.layout import ResultsLayout

PLAN = "[campaign]\nname = 'syn'\n"
TS = "2026-01-01T00:00:00.000Z"


def _campaign(root: Path) -> ResultsLayout:
    """Three finished cells, each with two rows in its part."""
    b = ResultsBuilder(root)
    for cid in ("c1", "c2", "c3"):
        b.cell(cid, "ar", 1, "single", "single", max_tokens=64 if cid != "c3" else 128)
    b.ready("sim.ar.tp1")
    for cid in ("c1", "c2", "c3"):
        b.finished(cid, [dict(prompt_id=f"p{i}", repeat=0) for i in range(2)], texts={"k": "t"})
    b.write()
    return b.layout


def _open(layout: ResultsLayout) -> ResultsStore:
    store = ResultsStore(layout)
    store.open(PLAN, "abc123")
    return store


def _edit_line(layout: ResultsLayout, event: str, cell_id: str, change: dict[str, Any]) -> int:
    """Change the fields of the first ``event`` line of ``cell_id``; returns its number."""
    lines = layout.events.read_text().splitlines()
    for i, line in enumerate(lines):
        obj = json.loads(line)
        if obj["event"] == event and obj.get("cell_id") == cell_id:
            obj.update(change)
            lines[i] = json.dumps(obj)
            layout.events.write_text("\n".join(lines) + "\n")
            return i + 1
    raise AssertionError(f"no {event} of {cell_id}")


def test_a_truncated_part_costs_only_its_cell(tmp_path: Path) -> None:
    layout = _campaign(tmp_path / "syn")
    part = layout.part_path("c2", 1)
    part.write_bytes(part.read_bytes()[:300])

    # The report (before any run sets the part aside): the other cells' rows, the file named.
    inp = load_inputs(layout.root)
    assert sorted(inp.requests["cell_id"].cast(str).unique()) == ["c1", "c3"]
    assert inp.requests.height == 4
    assert {c.id: c.status for c in inp.state.cells.values()} == {
        "c1": "done",
        "c2": "pending",
        "c3": "done",
    }
    (note,) = [n for n in inp.notes if "could not be read" in n]
    assert f"parts/{part.name}" in note

    # A run opening the directory: the part (and its texts) set aside, the cell runs again.
    store = _open(layout)
    try:
        (notice,) = [n for n in store.notices if part.name in n]
        assert "could not be read" in notice and "runs again" in notice
        assert "sim.ar.tp1/single/c2" in notice  # the cell by name
        state = store.state()
    finally:
        store.close()
    assert not part.exists() and not layout.texts_path("c2", 1).exists()
    moved = sorted(p.name for p in layout.set_aside.iterdir())
    assert [n.rsplit(".", 1)[0] for n in moved] == [part.name, layout.texts_path("c2", 1).name]
    assert {c.id: c.status for c in state.cells.values()} == {
        "c1": "done",
        "c2": "pending",
        "c3": "done",
    }
    assert state.cells["c2"].attempt == 1  # its rerun is attempt 2: nothing overwritten
    # The report after that: the same rows, and the set-aside file named.
    inp = load_inputs(layout.root)
    assert inp.requests.height == 4
    assert any(moved[0] in n for n in inp.notes)
    # Opened again: nothing more to say about parts.
    again = _open(layout)
    again.close()
    assert not any("could not be read" in n for n in again.notices)


@pytest.mark.parametrize(
    "change,why",
    [
        ({"attempt": "two"}, "'attempt' is 'two'"),
        ({"attempt": 2**64}, "'attempt' is 18446744073709551616"),
        ({"requests": 1.5}, "'requests' is 1.5"),
        ({"figures": [1, 2]}, "'figures' is [1, 2]"),
        ({"ts": "yesterday"}, "'ts' is 'yesterday'"),
        ({"cell_id": None}, "'cell_id' is None"),
    ],
)
def test_a_wrong_typed_event_line_is_set_aside_and_said(
    tmp_path: Path, change: dict[str, Any], why: str
) -> None:
    layout = _campaign(tmp_path / "syn")
    number = _edit_line(layout, "cell_finished", "c2", change)
    store = _open(layout)
    try:
        (notice,) = [n for n in store.notices if "events.jsonl" in n]
        assert f"line {number}" in notice and why in notice
        state = store.state()
    finally:
        store.close()
    # The rest of the log is read: c2's end is the line lost, so it runs again.
    assert {c.id: c.status for c in state.cells.values()} == {
        "c1": "done",
        "c2": "pending",
        "c3": "done",
    }
    copied = [json.loads(x) for x in (layout.set_aside / BAD_LINES).read_text().splitlines()]
    assert [c["line"] for c in copied] == [number] and why in copied[0]["why"]
    again = _open(layout)  # said again, copied once
    again.close()
    assert any(f"line {number}" in n for n in again.notices)
    assert len((layout.set_aside / BAD_LINES).read_text().splitlines()) == 1
    inp = load_inputs(layout.root)  # the report says it too
    assert any(f"line {number}" in n for n in inp.notes)


def test_a_line_nested_too_deeply_or_not_an_object_is_a_bad_line(tmp_path: Path) -> None:
    layout = _campaign(tmp_path / "syn")
    with layout.events.open("a") as f:
        f.write("[" * 100_000 + "]" * 100_000 + "\n")
        f.write('"just a string"\n')
        f.write(json.dumps({"event": ["cell_started"], "ts": TS}) + "\n")
    log = read_event_log(layout.events)
    assert [b.why for b in log.bad] == [
        "nested too deeply",
        "not a JSON object",
        "['cell_started']: its event name is not text",
    ]
    assert not log.torn and all(not isinstance(e, InvalidEvent) for e in log.events)


def test_a_torn_last_line_gets_its_end_so_the_next_event_is_whole(tmp_path: Path) -> None:
    b = ResultsBuilder(tmp_path / "syn")
    b.cell("c1", "ar", 1, "single", "single")
    b.write(finished=False, torn_tail=True)
    store = _open(b.layout)
    try:
        assert any("cut short" in n for n in store.notices)
        store.append_event(Notice(text="after the crash"))
    finally:
        store.close()
    log = read_event_log(b.layout.events)
    assert isinstance(log.events[-1], Notice) and log.events[-1].text == "after the crash"
    assert len(log.bad) == 1 and not log.torn  # the torn line, now a line of its own


@pytest.mark.parametrize(
    "obj",
    [
        {"event": "cell_started", "ts": TS, "attempt": 1},  # no cell_id
        {"event": "cell_started", "ts": TS, "cell_id": "c", "attempt": True},
        {"event": "campaign_started", "ts": TS, "campaign": "x", "cells": [{"id": "a", "tp": "1"}]},
        {"event": "campaign_started", "ts": TS, "campaign": "x", "groups": [{"env": {"A": 1}}]},
        {"event": "campaign_started", "ts": TS, "campaign": "x", "selected": "all"},
        {"event": "check_verdict", "ts": TS, "check": "greedy", "config": "a", "tp": [1]},
        {"event": "cell_started", "cell_id": "c"},  # no time
    ],
)
def test_every_field_of_a_known_event_is_checked(obj: dict[str, Any]) -> None:
    ev = Event.from_json(obj)
    assert isinstance(ev, InvalidEvent) and ev.why, ev


def test_events_of_the_right_types_still_read_and_unknown_ones_pass() -> None:
    ev = Event.from_json(
        {"event": "cell_finished", "ts": TS, "cell_id": "c", "attempt": 2, "wall_s": 3, "x": 1}
    )
    assert isinstance(ev, CellFinished) and ev.attempt == 2 and ev.wall_s == 3
    other = Event.from_json({"event": "from_a_newer_version", "ts": TS, "anything": [1]})
    assert not isinstance(other, InvalidEvent) and other.to_json()["anything"] == [1]

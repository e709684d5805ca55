"""The event log's writer thread: the loop hands events over and goes on; the log gets them in
order, a batch per fsync; subscribers see an event once it is on disk; ``durable()`` is the
point code waits at before acting on what it emitted; a refused write cuts the batch off
again and the events are written later, once, in order."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from specbench_tui.engine import event_writer
from specbench_tui.engine.event_writer import EventWriter
from specbench_tui.engine.hub import EventHub
from specbench_tui.engine.run_control import RunControl
from specbench_tui.engine.store import ResultsStore
from specbench_tui.results.events import Event, Notice, RequestDone
from specbench_tui.results.files import StorageError, event_line, read_events
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.state import CampaignState


class GatedSync:
    """``os.fsync`` for the writer thread that waits until the test opens the gate."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.calls = 0

    def __call__(self, fd: int) -> None:
        self.calls += 1
        self.entered.set()
        assert self.gate.wait(10), "the test never opened the gate"


def _open(tmp_path: Path) -> tuple[ResultsStore, EventHub]:
    layout = ResultsLayout.for_campaign(tmp_path, "t")
    store = ResultsStore(layout)
    store.open("[campaign]\n", "h")
    state = CampaignState(layout.rows_exist)
    return store, EventHub(store, RunControl(), state, storage_retry_s=0.05)


def _texts(path: Path) -> list[str]:
    return [e.text for e in read_events(path) if isinstance(e, Notice)]


async def _seen(hub: EventHub, into: list[Event]) -> None:
    async for ev in hub.subscribe():
        into.append(ev)


def test_events_queued_during_one_fsync_share_the_next(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    reports: list[tuple[int, StorageError | None]] = []
    sync = GatedSync()
    real = event_writer.os.fsync
    event_writer.os.fsync = sync  # type: ignore[assignment]
    try:
        w = EventWriter(path, lambda n, e: reports.append((n, e)))
        w.submit(Notice(text="0"))
        assert sync.entered.wait(10)  # the first batch is syncing: the rest queue behind it
        for i in range(1, 50):
            w.submit(Notice(text=str(i)))
        sync.gate.set()
        w.close()
    finally:
        event_writer.os.fsync = real  # type: ignore[assignment]
    assert _texts(path) == [str(i) for i in range(50)]
    assert reports == [(1, None), (49, None)] and w.batches == 2


def test_a_refused_batch_leaves_no_line_and_later_events_wait_for_resume(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text(event_line(Notice(text="before")))
    reports: list[tuple[int, StorageError | None]] = []
    real = event_writer.os.fsync

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    event_writer.os.fsync = full  # type: ignore[assignment]
    try:
        w = EventWriter(path, lambda n, e: reports.append((n, e)))
        w.submit(Notice(text="refused"))
        w.drain()
        assert not w.submit(Notice(text="behind it"))  # dropped: the owner holds it
    finally:
        event_writer.os.fsync = real  # type: ignore[assignment]
    assert _texts(path) == ["before"]  # the refused line was cut off again
    ((n, err),) = reports
    assert n == 0 and err is not None and err.recoverable
    assert str(err) == f"cannot write {path}: No space left on device"
    w.resume()
    assert w.submit(Notice(text="again"))
    w.close()
    assert _texts(path) == ["before", "again"]


async def test_emit_returns_before_the_fsync_and_is_seen_once_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, hub = _open(tmp_path)
    sync = GatedSync()
    monkeypatch.setattr(event_writer.os, "fsync", sync)
    seen: list[Event] = []
    watcher = asyncio.ensure_future(_seen(hub, seen))
    await asyncio.sleep(0)
    hub.emit(Notice(text="first"))
    hub.emit(RequestDone(cell_id="c"))  # live, behind a durable event not yet on disk
    hub.emit(Notice(text="second"))
    durable = asyncio.ensure_future(hub.durable())
    await asyncio.to_thread(sync.entered.wait, 10)
    await asyncio.sleep(0.05)
    assert not durable.done() and seen == []  # the loop went on; nothing is durable yet
    sync.gate.set()
    await asyncio.wait_for(durable, 10)
    await asyncio.sleep(0)
    assert _texts(store.layout.events) == ["first", "second"]
    assert [getattr(e, "text", e.name) for e in seen] == ["first", "request_done", "second"]
    hub.close()
    await watcher
    store.close()


async def test_a_full_disk_holds_the_events_and_writes_them_once_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, hub = _open(tmp_path)
    real = event_writer.os.fsync
    full = threading.Event()
    full.set()

    def fsync(fd: int) -> None:
        if full.is_set():
            raise OSError(28, "No space left on device")
        real(fd)

    monkeypatch.setattr(event_writer.os, "fsync", fsync)
    for i in range(3):
        hub.emit(Notice(text=str(i)))
    waiting = asyncio.ensure_future(hub.durable())
    for _ in range(200):
        if hub.control.storage_error is not None:
            break
        await asyncio.sleep(0.01)
    assert hub.control.storage_error is not None and not waiting.done()
    hub.emit(Notice(text="3"))  # behind the refused ones
    full.clear()
    await asyncio.wait_for(waiting, 10)
    await hub.durable()
    assert hub.control.storage_error is None and hub.unwritten == 0
    assert _texts(store.layout.events) == ["0", "1", "2", "3"]
    hub.close()
    store.close()


def test_a_run_on_the_next_loop_is_not_held_by_what_the_first_loop_wrote(tmp_path: Path) -> None:
    """The hosts' preflight emits on a loop of its own (a prepare's notice), the campaign on
    the next: the writer's reports of the first went to a loop that is gone, and the
    campaign's ``durable()`` before its first server start must not wait for them forever."""
    store, hub = _open(tmp_path)

    async def preflight() -> None:
        hub.notice("box: model not found; running the plan's prepare")

    async def campaign() -> None:
        hub.notice("the campaign's own")
        await asyncio.wait_for(hub.durable(), 10)

    try:
        asyncio.run(preflight())
        asyncio.run(campaign())
    finally:
        store.close()
    assert _texts(store.layout.events) == [
        "box: model not found; running the plan's prepare",
        "the campaign's own",
    ]

"""The event hub: every event the engine publishes goes through ``emit``, and every observer
(the in-process console, a detached console on the control socket, the headless printer)
reads through ``subscribe``.

- Durable events are folded into the engine's own ``CampaignState`` (the one reducer) at
  once, which is how the scheduler knows a cell's status, and handed to the log's writer
  thread (engine/event_writer.py): the loop that times requests never waits on an fsync.
  Subscribers see an event once it is on disk, in the order of emission (a live event
  waits behind the durable ones before it). Code that must not act before the log holds
  what it emitted (a request part, a server start, a view) awaits ``durable()`` first.
- ``subscribe`` replays the whole log (earlier runs of the campaign included, so a console
  that attaches late knows what they finished), then the live events kept in a ring, then
  follows. A subscriber that falls behind loses live samples, never lifecycle events.
- When the results disk refuses a write, durable events wait in memory, in order, and the
  run is held at its next gate until they are written; the hub retries, and gives up (the
  run then ends with its own exit status) only after ``storage_wait_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from specbench_tui.engine.event_writer import EventWriter
from specbench_tui.engine.run_control import RunControl, StorageFailed
from specbench_tui.engine.store import ResultsStore
from specbench_tui.results.events import Event, Notice
from specbench_tui.results.files import StorageError
from specbench_tui.results.state import CampaignState

_END = object()
#: Live events a subscriber may have queued before newer ones are dropped for it.
SUBSCRIBER_BACKLOG = 5000
#: Refused commands logged at once, and the seconds in which that many are allowed again.
REFUSALS_BURST = 10
REFUSALS_PER_S = 60.0


class EventHub:
    def __init__(
        self,
        store: ResultsStore,
        control: RunControl,
        state: CampaignState,
        *,
        live_history: int = 2000,
        storage_retry_s: float = 2.0,
        storage_wait_s: float = 1800.0,
    ) -> None:
        self.store = store
        self.control = control
        self.state = state
        self._durable: list[Event] = list(store.opening_events)
        self._live: deque[Event] = deque(maxlen=live_history)
        self._subs: set[asyncio.Queue[Any]] = set()
        self._closed = False
        self._unwritten: list[Event] = []  # refused by the disk, in order, written again later
        self._inflight: deque[Event] = deque()  # with the writer thread, not yet durable
        self._held: deque[tuple[Event, int]] = deque()  # seen once that many events are durable
        self._emitted = 0  # durable events emitted
        self._written = 0  # of those, on disk (always the oldest)
        self._progress = asyncio.Event()  # set whenever the writer reports
        self._writer: EventWriter | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._retry: asyncio.Task[None] | None = None
        self._retry_error: StorageError | None = None  # the writer refused what a retry wrote
        self.storage_retry_s = storage_retry_s
        self.storage_wait_s = storage_wait_s
        self._refusal_budget = float(REFUSALS_BURST)
        self._refusal_at = time.monotonic()
        self._refusals_unsaid = 0
        # Called with every event as it is published, after the state took it: engine parts
        # that follow the run's lifecycle in step with it (the energy watch), never a view.
        self.taps: list[Callable[[Event], None]] = []

    # --- publishing ---------------------------------------------------------------------------

    def emit(self, ev: Event) -> None:
        seen = True  # by subscribers now; else once the log holds it (``_released``)
        if ev.durable:
            self._emitted += 1
            seen = not self._write(ev)
            self.state.apply(ev)
        for tap in self.taps:
            tap(ev)
        if seen and not self._held:
            self._show(ev)
        else:
            self._held.append((ev, self._emitted if ev.durable else 0))

    async def settle(self) -> None:
        """Return once the writer thread wrote what it has (not waiting for a disk that
        refuses writes: the end of a run, whose events then stay unwritten as before)."""
        while self._inflight and not self._unwritten and self.control.storage_failed is None:
            self._progress.clear()
            await self._progress.wait()

    def _show(self, ev: Event) -> None:
        (self._durable if ev.durable else self._live).append(ev)
        self._fan_out(ev)

    def _released(self) -> None:
        """Show the held events whose turn has come: in order, each once the durable events
        up to it are on disk (all of them when the disk refuses writes: the run is then
        held at its gate, and consoles go on showing what happens)."""
        while self._held and (self._unwritten or self._held[0][1] <= self._written):
            self._show(self._held.popleft()[0])

    async def durable(self) -> None:
        """Return once every durable event emitted so far is on disk (waiting while the disk
        refuses writes); raises StorageFailed once the store gave up."""
        target = self._emitted
        while self._written < target:
            if self.control.storage_failed is not None:
                raise StorageFailed(self.control.storage_failed)
            self._progress.clear()
            await self._progress.wait()

    def notice(self, text: str, level: str = "info") -> None:
        self.emit(Notice(level=level, text=text))

    def refused(self, text: str) -> None:
        """A command that did not apply, said as a warning; past ``REFUSALS_BURST`` in a row
        within ``REFUSALS_PER_S`` only counted (each sender still gets its answer), so a
        flood of bad commands cannot grow the log or cost a sync each; the next one said
        carries the count."""
        now = time.monotonic()
        self._refusal_budget = min(
            float(REFUSALS_BURST),
            self._refusal_budget + (now - self._refusal_at) * REFUSALS_BURST / REFUSALS_PER_S,
        )
        self._refusal_at = now
        if self._refusal_budget < 1.0:
            self._refusals_unsaid += 1
            return
        self._refusal_budget -= 1.0
        if self._refusals_unsaid:
            n, self._refusals_unsaid = self._refusals_unsaid, 0
            text += f" ({n} more refused command{'s' * (n != 1)} before this not logged)"
        self.notice(text, "warning")

    def _fan_out(self, ev: Event) -> None:
        for q in self._subs:
            if ev.durable or q.qsize() < SUBSCRIBER_BACKLOG:
                q.put_nowait(ev)

    def _write(self, ev: Event) -> bool:
        """Hand ``ev`` to the log; True when it is not on disk yet (with the writer thread,
        whose report releases it)."""
        if self._unwritten:  # keep the log's order: wait behind what is already waiting
            self._unwritten.append(ev)
            return False
        writer = self._writer_now()
        if writer is None:  # no loop runs (a tool, a test setting up): written here, now
            try:
                self.store.append_event(ev)
            except StorageError as exc:
                self._unwritten.append(ev)
                self._storage_down(exc)
                return False
            self._written += 1
            return False
        self._inflight.append(ev)
        writer.submit(ev)  # dropped when it refused an earlier one: its report moves it back
        return True

    def _writer_now(self) -> EventWriter | None:
        """The writer thread, started on the first event emitted on a running loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        if self._writer is not None and loop is not self._loop:
            self._moved_to(loop)
        if self._writer is None:
            try:
                self._writer = self.store.event_writer(self._reported_from_thread)
            except StorageError:
                return None  # the synchronous write says why
            self._loop = loop
        return self._writer

    def _moved_to(self, loop: asyncio.AbstractEventLoop) -> None:
        """Events are emitted on a new loop (the hosts' preflight runs on a loop of its own,
        the campaign on the next): the writer's reports of what it wrote went to the old
        one, which will never run them. Wait for the writer to finish what it holds, take
        its word from its state, and have it report to this loop from now on."""
        assert self._writer is not None
        self._writer.drain()
        self._loop = loop
        if self._writer.failed:  # what it held was dropped: held here, in order
            self._unwritten[:0] = self._inflight
        else:
            self._written += len(self._inflight)
        self._inflight.clear()
        self._released()

    def _reported_from_thread(self, written: int, error: StorageError | None) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._reported, written, error)

    def _reported(self, written: int, error: StorageError | None) -> None:
        """The writer's word, on the loop: ``written`` more events are on disk, or (with
        ``error``) none of those still with it are; those wait in order for the disk."""
        for _ in range(written):
            self._inflight.popleft()
        self._written += written
        if error is not None and self._inflight:
            self._unwritten[:0] = self._inflight
            self._inflight.clear()
            if self._retry is None or self._retry.done():
                self._storage_down(error)
            else:
                self._retry_error = error
        self._released()
        self._progress.set()

    def _storage_down(self, exc: StorageError) -> None:
        self.control.storage_down(exc)
        if not exc.recoverable:
            self.give_up(exc)
            return
        self._fan_out(
            Notice(
                level="error",
                text=f"{exc}; the campaign waits (servers keep running) and goes on once "
                "the write succeeds",
            )
        )
        if self._retry is None or self._retry.done():
            self._retry = asyncio.ensure_future(self._retry_writes(time.monotonic()))

    async def _retry_writes(self, since: float) -> None:
        while self._unwritten:
            await asyncio.sleep(self.storage_retry_s)
            self._retry_error = None
            try:
                await self._write_unwritten()
            except StorageError as exc:
                if time.monotonic() - since > self.storage_wait_s or not exc.recoverable:
                    self.give_up(exc)
                    return
                continue
        self.control.storage_up()
        self._fan_out(Notice(level="info", text="results are written again; the campaign goes on"))

    async def _write_unwritten(self) -> None:
        """Write the held events again, in order; raises StorageError when the disk still
        refuses them (they are held again)."""
        writer = self._writer_now()
        if writer is None:
            while self._unwritten:
                self.store.append_event(self._unwritten[0])
                self._unwritten.pop(0)
                self._written += 1
            return
        writer.resume()
        waiting, self._unwritten = self._unwritten, []
        for ev in waiting:
            self._inflight.append(ev)
            writer.submit(ev)
        target = self._written + len(self._inflight)
        while self._written < target:
            self._progress.clear()
            await self._progress.wait()
            if self._retry_error is not None:
                raise self._retry_error

    def give_up(self, exc: StorageError) -> None:
        """The results cannot be written and waiting did not help: the run ends (exit 3)."""
        self.control.storage_gave_up(exc)
        self._fan_out(Notice(level="error", text=f"{exc}; giving up"))
        self._progress.set()  # a wait for the disk ends with StorageFailed

    @property
    def unwritten(self) -> int:
        """Durable events the disk refused, waiting to be written again."""
        return len(self._unwritten)

    # --- observing ----------------------------------------------------------------------------

    async def subscribe(self) -> AsyncIterator[Event]:
        q: asyncio.Queue[Any] = asyncio.Queue()
        replay = [*self._durable, *self._live]
        closed = self._closed
        if not closed:
            self._subs.add(q)
        try:
            for ev in replay:
                yield ev
            if closed:
                return
            while True:
                ev = await q.get()
                if ev is _END:
                    return
                yield ev
        finally:
            self._subs.discard(q)

    def close(self) -> None:
        """End every subscription (after the last event of the run)."""
        while self._held:  # what the run ended with: shown, durable or not
            self._show(self._held.popleft()[0])
        self._closed = True
        for q in self._subs:
            q.put_nowait(_END)
        if self._retry is not None:
            self._retry.cancel()
            with contextlib.suppress(asyncio.CancelledError, asyncio.InvalidStateError):
                self._retry.exception()

"""The event hub: every event the engine publishes goes through ``emit``, and every observer
(the in-process console, a detached console on the control socket, the headless printer)
reads through ``subscribe``.

- Durable events are on disk before anyone sees them; then they are folded into the engine's
  own ``CampaignState`` (the one reducer), which is how the scheduler knows a cell's status.
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

from specbench_tui.engine.run_control import RunControl
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
        self._unwritten: list[Event] = []
        self._retry: asyncio.Task[None] | None = None
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
        if ev.durable:
            self._write(ev)
            self._durable.append(ev)
            self.state.apply(ev)
        else:
            self._live.append(ev)
        for tap in self.taps:
            tap(ev)
        self._fan_out(ev)

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

    def _write(self, ev: Event) -> None:
        if self._unwritten:  # keep the log's order: wait behind what is already waiting
            self._unwritten.append(ev)
            return
        try:
            self.store.append_event(ev)
        except StorageError as exc:
            self._unwritten.append(ev)
            self._storage_down(exc)

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
            try:
                while self._unwritten:
                    self.store.append_event(self._unwritten[0])
                    self._unwritten.pop(0)
            except StorageError as exc:
                if time.monotonic() - since > self.storage_wait_s or not exc.recoverable:
                    self.give_up(exc)
                    return
                continue
        self.control.storage_up()
        self._fan_out(Notice(level="info", text="results are written again; the campaign goes on"))

    def give_up(self, exc: StorageError) -> None:
        """The results cannot be written and waiting did not help: the run ends (exit 3)."""
        self.control.storage_gave_up(exc)
        self._fan_out(Notice(level="error", text=f"{exc}; giving up"))

    @property
    def unwritten(self) -> int:
        """Durable events still waiting for the disk."""
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
        self._closed = True
        for q in self._subs:
            q.put_nowait(_END)
        if self._retry is not None:
            self._retry.cancel()
            with contextlib.suppress(Exception):
                self._retry.exception()

"""The buffer between the event subscription and the screen.

The subscription can deliver thousands of events a second (a concurrency sweep against a fast
simulator); redrawing per event would starve the key handler. So the reader only appends here
and the app drains everything at a fixed frame rate, applying the batch at once. If the screen
falls far behind, the oldest *live* events (requests, log lines, GPU samples) are dropped and
counted; lifecycle events are never dropped, because the plan tree and the counts depend on
every one of them. No textual import: the policy is tested on its own.
"""

from __future__ import annotations

from collections import deque

from specbench_tui.results.events import Event

#: Live events held before the oldest are dropped: about two seconds of a heavy flood.
DEFAULT_LIVE_LIMIT = 20_000


class EventInbox:
    """Append from the reader, drain from the frame timer; bounded for live events."""

    def __init__(self, live_limit: int = DEFAULT_LIVE_LIMIT) -> None:
        self._items: deque[Event] = deque()
        self._live = 0
        self.live_limit = live_limit
        self.dropped = 0  # live events discarded since start, shown in the log pane title
        self.received = 0

    def put(self, ev: Event) -> None:
        self.received += 1
        self._items.append(ev)
        if not ev.durable:
            self._live += 1
            if self._live > self.live_limit:
                self._drop_oldest_live()

    def _drop_oldest_live(self) -> None:
        """Drop about a tenth of the held live events, oldest first, keeping lifecycle ones in
        order; dropping in chunks keeps this rare and amortised under a sustained flood."""
        target = self.live_limit - self.live_limit // 10
        kept: deque[Event] = deque()
        to_drop = self._live - target
        for ev in self._items:
            if to_drop > 0 and not ev.durable:
                to_drop -= 1
                self.dropped += 1
                self._live -= 1
                continue
            kept.append(ev)
        self._items = kept

    def drain(self) -> list[Event]:
        """Everything received since the last drain, in order."""
        if not self._items:
            return []
        out = list(self._items)
        self._items.clear()
        self._live = 0
        return out

    def __len__(self) -> int:
        return len(self._items)

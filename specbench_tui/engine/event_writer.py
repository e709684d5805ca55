"""The event log's writer thread: durable events are appended to ``events.jsonl`` in the order
they were submitted, one fsync for every batch that queued up while the previous one synced
(group commit).

Why a thread: an fsync costs milliseconds (tens at the tail), and the event loop that would
otherwise wait on it also times the requests of every cell a packed run has in flight. The
loop now only serializes the line and queues it; ``report`` tells the owner, from the
thread, how many of the oldest events it submitted are on disk, or that a write failed.

A failed batch is cut off the file again (to the length it had before the batch) and every
event still queued is dropped: the owner holds them, in order, and submits them again after
``resume()``, so the log never gets a line twice or out of order.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path

from specbench_tui.results.events import Event
from specbench_tui.results.files import StorageError, crash_point, event_line

#: ``report(written, error)``: ``written`` more of the oldest submitted events are durable;
#: with an error, the rest of what was submitted is not (and was dropped).
Report = Callable[[int, StorageError | None], None]


class EventWriter:
    """One thread, one file descriptor opened for appending, batches in submission order."""

    def __init__(self, path: Path, report: Report) -> None:
        self.path = path
        self._report = report
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._cond = threading.Condition()
        self._queue: list[tuple[bytes, str]] = []
        self._busy = False
        self._failed = False
        self._closing = False
        self.batches = 0  # fsyncs done: what the group commit saved is events / batches
        self._thread = threading.Thread(target=self._run, name="event-log", daemon=True)
        self._thread.start()

    def submit(self, ev: Event) -> bool:
        """Queue one durable event (serialized now, as it is now); False when it was dropped
        because a write failed and ``resume()`` has not been called since."""
        line = event_line(ev).encode()
        with self._cond:
            if self._failed or self._closing:
                return False
            self._queue.append((line, ev.name))
            self._cond.notify()
        return True

    def resume(self) -> None:
        """Accept events again after a failed write (the owner then submits what it holds)."""
        with self._cond:
            self._failed = False

    @property
    def failed(self) -> bool:
        """A write failed and ``resume()`` has not been called since."""
        return self._failed

    def drain(self) -> None:
        """Block until everything queued is written or dropped and reported (a synchronous
        caller that writes the file itself, closing, an owner moving to another loop)."""
        with self._cond:
            while self._queue or self._busy:
                self._cond.wait()

    def close(self) -> None:
        """Write what is queued, stop the thread, close the file."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        with contextlib.suppress(OSError):
            os.close(self._fd)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    self._cond.notify_all()
                    return
                batch, self._queue = self._queue, []
                self._busy = True
            error = self._write(batch)
            with self._cond:
                if error is not None:
                    self._failed = True
                    self._queue.clear()  # queued behind the failed batch: the owner holds them
                # Reported before the batch counts as done, so that ``drain`` returning means
                # every report was made (the owner moving to another loop relies on it).
                with contextlib.suppress(RuntimeError):  # the owner's loop closed at exit
                    self._report(0 if error else len(batch), error)
                self._busy = False
                self._cond.notify_all()

    def _write(self, batch: list[tuple[bytes, str]]) -> StorageError | None:
        data = memoryview(b"".join(line for line, _ in batch))
        start: int | None = None
        try:
            start = os.fstat(self._fd).st_size
            while data:
                data = data[os.write(self._fd, data) :]
            os.fsync(self._fd)
        except OSError as exc:
            if start is not None:  # no half line and no line of the batch stays behind
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, start)
            return StorageError(self.path, exc)
        self.batches += 1
        for _, name in batch:
            crash_point(f"event:{name}")
        return None

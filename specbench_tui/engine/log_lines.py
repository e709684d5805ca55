"""Server log lines parsed in a thread of their own, so that neither a flood of lines nor a
slow plan pattern holds up the event loop the client's timings and the console share.

Lines are parsed in arrival order and handed back to the loop in batches; the first time a
plan pattern runs out of time on a line, the operator hears of it once.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable

from specbench_tui.bench.logparse import LogParser
from specbench_tui.plan.log_patterns import PATTERN_TIMEOUT_S
from specbench_tui.results.events import Event, LogLine, Notice

_STOP = object()
_BATCH = 200


class LogLineWorker:
    def __init__(self, parser: LogParser, emit: Callable[[Event], None]) -> None:
        self.parser = parser
        self._emit = emit
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._told: set[str] = set()

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="log-lines", daemon=True)
        self._thread.start()

    def submit(self, group: str, line: str) -> None:
        if self._thread is None:  # not started (a test driving a runner alone): parse here
            self._deliver(self._parse([(group, line)]))
            return
        self._queue.put((group, line))

    def on_line(self, group: str) -> Callable[[str], None]:
        """The callback a service gets for its log lines."""
        return lambda line: self.submit(group, line)

    async def stop(self) -> None:
        """Parse what is queued, then end the thread."""
        if self._thread is None:
            return
        self._queue.put(_STOP)
        await asyncio.to_thread(self._thread.join, 10.0)
        self._thread = None

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            with contextlib.suppress(queue.Empty):
                while len(batch) < _BATCH:
                    batch.append(self._queue.get_nowait())
            stop = _STOP in batch
            items = [b for b in batch if b is not _STOP]
            if items:
                events = self._parse(items)  # type: ignore[arg-type]
                assert self._loop is not None
                with contextlib.suppress(RuntimeError):  # the loop closed under us
                    self._loop.call_soon_threadsafe(self._deliver, events)
            if stop:
                return

    def _parse(self, items: list[tuple[str, str]]) -> list[Event]:
        out: list[Event] = []
        for group, line in items:
            stats, matches = self.parser.parse_line(line)
            out.append(LogLine(group=group, line=line, stats=stats, matches=matches))
        for name in self.parser.timeouts.keys() - self._told:
            self._told.add(name)
            out.append(
                Notice(
                    level="warning",
                    text=f"[logs] {name} took over {PATTERN_TIMEOUT_S * 1000:.0f} ms on a log "
                    "line and was skipped there (and will be on lines like it); simplify the "
                    "pattern to get its figures back",
                )
            )
        return out

    def _deliver(self, events: list[Event]) -> None:
        for ev in events:
            self._emit(ev)

"""What decides whether work goes on: the pause gate, the abort, the results disk, and the
per-group handles through which an operator stops or skips the cell a group is running.

Kept apart from the scheduler so that operator commands, signals and the store can steer a
run without reaching into the group loop, and so that several groups can run at once, each
with a handle of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from specbench_tui.errors import Interrupted, ResultsError
from specbench_tui.results.cells import Cell, ServiceGroup
from specbench_tui.results.files import StorageError

T = TypeVar("T")
StopReason = Literal["pause", "skip", "abort", "restart"]


class AbortRequested(Interrupted):
    """The operator or a signal aborted the run while something long was awaited."""


class StorageFailed(ResultsError):
    """The results could not be written and waiting did not help; the run must end."""

    def __init__(self, error: StorageError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass
class GroupHandle:
    """A running group as commands see it: which cell it runs, and what was asked of it."""

    group: ServiceGroup
    cell: Cell | None = None
    stop: StopReason | None = None  # why the running cell should stop, if it should
    restart: bool = False  # the operator asked for a fresh server
    task: asyncio.Task[object] | None = field(default=None, repr=False)  # the cell in flight

    def ask_stop(self, why: StopReason) -> None:
        """Ask the running cell to stop; an abort also cancels its requests in flight."""
        if self.stop != "abort":
            self.stop = why
        if why == "abort" and self.task is not None and not self.task.done():
            self.task.cancel()


class RunControl:
    def __init__(self) -> None:
        self._running = asyncio.Event()
        self._running.set()
        self._abort = asyncio.Event()
        self._storage_ok = asyncio.Event()
        self._storage_ok.set()
        self.storage_error: StorageError | None = None
        self.storage_failed: StorageError | None = None
        self.groups: dict[str, GroupHandle] = {}
        self._abort_hooks: list[Callable[[], None]] = []

    # --- pause and abort --------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    @property
    def aborted(self) -> bool:
        return self._abort.is_set()

    def pause(self) -> None:
        self._running.clear()
        for h in self.groups.values():
            if h.cell is not None:
                h.ask_stop("pause")

    def resume(self) -> None:
        self._running.set()

    def abort(self) -> None:
        self._abort.set()
        self._running.set()
        for h in self.groups.values():
            h.ask_stop("abort")
        for hook in self._abort_hooks:
            hook()

    def on_abort(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` when the run is aborted (a host then stops waiting for a link that
        is down: an abort must not wait minutes for a host to come back)."""
        self._abort_hooks.append(hook)

    async def gate(self) -> None:
        """Hold while paused or while the results cannot be written (servers and telemetry
        keep running); raise StorageFailed once the store gave up."""
        while True:
            if self.storage_failed is not None:
                raise StorageFailed(self.storage_failed)
            if self._running.is_set() and self._storage_ok.is_set():
                return
            waits = [asyncio.ensure_future(self._running.wait())]
            waits.append(asyncio.ensure_future(self._storage_ok.wait()))
            try:
                await asyncio.wait(waits, return_when=asyncio.ALL_COMPLETED, timeout=1.0)
            finally:
                for w in waits:
                    w.cancel()

    async def unless_aborted(self, awaitable: Awaitable[T]) -> T:
        """Await something long (a GPU wait, a 15-minute start-up) that an abort must cut;
        raises AbortRequested when it does."""
        task = asyncio.ensure_future(awaitable)
        abort = asyncio.ensure_future(self._abort.wait())
        try:
            await asyncio.wait({task, abort}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            abort.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            raise AbortRequested("aborted by the operator")
        return task.result()

    # --- the results disk -------------------------------------------------------------------

    def storage_down(self, error: StorageError) -> None:
        self.storage_error = error
        self._storage_ok.clear()

    def storage_up(self) -> None:
        self.storage_error = None
        self._storage_ok.set()

    def storage_gave_up(self, error: StorageError) -> None:
        self.storage_failed = error
        self._storage_ok.set()
        self._running.set()

    # --- running groups ----------------------------------------------------------------------

    def enter(self, group: ServiceGroup) -> GroupHandle:
        handle = GroupHandle(group)
        self.groups[group.id] = handle
        return handle

    def leave(self, group: ServiceGroup) -> None:
        self.groups.pop(group.id, None)

    def running_cells(self) -> list[tuple[GroupHandle, Cell]]:
        return [(h, h.cell) for h in self.groups.values() if h.cell is not None]

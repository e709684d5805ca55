"""Operator commands on a running campaign: pause, resume, skip, rerun, abort, retry a group.

Each answers with a Reply that says what it did, or why nothing applied; none is a silent
no-op. The scheduler (``Campaign``) owns the state these act on; this mixin keeps the rules
for changing it by hand in one place.
"""

from __future__ import annotations

import asyncio
import fnmatch

from specbench_tui.engine.commands import Command, Reply
from specbench_tui.results.cells import Cell, ServiceGroup
from specbench_tui.results.events import (
    Aborted,
    CellQueued,
    CellSkipped,
    Event,
    Paused,
    Resumed,
)


class OperatorCommands:
    """Mixed into ``Campaign``; the attributes below are the scheduler's."""

    groups: list[ServiceGroup]
    cells: dict[str, Cell]
    status: dict[str, str]
    attempts: dict[str, int]
    current_group: ServiceGroup | None
    current_cell: Cell | None
    _running: asyncio.Event
    _abort_event: asyncio.Event
    _aborted: bool
    _finished: bool
    _interrupt_cell: bool
    _skip_current: bool
    _restart_group: bool

    def _emit(self, ev: Event) -> None:
        raise NotImplementedError

    def _notice(self, text: str, level: str = "info") -> None:
        raise NotImplementedError

    async def send(self, command: Command) -> Reply:
        handler = getattr(self, f"_cmd_{command.action}", None)
        if handler is None:
            return Reply(False, f"unknown command {command.action!r}")
        if self._finished:
            return Reply(False, "the campaign has finished; nothing to " + command.action)
        reply: Reply = handler(command)
        self._notice(reply.text, "info" if reply.ok else "warning")
        return reply

    def _cmd_pause(self, cmd: Command) -> Reply:
        if not self._running.is_set():
            return Reply(False, "already paused")
        self._running.clear()
        if self.current_cell is not None:
            self._interrupt_cell = True
        self._emit(Paused(by=cmd.by))
        what = (
            (
                f"; {self.current_cell.name} stops after its request in flight and runs again "
                "on resume"
            )
            if self.current_cell
            else ""
        )
        return Reply(True, "paused" + what)

    def _cmd_resume(self, cmd: Command) -> Reply:
        if self._running.is_set():
            return Reply(False, "not paused; nothing to resume")
        self._running.set()
        self._emit(Resumed(by=cmd.by))
        return Reply(True, "resumed")

    def _cmd_abort(self, cmd: Command) -> Reply:
        if self._aborted:
            return Reply(False, "already aborting")
        self._aborted = True
        self._abort_event.set()
        self._interrupt_cell = True
        self._running.set()
        self._emit(Aborted(by=cmd.by, reason="operator"))
        return Reply(True, "aborting: stopping the server and writing what exists")

    def _match(self, target: str) -> tuple[list[str], ServiceGroup | None]:
        group = next((g for g in self.groups if g.id == target), None)
        if group is not None:
            return [c.id for c in self.cells.values() if c.group == group.id], group
        ids = [
            cid
            for cid, c in self.cells.items()
            if cid == target
            or fnmatch.fnmatchcase(c.name, target)
            or fnmatch.fnmatchcase(cid, target)
        ]
        return ids, None

    def _cmd_skip(self, cmd: Command) -> Reply:
        if cmd.target is None:
            if self.current_cell is None:
                return Reply(False, "no cell is running; select a cell or group to skip")
            self._skip_current = True
            self._interrupt_cell = True
            return Reply(True, f"skipping {self.current_cell.name}")
        ids, group = self._match(cmd.target)
        if not ids:
            return Reply(False, f"no cell or group matches {cmd.target!r}")
        skipped = 0
        for cid in ids:
            if self.current_cell is not None and cid == self.current_cell.id:
                self._skip_current = True
                self._interrupt_cell = True
                skipped += 1
            elif self.status[cid] in ("pending", "held"):
                self._skip(self.cells[cid], f"skipped by {cmd.by}", cmd.by)
                skipped += 1
        if not skipped:
            return Reply(False, f"nothing to skip in {cmd.target!r}: its cells have ended")
        what = f"group {group.id}" if group else f"{skipped} cell{'s' * (skipped != 1)}"
        return Reply(True, f"skipped {what}")

    def _skip(self, cell: Cell, reason: str, by: str) -> None:
        self.status[cell.id] = "skipped"
        self._emit(
            CellSkipped(
                cell_id=cell.id,
                group=cell.group,
                cell=cell.name,
                attempt=self.attempts[cell.id],
                reason=reason,
                by=by,
            )
        )

    def _requeue(self, cids: list[str], by: str) -> int:
        n = 0
        for cid in cids:
            if self.status[cid] in ("done", "failed", "skipped"):
                self.status[cid] = "pending"
                cell = self.cells[cid]
                self._emit(
                    CellQueued(
                        cell_id=cid,
                        group=cell.group,
                        cell=cell.name,
                        attempt=self.attempts[cid] + 1,
                        by=by,
                    )
                )
                n += 1
        return n

    def _cmd_rerun(self, cmd: Command) -> Reply:
        if cmd.target is None:
            return Reply(False, "select a cell to rerun")
        ids, _ = self._match(cmd.target)
        if not ids:
            return Reply(False, f"no cell matches {cmd.target!r}")
        n = self._requeue(ids, cmd.by)
        if not n:
            return Reply(False, f"{cmd.target!r} is already queued or running")
        return Reply(True, f"queued {n} cell{'s' * (n != 1)} again as a new attempt")

    def _cmd_rerun_failed(self, cmd: Command) -> Reply:
        n = self._requeue([cid for cid, s in self.status.items() if s == "failed"], cmd.by)
        if not n:
            return Reply(False, "no failed cells to rerun")
        return Reply(True, f"queued {n} failed cell{'s' * (n != 1)} again")

    def _cmd_retry_group(self, cmd: Command) -> Reply:
        target = cmd.target or (self.current_group.id if self.current_group else None)
        if target is None:
            return Reply(False, "no group is running; select a group to retry")
        group = next((g for g in self.groups if g.id == target), None)
        if group is None:
            cell = self.cells.get(target)
            group = next((g for g in self.groups if cell and g.id == cell.group), None)
        if group is None:
            return Reply(False, f"no group matches {target!r}")
        if self.current_group is not None and group.id == self.current_group.id:
            self._restart_group = True
            self._interrupt_cell = True
            return Reply(True, f"restarting the server of {group.id}; the group continues")
        failed = [
            c.id
            for c in self.cells.values()
            if c.group == group.id and self.status[c.id] == "failed"
        ]
        n = self._requeue(failed, cmd.by)
        if not n:
            return Reply(False, f"{group.id} has no failed cells to retry")
        return Reply(True, f"{group.id}: {n} cell{'s' * (n != 1)} queued; its server starts again")

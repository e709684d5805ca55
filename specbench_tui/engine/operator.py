"""Operator commands on a running campaign: pause, resume, skip, rerun, abort, retry a group.

Each answers with a Reply that says what it did, or why nothing applied; none is a silent
no-op. Commands read the campaign through the reducer's state and act through the run
control and the hub, never through the scheduler's internals, so the same rules hold
however many groups run at once.
"""

from __future__ import annotations

from collections.abc import Callable

from specbench_tui.engine.commands import Command, Reply
from specbench_tui.engine.hub import EventHub
from specbench_tui.engine.run_control import GroupHandle, RunControl
from specbench_tui.engine.selection import matches
from specbench_tui.results.events import Aborted, CellQueued, CellSkipped, Paused, Resumed
from specbench_tui.results.state import CampaignState, CellState


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


class OperatorCommands:
    def __init__(self, hub: EventHub, control: RunControl, finished: Callable[[], bool]) -> None:
        self.hub = hub
        self.control = control
        self._finished = finished

    @property
    def state(self) -> CampaignState:
        return self.hub.state

    async def send(self, command: Command) -> Reply:
        handler = getattr(self, f"_cmd_{command.action}", None)
        if handler is None:
            return Reply(False, f"unknown command {command.action!r}")
        if self._finished():
            return Reply(
                False,
                f"the campaign has finished; nothing to {command.action.replace('_', ' ')} "
                "(run the plan again with --rerun-failed to rerun its failed cells)",
            )
        reply: Reply = handler(command)
        if reply.ok:
            self.hub.notice(reply.text)
        else:
            self.hub.refused(reply.text)
        return reply

    # --- the whole run ---------------------------------------------------------------------

    def _cmd_pause(self, cmd: Command) -> Reply:
        if self.control.paused:
            return Reply(False, "already paused")
        running = [c.name for _, c in self.control.running_cells()]
        self.control.pause()
        self.hub.emit(Paused(by=cmd.by))
        what = (
            f"; {', '.join(running)} stop after their requests in flight and run again on resume"
            if running
            else ""
        )
        return Reply(True, "paused" + what)

    def _cmd_resume(self, cmd: Command) -> Reply:
        if not self.control.paused:
            return Reply(False, "not paused; nothing to resume")
        self.control.resume()
        self.hub.emit(Resumed(by=cmd.by))
        return Reply(True, "resumed")

    def _cmd_abort(self, cmd: Command) -> Reply:
        if self.control.aborted:
            return Reply(False, "already aborting")
        self.control.abort()
        self.hub.emit(Aborted(by=cmd.by, reason="operator"))
        return Reply(True, "aborting: stopping the servers and keeping what was measured")

    # --- cells and groups ------------------------------------------------------------------

    def _match(self, target: str) -> tuple[list[CellState], str | None]:
        """Cells a target names: a group id (all its cells), a cell id or a name glob."""
        st = self.state
        if target in st.groups:
            return [st.cells[c] for c in st.groups[target].cells if c in st.cells], target
        out = []
        for c in st.cells.values():
            if c.id == target or (c.cell is not None and matches(c.cell, target)):
                out.append(c)
        return out, None

    def _handle_running(self, cell_id: str) -> GroupHandle | None:
        for h, c in self.control.running_cells():
            if c.id == cell_id:
                return h
        return None

    def _cmd_skip(self, cmd: Command) -> Reply:
        if cmd.target is None:
            running = self.control.running_cells()
            if not running:
                return Reply(False, "no cell is running; select a cell or group to skip")
            if len(running) > 1:
                return Reply(False, "several cells are running; select the one to skip")
            handle, cell = running[0]
            handle.ask_stop("skip")
            return Reply(True, f"skipping {cell.name}")
        cells, group = self._match(cmd.target)
        if not cells:
            return Reply(False, f"no cell or group matches {cmd.target!r}")
        skipped = 0
        for c in cells:
            handle = self._handle_running(c.id)
            if handle is not None:
                handle.ask_stop("skip")
                skipped += 1
            elif c.status == "pending":
                self.hub.emit(
                    CellSkipped(
                        cell_id=c.id,
                        group=c.group,
                        cell=c.name,
                        attempt=c.attempt,
                        reason=f"skipped by {cmd.by}",
                        by=cmd.by,
                    )
                )
                skipped += 1
        if not skipped:
            return Reply(False, f"nothing to skip in {cmd.target!r}: its cells have ended")
        return Reply(True, f"skipped {f'group {group}' if group else _plural(skipped, 'cell')}")

    def _requeue(self, cells: list[CellState], by: str) -> int:
        n = 0
        for c in cells:
            if c.status in ("done", "failed", "skipped"):
                self.hub.emit(
                    CellQueued(
                        cell_id=c.id, group=c.group, cell=c.name, attempt=c.attempt + 1, by=by
                    )
                )
                n += 1
        return n

    def _cmd_rerun(self, cmd: Command) -> Reply:
        if cmd.target is None:
            return Reply(False, "select a cell to rerun")
        cells, _ = self._match(cmd.target)
        if not cells:
            return Reply(False, f"no cell matches {cmd.target!r}")
        n = self._requeue(cells, cmd.by)
        if not n:
            return Reply(False, f"{cmd.target!r} is already queued or running")
        return Reply(True, f"queued {_plural(n, 'cell')} again as a new attempt")

    def _cmd_rerun_failed(self, cmd: Command) -> Reply:
        n = self._requeue(self.state.failed_cells(), cmd.by)
        if not n:
            return Reply(False, "no failed cells to rerun")
        return Reply(True, f"queued {_plural(n, 'failed cell')} again")

    def _cmd_retry_group(self, cmd: Command) -> Reply:
        st = self.state
        target = cmd.target
        if target is None:
            running = list(self.control.groups)
            if len(running) != 1:
                return Reply(
                    False,
                    "no group is running; select a group to retry"
                    if not running
                    else "several groups are running; select the one to retry",
                )
            target = running[0]
        gid = target if target in st.groups else None
        if gid is None and target in st.cells:
            gid = st.cells[target].group
        if gid is None:
            return Reply(False, f"no group matches {target!r}")
        handle = self.control.groups.get(gid)
        if handle is not None:
            handle.restart = True
            if handle.cell is not None:
                handle.ask_stop("restart")
            return Reply(True, f"restarting the server of {gid}; the group continues")
        failed = [st.cells[c] for c in st.groups[gid].cells if st.cells[c].status == "failed"]
        n = self._requeue(failed, cmd.by)
        if not n:
            return Reply(False, f"{gid} has no failed cells to retry")
        return Reply(True, f"{gid}: {_plural(n, 'cell')} queued; its server starts again")

"""The console's campaign keys: commands sent to a running campaign, and the same keys after
the end, when they start the engine again on the same results (in-process) or say how.

A mixin of ``ConsoleApp`` (it needs the app's progress, control and notifications), kept
apart so that what each key does to a campaign reads in one place.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from textual import work
from textual.worker import WorkerCancelled, WorkerFailed

from specbench_tui.engine.commands import CampaignControl, Command, Reply
from specbench_tui.engine.replay import rerun_hint
from specbench_tui.errors import InputError, describe
from specbench_tui.results.progress import CampaignProgress
from specbench_tui.tui.plan_tree import NodeRef
from specbench_tui.tui.relaunch import Relaunch
from specbench_tui.tui.screens import ConfirmScreen
from specbench_tui.tui.toasts import ToastBatcher

#: How long after a skip ``u`` takes it back.
UNDO_S = 60.0
#: How long after following moved the selection a key that acts asks first even for one cell
#: (what the operator saw when deciding may be what was shown before).
FOLLOW_SETTLE_S = 2.0

if TYPE_CHECKING:
    from pathlib import Path

    from textual.app import App

    _Base = App[int]
else:
    _Base = object


class CampaignKeys(_Base):
    control: CampaignControl
    progress: CampaignProgress
    relaunch: Relaunch | None
    toasts: ToastBatcher
    _restarting: bool = False
    _last_skip: tuple[list[str], float] | None = None  # cells the last skip took, and when
    follow: bool = True
    followed_at: float = float("-inf")  # when following last moved the selection

    if TYPE_CHECKING:  # provided by the app

        def selected_ref(self) -> NodeRef | None: ...
        def cell_ids_under(self, ref: NodeRef) -> list[str]: ...
        def results_root(self) -> Path | None: ...
        def engine_running(self) -> bool: ...
        def switch_control(self, control: CampaignControl) -> None: ...
        def start_engine(self) -> None: ...
        def now_mono(self) -> float: ...

    # --- sending ------------------------------------------------------------------------

    def send(self, action: str, target: str | None = None) -> None:
        """Send without blocking the keys; the answer comes back as a notification."""
        self._send(Command(action=action, target=target, by="console"))  # type: ignore[arg-type]

    @work(group="commands")
    async def _send(self, command: Command) -> Reply:
        try:
            reply = await self.control.send(command)
        except Exception as exc:  # a worker's error would end the console: said as the reply
            reply = Reply(False, f"{command.action} failed: {describe(exc)}")
        if self.toasts.answer(reply.text, "reply", self.now_mono()):
            self.notify(
                reply.text,
                title=command.action.replace("_", " "),
                severity="information" if reply.ok else "warning",
                timeout=5,
                markup=False,
            )
        return reply

    def _say(self, text: str, severity: str = "warning", timeout: float = 6) -> None:
        self.notify(text, severity=severity, timeout=timeout, markup=False)  # type: ignore[arg-type]

    # --- the state the keys depend on ---------------------------------------------------

    @property
    def ended(self) -> bool:
        """The campaign's latest run has ended (finished or aborted, or nothing runs it)."""
        p = self.progress
        return p.finished or self.control.read_only

    def _refused_read_only(self) -> bool:
        """In a read-only view (nothing runs the campaign, nothing can start it here) a key
        that would change it says so in one line, with how to run it again, and True."""
        if not self.control.read_only or self.relaunch is not None:
            return False
        root = self.results_root()
        again = (
            f"to run it again: specbench-tui PLAN --results {root.parent} "
            f"(PLAN: the plan you ran; a copy is {root}/plan.toml)"
            if root is not None
            else "run its plan again to change it"
        )
        self._say(f"read-only view, nothing runs this campaign; {again}", timeout=10)
        return True

    def _not_restartable(self) -> bool:
        """After the end, with nothing to restart with: say how, and True."""
        if self.relaunch is not None:
            return False
        root = self.results_root()
        where = rerun_hint(root) if root is not None else "run the plan again"
        self._say(f"the campaign has ended; {where}", timeout=15)
        return True

    def _target(self, ref: NodeRef | None) -> str | None:
        """The command target for a tree node: a cell id, a group id or a name glob."""
        if ref is None:
            return None
        if ref.kind in ("cell", "group"):
            return ref.key
        if ref.kind == "workload":
            return f"{ref.key}*"
        return None

    def _group_of(self, ref: NodeRef | None) -> str | None:
        p = self.progress
        if ref is None:
            return p.current_group
        if ref.kind == "group":
            return ref.key
        if ref.kind == "cell" and ref.key in p.cells:
            return p.cells[ref.key].group
        if ref.kind == "workload":
            return ref.key.rpartition("/")[0]
        return p.current_group

    def _describe(self, ref: NodeRef) -> str:
        return {"cell": "cell", "group": "group", "workload": "workload", "host": "host"}.get(
            ref.kind, "node"
        ) + f" {ref.key}"

    # --- keys ---------------------------------------------------------------------------

    def action_toggle_pause(self) -> None:
        if self._refused_read_only():
            return
        if self.ended:
            self._resume_after_end()
            return
        self.send("resume" if self.progress.paused else "pause")

    def action_pause(self) -> None:
        if self._refused_read_only():
            return
        self.send("pause")

    def action_resume(self) -> None:
        if self._refused_read_only():
            return
        if self.ended:
            self._resume_after_end()
            return
        self.send("resume")

    def action_skip(self) -> None:
        if self._refused_read_only():
            return
        if self.ended:
            self._say("the campaign has ended; nothing is running to skip")
            return
        ref = self.selected_ref()
        target = self._target(ref)
        if ref is not None and ref.kind == "cell" and ref.key == self.progress.current_cell:
            target = ref.key
        if ref is None or target is None:  # the running cell, as the engine picks it
            current = self.progress.current_cell
            self._skip(target, [current] if current else [])
            return
        cells = self.cell_ids_under(ref)
        p = self.progress
        running = [c for c in cells if p.cells[c].status == "running"]
        pending = [c for c in cells if p.cells[c].status == "pending"]
        if not running and not pending:
            self._say(f"nothing to skip in {self._describe(ref)}: its cells have ended", timeout=4)
            return
        if len(running) + len(pending) <= 1 and not self._just_followed():
            self._skip(target, running + pending)  # the one cell pointed at: no question
            return
        ended = len(cells) - len(running) - len(pending)
        parts = [f"{len(running)} running (cut short, not measured)"] if running else []
        if pending:
            parts.append(f"{len(pending)} not run yet")
        kept = f" Its {ended} finished or failed cells stay as they are." if ended else ""
        n = len(running) + len(pending)
        moved = " Following moved to it a moment ago." if n == 1 else ""
        self._confirm(
            f"Skip {self._describe(ref)}? {_cells(n)} {'is' if n == 1 else 'are'} skipped: "
            f"{', '.join(parts)}.{kept}{moved} u undoes it for a minute; r queues them "
            "again later.",
            "Skip",
            lambda: self._skip(target, running + pending),
        )

    def _just_followed(self) -> bool:
        """Whether following moved the selection so lately that a key may have been meant
        for what was shown before: then a key that acts asks first, naming its target."""
        return self.follow and self.now_mono() - self.followed_at < FOLLOW_SETTLE_S

    # --- an undo-able skip ------------------------------------------------------------------

    @work(group="commands")
    async def _skip(self, target: str | None, cells: list[str]) -> None:
        """Skip, and keep which cells it took for ``u``: the engine cannot take a skip back,
        but it queues a skipped cell again (as a rerun does), which is the same for the
        operator as long as the campaign still runs."""
        reply = await self._send(Command("skip", target=target, by="console")).wait()
        if reply is not None and reply.ok and cells:
            self._last_skip = (cells, self.now_mono())
            self._say(
                f"{len(cells)} cell{'s' * (len(cells) != 1)} skipped: u undoes it "
                f"(for {UNDO_S:.0f} s)",
                severity="information",
                timeout=6,
            )

    def action_undo_skip(self) -> None:
        if self._refused_read_only():
            return
        last = self._last_skip
        if last is None or self.now_mono() - last[1] > UNDO_S:
            self._say("no skip to undo (u undoes the last skip for a minute)", timeout=4)
            return
        if self.ended:
            self._say("the campaign has ended; r runs the skipped cells again", timeout=6)
            return
        cells = [
            c
            for c in last[0]
            if c in self.progress.cells and self.progress.cells[c].status == "skipped"
        ]
        self._last_skip = None
        if not cells:
            self._say("nothing to undo: the skipped cells are queued or ran again", timeout=4)
            return
        self._unskip(cells)

    @work(group="commands")
    async def _unskip(self, cells: list[str]) -> None:
        """Queue each skipped cell again, one command per cell (a group's rerun would also
        re-measure its finished cells)."""
        queued = 0
        for cid in cells:
            try:
                reply = await self.control.send(Command("rerun", target=cid, by="console"))
            except Exception as exc:  # one cell's refusal must not end the others' (or the console)
                reply = Reply(False, describe(exc))
            queued += reply.ok
        left = len(cells) - queued
        self._say(
            f"skip undone: {queued} cell{'s' * (queued != 1)} queued again"
            + (f", {left} not (see the log)" if left else ""),
            severity="information" if not left else "warning",
            timeout=6,
        )

    def _confirm(self, question: str, yes: str, go: Any, no: str = "Cancel") -> None:
        """Ask before a key that acts on many cells or on a server; ``go`` runs on yes."""

        def answered(answer: bool | None) -> None:
            if answer:
                go()

        self.push_screen(ConfirmScreen(question, yes=yes, no=no), answered)

    def action_rerun(self) -> None:
        if self._refused_read_only():
            return
        ref = self.selected_ref()
        target = self._target(ref)
        if ref is None or (target is None and ref.kind != "host"):
            self._say("select a cell, workload or group in the plan tree to rerun", timeout=4)
            return
        cells = self.cell_ids_under(ref)
        p = self.progress
        done = [c for c in cells if p.cells[c].status == "done"]
        if self.ended:
            if self._not_restartable():
                return
            what = f"{len(cells)} cell{'s' * (len(cells) != 1)} of {self._describe(ref)}"
            self._confirm_rerun(ref, cells, done, lambda: self._restart(cells, False, what))
            return
        if target is None:  # a host: no command names it; its groups one by one
            self._say("select a group, workload or cell of the host to rerun", timeout=4)
            return
        self._confirm_rerun(ref, cells, done, lambda: self.send("rerun", target))

    def _confirm_rerun(self, ref: NodeRef, cells: list[str], done: list[str], go: Any) -> None:
        """Re-measuring finished cells replaces the figures that count: several at once
        only after a yes. One cell the operator pointed at needs no question."""
        if (len(cells) <= 1 or not done) and not self._just_followed():
            go()
            return

        def answered(yes: bool | None) -> None:
            if yes:
                go()

        if not done:
            said = "Following moved to it a moment ago."
        else:
            said = (
                f"All {len(cells)} of its cells have"
                if len(done) == len(cells)
                else f"{len(done)} of its {len(cells)} cells have"
            ) + (
                " finished: they are measured again as a new attempt, which then counts "
                "(the earlier rows stay on disk)."
            )
        self.push_screen(
            ConfirmScreen(
                f"Rerun {self._describe(ref)}? {said}",
                yes="Rerun",
                no="Cancel",
            ),
            answered,
        )

    def action_rerun_failed(self) -> None:
        if self._refused_read_only():
            return
        if not self.ended:
            self.send("rerun_failed")
            return
        failed = [c.id for c in self.progress.failed_cells()]
        if not failed:
            self._say("no failed cells to rerun")
            return
        if self._not_restartable():
            return
        self._restart([], True, f"{len(failed)} failed cell{'s' * (len(failed) != 1)}")

    def action_retry_group(self) -> None:
        """A server restart costs minutes on a large model and cuts the running cell short,
        so it is asked first, saying what it stops and what runs again."""
        if self._refused_read_only():
            return
        gid = self._group_of(self.selected_ref())
        p = self.progress
        if not self.ended:
            if gid is None or gid not in p.groups:
                self.send("retry_group", gid)  # the engine says why it cannot
                return
            cells = [p.cells[c] for c in p.groups[gid].cells]
            running = [c for c in cells if c.status == "running"]
            failed = [c for c in cells if c.status == "failed"]
            if gid in p.running_groups:
                cut = (
                    f"its {_cells(len(running), 'running cell')} ({running[0].name}) is cut "
                    "short and runs again whole once the server is back; "
                    if running
                    else ""
                )
                question = (
                    f"Restart the server of {gid}? The server is stopped and started again: "
                    f"{cut}restarting a server can take minutes on a large model."
                )
            else:
                question = (
                    f"Retry {gid}? Its {_cells(len(failed), 'failed cell')} are queued again "
                    "and its server starts again when their turn comes (restarting a server "
                    "can take minutes on a large model)."
                )
            self._confirm(question, "Restart", lambda: self.send("retry_group", gid))
            return
        if gid is None or gid not in p.groups:
            self._say("select a service group to retry")
            return
        failed_ids = [c for c in p.groups[gid].cells if p.cells[c].status == "failed"]
        if not failed_ids:
            self._say(f"{gid} has no failed cells to retry")
            return
        if self._not_restartable():
            return
        self._confirm(
            f"Retry {gid}? The campaign starts again to run its "
            f"{_cells(len(failed_ids), 'failed cell')}; its server starts first, which can "
            "take minutes on a large model.",
            "Retry",
            lambda: self._restart(failed_ids, False, f"the failed cells of {gid}"),
        )

    def _resume_after_end(self) -> None:
        p = self.progress
        left = [c for c in p.cells.values() if c.status == "pending"]
        if not left:
            self._say("the campaign has finished; nothing is left to run (r reruns the selection)")
            return
        if self._not_restartable():
            return
        self._restart([], False, f"the {len(left)} cells not run yet")

    def action_abort(self) -> None:
        if self._refused_read_only():
            return
        if self.ended:
            self._say("the campaign has already ended", timeout=4)
            return
        n = self.progress.counts
        running = _cells(n.running, "running cell")
        self._confirm(
            f"Abort the campaign? {running} {'is' if n.running == 1 else 'are'} stopped "
            f"(run again whole next time) and the {_cells(n.pending)} not run yet are left; "
            f"the {n.done} finished are kept. Running the plan again resumes.",
            "Abort",
            lambda: self.send("abort"),
            no="Keep running",
        )

    # --- after the end: the engine again, on the same results ----------------------------

    def _restart(self, rerun: Sequence[str], rerun_failed: bool, what: str) -> None:
        """One restart at a time: a second key press while one is being prepared is said,
        not queued (a cancelled preparation would leave the results directory locked)."""
        if self._restarting:
            self._say("the campaign is already being started again", severity="information")
            return
        self._restarting = True
        self._restart_worker(rerun, rerun_failed, what)

    @work(group="restart")
    async def _restart_worker(self, rerun: Sequence[str], rerun_failed: bool, what: str) -> None:
        try:
            await self._restart_now(rerun, rerun_failed, what)
        finally:
            self._restarting = False

    async def _restart_now(self, rerun: Sequence[str], rerun_failed: bool, what: str) -> None:
        assert self.relaunch is not None
        if self.engine_running():
            self._say(
                "the campaign is still writing its results; starting as soon as it is done",
                severity="information",
                timeout=4,
            )
        while self.engine_running():
            await self._wait_engine()
        self._say(f"starting the campaign again: {what}", severity="information", timeout=4)
        try:
            control = await self.relaunch.start(rerun=rerun, rerun_failed=rerun_failed)
        except InputError as exc:
            self._say(str(exc), severity="error", timeout=15)
            return
        except Exception as exc:  # a host check or the results directory: keep the console
            msg = f"could not start the campaign again: {describe(exc)}"
            self._say(msg, severity="error", timeout=15)
            return
        self.switch_control(control)
        self.start_engine()

    async def _wait_engine(self) -> None:
        for w in list(self.workers):
            if w.group == "engine" and w.is_running:
                with contextlib.suppress(WorkerFailed, WorkerCancelled):  # said where it ended
                    await w.wait()


def _cells(n: int, noun: str = "cell") -> str:
    """``1 cell``, ``3 cells``: the counts the questions say."""
    return f"{n} {noun}{'s' * (n != 1)}"

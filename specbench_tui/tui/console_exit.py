"""Leaving the console: quitting (stopping the campaign it runs, or not), detaching, and the exit
status and summary it leaves with.

A mixin of ``ConsoleApp`` (tui/app.py), which holds the state these read."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

from textual import work

from specbench_tui.engine.commands import ChildEngine, Command
from specbench_tui.tui.screens import ConfirmScreen
from specbench_tui.tui.summary import exit_summary

#: Exit status when the console is closed before the campaign finished (as for Ctrl-C).
EXIT_INTERRUPTED = 130
#: Exit status of a console detached from the campaign it started (which goes on running).
EXIT_DETACHED = 0
#: Longest the console waits for a child to take the abort when the operator quits.
LEAVE_S = 2.0
#: Longest wait for an in-process campaign to stop after quitting mid-run.
QUIT_GRACE_S = 20.0


class Leaving:
    """Leaving the console."""

    async def action_quit(self) -> None:
        """Textual's own quit (the palette's Quit) asks like q does."""
        self.action_request_quit()

    def child_control(self) -> ChildEngine | None:
        """The process this console started for the campaign, while it runs (it can be
        detached from, and it ends its run on its own); else None."""
        return self.control.child_engine()

    def action_request_quit(self) -> None:
        screen = self.screen
        if isinstance(screen, ConfirmScreen) and screen.purpose == "quit":
            screen.dismiss(True)  # a second ctrl+c (or q) while asked: yes
            return
        engine = self.engine_running()
        child = self.child_control()
        if child is not None and not self.progress.campaign:
            # still starting (loading, checking hosts): nothing ran, nothing to keep
            self._stop_child_and_leave(child)
            return
        if self.ended or self.stream_ended or not self.progress.campaign or self.detached:
            if engine and child is None and not self._leave_after_engine:
                # in-process: the run ended but still writes its views and report here
                self._leave_after_engine = True
                self.notify(
                    "the campaign is writing its report; leaving when it is done "
                    "(q again leaves now)",
                    timeout=QUIT_GRACE_S,
                )
                self.set_timer(QUIT_GRACE_S, lambda: self.exit(self.campaign_exit_code()))
                return
            # a child writes its views and report on its own: the terminal is not held
            self.exit(self.campaign_exit_code())
            return

        def answered(choice: bool | str | None) -> None:
            if choice == "detach":
                self.action_detach()
                return
            if not choice:
                return
            if not self.engine_running():
                self.exit(EXIT_INTERRUPTED)
                return
            self._quitting = True
            child = self.child_control()
            if child is not None:
                self._stop_child_and_leave(child)
                return
            # in-process: stop the campaign cleanly (server stopped, results flushed) and
            # leave when the engine returns; a stuck engine does not keep the console open
            self.send("abort")
            self.notify("stopping the campaign…", timeout=QUIT_GRACE_S)
            self.set_timer(QUIT_GRACE_S, lambda: self.exit(EXIT_INTERRUPTED))

        detachable = self.child_control() is not None
        self.push_screen(
            ConfirmScreen(
                "Quit? The campaign stops: the running cell is cut short and runs again "
                "next time. Finished cells are kept; running the plan again resumes."
                + (
                    " Detach leaves it running in its own process (specbench-tui --attach "
                    f"{self.results_root()} comes back to it)."
                    if detachable
                    else ""
                ),
                yes="Quit",
                no="Stay",
                purpose="quit",
                other="Detach" if detachable else None,
            ),
            answered,
        )

    @work(group="leaving", exclusive=True)
    async def _stop_child_and_leave(self, child: ChildEngine) -> None:
        """Quit: the abort goes to the child and the console leaves at once; the child
        stops its server and writes its views and report in its own time. A child that
        does not take the abort (still starting, or stuck) gets SIGTERM, which aborts the
        same way once it runs."""
        self._quitting = True
        self._leaving_pid = child.engine_pid
        try:
            reply = await asyncio.wait_for(child.send_now(Command("abort", by="console")), LEAVE_S)
            delivered = reply.ok
        except (OSError, TimeoutError):
            delivered = False
        if not delivered:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.engine_pid, signal.SIGTERM)
        self.exit(EXIT_INTERRUPTED)

    def action_detach(self) -> None:
        """Leave the console and let the campaign go on headless; ``--attach`` comes back."""
        if self.view_only or (self.read_only and not self.engine_running()):
            self._say_view("nothing runs this campaign here: q leaves")
            return
        if self.detached:
            self.exit(self.campaign_exit_code())  # an attached console leaves it running anyway
            return
        child = self.child_control()
        if child is None:
            if self.engine_running():
                self._say_view(
                    "this campaign runs inside the console's own process and cannot go on "
                    "without it; q stops it",
                    timeout=6,
                )
            else:
                self.exit(self.campaign_exit_code())  # nothing runs: as q
            return
        self._detached_by_operator = True
        self._leaving_pid = child.engine_pid
        self.exit(EXIT_DETACHED)

    def campaign_exit_code(self) -> int:
        """The campaign's exit code if it finished; 0 when leaving a campaign that goes on (an
        attached or detached console); else 130 (interrupted)."""
        p = self.progress
        if self._detached_by_operator or (self.control.detached and not p.finished):
            return EXIT_DETACHED  # the campaign goes on: closing a view of it is no failure
        if self._quitting:
            return EXIT_INTERRUPTED
        if p.finished and p.exit_code is not None:
            return p.exit_code
        if self.engine_exit_code is not None:
            return self.engine_exit_code
        return EXIT_INTERRUPTED

    def summary_lines(self, code: int) -> list[str]:
        child = self.child_control()
        return exit_summary(
            self.progress,
            self.results_root(),
            code,
            detached=self.detached,
            writing_pid=child.engine_pid if child is not None else None,
        )

"""The campaign console: a Textual app that follows a campaign through ``CampaignControl``.

It only ever subscribes to events and sends commands, so the same app works on a campaign in
this process, on one in another process (through its control socket) and on an ended one
(its log replayed read-only). Data flows one way:

    control.subscribe() -> reader task -> EventInbox -> frame timer (20 Hz) -> CampaignProgress,
    LiveData, GpuHistory -> panes

The reader never touches a widget; the frame timer applies whatever arrived since the last
frame in one go, so a flood of thousands of events a second costs a few list operations per
frame and keys stay responsive. Plots redraw on their own slower timer, and only when their
data changed; clock-driven text (elapsed, uptime, ETA) repaints once a second. The results
table is computed from the results directory in a worker thread, after cells finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar

import polars as pl
from textual import events, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Static, Tree
from textual.widgets._footer import FooterKey
from textual.widgets.tree import TreeNode

from specbench_tui.engine.commands import CampaignControl, ChildEngine, Command
from specbench_tui.errors import InputError
from specbench_tui.results.events import (
    CampaignFinished,
    Event,
)
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.progress import CampaignProgress
from specbench_tui.tui import keymap
from specbench_tui.tui.campaign_keys import CampaignKeys
from specbench_tui.tui.detail import DetailPane
from specbench_tui.tui.frame import (
    HEALTH_GPU_S,
    FrameChanges,
    Repaint,
    ToastSpec,
    TreeRepaint,
    ViewState,
    fold_batch,
    plan_repaint,
)
from specbench_tui.tui.gpu_history import GpuHistory
from specbench_tui.tui.group_logs import GroupLogs, stored_log_tail
from specbench_tui.tui.header import CampaignHeader
from specbench_tui.tui.health import HealthPane
from specbench_tui.tui.inbox import EventInbox
from specbench_tui.tui.log_pane import LogPane
from specbench_tui.tui.look import palette_for
from specbench_tui.tui.messages import MessageBar
from specbench_tui.tui.palette import ConsoleCommands
from specbench_tui.tui.plan_filter import FilterSet, PlanFilter, PlanFilterInput
from specbench_tui.tui.plan_tree import NodeRef, PlanTree
from specbench_tui.tui.plots import LiveData, PlotsPane
from specbench_tui.tui.relaunch import Relaunch
from specbench_tui.tui.results_pane import ResultsPane
from specbench_tui.tui.results_source import comparison
from specbench_tui.tui.screens import ConfirmScreen, HelpScreen
from specbench_tui.tui.summary import exit_summary
from specbench_tui.tui.themes import DEFAULT_THEME, load_all_themes, resolve_theme_name
from specbench_tui.tui.toasts import Toast, ToastBatcher

#: Exit status when the console is closed before the campaign finished (as for Ctrl-C).
EXIT_INTERRUPTED = 130
#: Exit status of a console detached from the campaign it started (which goes on running).
EXIT_DETACHED = 0
#: Terminals shorter than this give the message line a row only while it has a message.
SHORT_H = 24
#: Longest the console waits for a child to take the abort when the operator quits.
LEAVE_S = 2.0
#: ``--refresh HZ``: how often the console applies what arrived and repaints (frames). The
#: default keeps a live campaign's log and counts current to the eye; an idle campaign costs
#: the 1 s tick only (under 10 KB/s of terminal output at 200x60: bench/console_terminal_bench).
DEFAULT_REFRESH_HZ = 20.0
FRAME_S = 0.05  # at most 20 frames a second, whatever --refresh says
PLOT_S = 0.25  # redraw changed plots at most 4 times a second
CLOCK_S = 1.0  # elapsed, uptime, ETA, GPU lines; results freshness (longer below 1 Hz)
#: Events handled per reader step before yielding to the UI: a replay of a long campaign or a
#: flood must not hold the event loop.
READER_CHUNK = 256
#: Events older than this when they arrive are history (replay): no notification for them.
REPLAY_AGE_S = 30.0
#: Longest wait for an in-process campaign to stop after quitting mid-run.
QUIT_GRACE_S = 20.0
#: While the results pane is hidden (the plots hold its slot during a run) the table is still
#: recomputed, at most this often, so the pane is never empty when it comes into view at the end.
HIDDEN_RESULTS_S = 10.0

#: Panes the number keys toggle, in screen order.
PANE_TITLES: dict[str, str] = {
    "tree": "Plan",
    "detail": "Detail",
    "health": "Service & GPUs",
    "plots": "Live",
    "results": "Results",
    "logpane": "Log",
}
#: Panes that share the middle of the right column: showing one hides the other.
SLOT = ("plots", "results")


class PlanNavigated(events.Event):
    """The operator moved the tree cursor themselves: stop following the running cell."""


class ResultsComputed(Message):
    """The results table, computed in a worker thread (which never touches a widget)."""

    def __init__(self, frame: pl.DataFrame | None, note: str) -> None:
        super().__init__()
        self.frame = frame
        self.note = note


def _while_mounted(method: Callable[..., None]) -> Callable[..., None]:
    """For timer callbacks: while the app starts or shuts down, panes come and go one by
    one (and a modal screen hides them from queries); a tick that finds one missing skips
    this frame instead of failing the app. The next tick paints what it missed."""

    @functools.wraps(method)
    def guarded(self: App[int], *args: Any, **kwargs: Any) -> None:
        with contextlib.suppress(NoMatches):
            method(self, *args, **kwargs)

    return guarded


class ConsolePlanTree(PlanTree):
    """The plan tree, telling the app when a move came from the operator rather than from
    following, which is what turns following off."""

    _NAV_KEYS: ClassVar[frozenset[str]] = frozenset(
        {
            "up",
            "down",
            "pageup",
            "pagedown",
            "home",
            "end",
            "shift+up",
            "shift+down",
            "shift+left",
            "shift+right",
            "left",
            "right",
        }
    )

    def on_key(self, event: events.Key) -> None:
        if event.key in self._NAV_KEYS:
            self.post_message(PlanNavigated())

    def on_click(self, event: events.Click) -> None:
        self.post_message(PlanNavigated())


class ConsoleFooter(Footer):
    """The footer, its less needed keys marked so a compact screen can drop them (CSS) and
    keep Help and Quit in view."""

    def _view_only(self) -> bool:
        return isinstance(self.app, ConsoleApp) and self.app.view_only

    def _paused(self) -> bool:
        return isinstance(self.app, ConsoleApp) and self.app.progress.paused

    def compose(self) -> ComposeResult:
        for widget in super().compose():
            if isinstance(widget, FooterKey):
                if widget.action in keymap.MUTATIONS and self._view_only():
                    continue  # a read-only view: keys that cannot act are not offered
                if widget.action in keymap.FOOTER_WIDE_ONLY:
                    widget.add_class("-wide-only")
                if widget.action == "toggle_pause" and self._paused():
                    widget.description = "Resume"
            yield widget


class ConsoleApp(CampaignKeys, App[int]):
    """The console. ``clock`` exists so tests and snapshots can freeze time-dependent text
    (elapsed, uptime, ETA); ``SPECBENCH_TUI_FROZEN_TIME=<epoch seconds>`` does the same from
    outside. ``relaunch`` (an in-process console) lets r, R and g start the engine again
    after the end; ``results_source`` computes the results table from a results directory."""

    CSS_PATH = "app.tcss"
    TITLE = "specbench"
    COMMANDS: ClassVar[set[Any]] = App.COMMANDS | {ConsoleCommands}

    #: The key table: the footer, the help screen and the palette are all built from it.
    BINDINGS: ClassVar[list[BindingType]] = keymap.BINDINGS
    HELP: ClassVar[dict[str, str]] = keymap.HELP

    def __init__(
        self,
        control: CampaignControl,
        theme: str | None = None,
        *,
        clock: Callable[[], float] | None = None,
        theme_dirs: list[Any] | None = None,
        relaunch: Relaunch | None = None,
        results_source: Callable[[Path], pl.DataFrame] | None = comparison,
        refresh_hz: float = DEFAULT_REFRESH_HZ,
    ) -> None:
        super().__init__()
        self.refresh_hz = refresh_hz
        self.control = control
        self.relaunch = relaunch
        self.results_source = results_source
        self.progress = CampaignProgress()
        self.live = LiveData()
        self.gpu_history = GpuHistory()
        self.group_logs = GroupLogs()
        self.inbox = EventInbox()
        self.toasts = ToastBatcher()
        frozen = os.environ.get("SPECBENCH_TUI_FROZEN_TIME")
        if clock is None and frozen:
            frozen_at = float(frozen)
            clock = lambda: frozen_at  # noqa: E731
        self.clock: Callable[[], float] = clock or time.time
        self.follow = True
        self.stream_ended = False
        self.frames = 0  # batches applied (the bench reads these)
        self.plot_draws = 0
        self.results_computed = 0  # results tables computed (tests read it)
        self._followed: str | None = None
        self.followed_at = float("-inf")  # monotonic time following last moved the selection
        self._selected: NodeRef | None = None
        self._auto_hidden: set[str] = set()
        self._request_cells: set[str] = set()
        self._seeded: set[str] = set()  # groups whose stored log was read into ``group_logs``
        # An attached console's groups whose stored log it read, and when (the stream's lines
        # from before are in it: fold_batch drops them).
        self._log_read: dict[str, float] = {}
        self._noted: str | None = None  # the group whose missing stored log was said
        self._quitting = False
        self._health_due = False  # GPU samples came in that the health pane does not show yet
        self._health_at = float("-inf")  # monotonic time the health pane was last painted
        self._detached_by_operator = False
        self._leaving_pid: int | None = None  # the child still running when the console left
        self.start_error: Exception | None = None  # the child failed before its campaign ran
        self._leave_after_engine = False
        self._history_before = 0.0  # events before this (epoch s) are history after a restart
        self._results_due: float | None = None  # monotonic time the table is to be recomputed
        self._results_at: float | None = None  # monotonic time of the last recomputation
        self._results_mtime: float | None = None
        self._results_busy = False
        self.engine_exit_code: int | None = None
        self._user_display: dict[str, bool] = {}
        self._user_wrap: bool | None = None
        self._startup_notes: list[tuple[str, str]] = []
        if control.note:
            self._startup_notes.append((control.note, "information"))
        self.console_themes, errors = load_all_themes(theme_dirs)
        for th in self.console_themes.values():
            self.register_theme(th)
        for err in errors:
            self._startup_notes.append((f"theme file skipped: {err}", "warning"))
        chosen = resolve_theme_name(theme, self.console_themes, set(self.available_themes))
        if theme is not None and chosen is None:
            self._startup_notes.append(
                (
                    f"unknown theme {theme!r}; using {DEFAULT_THEME}. "
                    f"Known: {', '.join(self.console_themes)}",
                    "warning",
                )
            )
        fallback = DEFAULT_THEME if DEFAULT_THEME in self.console_themes else "textual-dark"
        self.theme = chosen or fallback

    # --- facts about the control ----------------------------------------------------------

    @property
    def read_only(self) -> bool:
        return self.control.read_only

    @property
    def view_only(self) -> bool:
        """Nothing runs this campaign and nothing can start it from here: the keys that
        would change it are hidden and refused (``CampaignKeys._refused_read_only``)."""
        return self.control.read_only and self.relaunch is None

    @property
    def health_pending(self) -> bool:
        """GPU samples came in that the health pane shows at its next repaint (held back to
        ``HEALTH_GPU_S``); tests wait for it as for the inbox."""
        return self._health_due

    @property
    def detached(self) -> bool:
        """Leaving leaves the campaign running: an attached console, or one detached."""
        return self.control.detached or self._detached_by_operator

    def results_root(self) -> Path | None:
        """The campaign's results directory: what the control knows (its path is right
        from any working directory), else what the campaign said when it started."""
        root = self.control.results_root
        if root is None and self.relaunch is not None:
            root = self.relaunch.results_root
        if root is None and self.progress.results_dir:
            root = Path(self.progress.results_dir)
        return Path(root) if root is not None else None

    @property
    def main(self) -> Screen[Any]:
        """The console's own screen. ``App.query_one`` looks only at the screen on top, so
        while help or a question is open the panes must be found here, or the frame that
        applies events would find nothing and lose its batch."""
        stack = self.screen_stack
        if not stack:  # starting or shutting down: as if the panes were not there
            raise NoMatches("the console's screen is not up")
        return stack[0]

    def engine_running(self) -> bool:
        return any(w.group == "engine" and w.is_running for w in self.workers)

    def now_mono(self) -> float:
        return time.monotonic()

    # --- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield CampaignHeader(id="header")
        yield Static(self._banner_text(), id="banner", markup=False)
        with Horizontal(id="body"):
            with Vertical(id="left"):
                yield ConsolePlanTree(id="tree")
                yield PlanFilterInput()
                yield DetailPane(id="detail")
            with Vertical(id="right"):
                yield HealthPane(id="health")
                yield PlotsPane(id="plots")
                yield ResultsPane(id="results")
                yield LogPane(id="logpane")
        yield MessageBar(id="messages", classes="-empty")
        yield ConsoleFooter(compact=True)

    def _banner_text(self) -> str:
        """The read-only view's one line: that nothing runs the campaign, and how to."""
        root = self.results_root()
        if root is None:
            return "read-only: nothing runs this campaign; run its plan again to continue it"
        return (
            f"read-only: nothing runs this campaign · run it again: specbench-tui PLAN "
            f"--results {root.parent}  (PLAN: the plan you ran; a copy is {root}/plan.toml)"
        )

    def on_mount(self) -> None:
        self.main.query_one("#banner").display = self.view_only
        self.main.query_one(PlanFilterInput).display = False
        for pane_id, title in PANE_TITLES.items():
            pane = self.main.query_one(f"#{pane_id}")
            pane.add_class("pane")
            if pane_id != "results":  # it titles itself (TP, sort)
                pane.border_title = title
        self.theme_changed_signal.subscribe(self, self._on_theme_changed)
        self._apply_size(self.size.width, self.size.height)
        self.main.query_one(PlanTree).focus()
        for text, severity in self._startup_notes:
            self.notify(text, severity=severity, timeout=10, markup=False)  # type: ignore[arg-type]
        period = 1.0 / self.refresh_hz
        self.set_interval(max(FRAME_S, period), self._frame)
        self.set_interval(max(PLOT_S, period), self._redraw_plots)
        self.set_interval(max(CLOCK_S, period), self._tick)
        if self.control.owns_engine:
            # a campaign this console starts: whatever its log already holds is history,
            # however recent (an earlier run that ended a moment ago raises no toast)
            self._history_before = time.time()
        self._read_events()
        self.start_engine()
        self._paint()

    def on_resize(self, event: events.Resize) -> None:
        self._apply_size(event.size.width, event.size.height)

    def _apply_size(self, width: int, height: int) -> None:
        """Compact below 100x32: the plots and the results fold away (4 and 6 bring them
        back) so that the tree, the health lines and the log keep room to be read at 80x24."""
        compact = width < 100 or height < 32
        self.main.set_class(compact, "-compact")
        self.main.set_class(height < SHORT_H, "-short")  # the message line only when it speaks
        self.main.set_class(width >= 180 and height >= 45, "-wide")
        self._auto_hidden = {"plots", "results"} if compact else self._slot_default()
        if self._user_wrap is None:  # a narrow log is unreadable cut: it wraps there
            self.main.query_one(LogPane).set_wrap(width < 100)
        self._apply_panes()

    def _slot_default(self) -> set[str]:
        """Which of plots and results the middle slot leaves out by default: the results
        once the campaign has ended (that is what one comes back for), the plots before."""
        return {"plots"} if self.ended else {"results"}

    def _apply_panes(self) -> None:
        for pane_id in PANE_TITLES:
            shown = self._user_display.get(pane_id, pane_id not in self._auto_hidden)
            self.main.query_one(f"#{pane_id}").display = shown
        left_shown = any(self.main.query_one(f"#{p}").display for p in ("tree", "detail"))
        self.main.query_one("#left").display = left_shown
        right = ("health", "plots", "results", "logpane")
        self.main.query_one("#right").display = any(
            self.main.query_one(f"#{p}").display for p in right
        )
        if self.main.query_one("#plots").display:
            self._redraw_plots(force=True)
        if self.main.query_one("#results").display and self._results_due is None:
            self._results_due = time.monotonic()  # shown: make sure it is current

    # --- the event stream -----------------------------------------------------------------------

    @work(exclusive=True, group="events")
    async def _read_events(self) -> None:
        """Read the subscription into the inbox; touches no widget. Yields to the UI every
        ``READER_CHUNK`` events, since a queue that is never empty never yields by itself."""
        n = 0
        inbox = self.inbox
        try:
            async for ev in self.control.subscribe():
                inbox.put(ev)
                n += 1
                if n % READER_CHUNK == 0:
                    await asyncio.sleep(0)
        except Exception as exc:  # a dropped socket or an engine crash: say so, keep the UI
            if isinstance(exc, InputError) and not self.progress.campaign:
                return  # the child failed to start: _run_engine says so and leaves
            self.notify(
                f"lost the campaign's event stream: {exc}",
                severity="error",
                timeout=30,
                markup=False,
            )
        if inbox is self.inbox:
            self.stream_ended = True

    def start_engine(self) -> None:
        """A campaign this console owns runs in (or is waited for from) the console's event
        loop (its ``start_engine``); an attached or replayed one needs nothing here."""
        if self.control.owns_engine:
            self._run_engine(self.control)

    @work(group="engine")
    async def _run_engine(self, control: CampaignControl) -> None:
        try:
            code = await control.start_engine()
        except InputError as exc:
            if control is self.control and not self.progress.campaign:
                # the child ended before its campaign ran (bad input, a host down): the
                # command line says its message once the terminal is back
                self.start_error = exc
                self.exit(exc.exit_code)
                return
            self.notify(
                f"the campaign engine stopped: {exc}", severity="error", timeout=60, markup=False
            )
            code = 1
        except Exception as exc:
            self.notify(
                f"the campaign engine stopped: {exc}", severity="error", timeout=60, markup=False
            )
            code = 1
        if control is self.control:
            self.engine_exit_code = code
        if self._quitting or self._leave_after_engine:
            self.exit(self.campaign_exit_code())

    def switch_control(self, control: CampaignControl) -> None:
        """Follow a new run of the campaign (a restart after the end). Its subscription
        replays the whole log, so the state is rebuilt from nothing; what happened before
        now is history and raises no notification."""
        self.control = control
        self.progress = CampaignProgress()
        self.live.clear()
        self.gpu_history.clear()
        self.group_logs.clear()
        self._seeded.clear()
        self._log_read.clear()
        self.inbox = EventInbox()
        self.stream_ended = False
        self.engine_exit_code = None
        self._history_before = time.time()
        self._followed = None
        self._read_events()

    @_while_mounted
    def _frame(self) -> None:
        batch = self.inbox.drain()
        if batch:
            self.apply_batch(batch)
        elif self._health_due and time.monotonic() - self._health_at >= HEALTH_GPU_S:
            self._paint_health(self.clock(), time.monotonic())  # the samples held back
        for toast in self.toasts.due(time.monotonic()):
            self._show_toast(toast)

    def apply_batch(self, batch: list[Event]) -> None:
        """Apply one frame's events: the state and what to repaint first (``tui/frame.py``,
        pure), then only the widgets they name."""
        was_ended, was_paused = self.ended, self.progress.paused
        changes = fold_batch(self.progress, batch, self._is_live, self._log_read)
        if self.progress.paused != was_paused:
            self.refresh_bindings()  # the footer's p says Resume while paused
        tree = self.main.query_one(PlanTree)
        view = ViewState(time.monotonic(), self._results_due, self._health_due, self._health_at)
        repaint = plan_repaint(
            changes, view, self.progress.groups, lambda: tree.needs_rebuild(self.progress)
        )
        self._paint_frame(repaint, changes, batch, view.now)
        if self.ended != was_ended:
            self._apply_size(self.size.width, self.size.height)  # the slot's default changed

    def _paint_frame(
        self, repaint: Repaint, changes: FrameChanges, batch: list[Event], now: float
    ) -> None:
        """Do what ``repaint`` says (the painter of ``apply_batch``): it decides nothing, but
        hands the frame's data (log lines, samples, requests) to the widgets that keep it."""
        tree = self.main.query_one(PlanTree)
        logpane = self.main.query_one(LogPane)
        for host in repaint.tree.hosts:
            tree.relabel_host(host)
        self._request_cells |= changes.request_cells
        if repaint.clear_live:
            self.live.clear()
        self._results_due = repaint.results_due
        for t in repaint.toasts:
            self._add_toast(t, now)
        for t in repaint.notices:
            if self.toasts.answer(t.text, "notice", now):
                self._add_toast(t, now)
        if changes.ended is not None:
            self._announce_end(changes.ended)
        for gid, lines in changes.log.items():
            self.group_logs.add(gid, lines)
            if gid == logpane.group:
                logpane.add(lines)
        self.gpu_history.ingest(batch)
        logpane.dropped = self.inbox.dropped
        self.live.ingest(batch, self.progress.started_at)
        self._paint_tree(tree, repaint.tree)
        if self.follow:
            self._follow_current()
        if repaint.sync_log:
            self._sync_log()
        self.frames += 1
        clock = self.clock()
        self.main.query_one(CampaignHeader).show(self.progress, clock, live=not self.read_only)
        self._health_due = repaint.health_due
        if repaint.health:
            self._paint_health(clock, now)
        if repaint.detail:
            self._show_detail()

    def _add_toast(self, t: ToastSpec, now: float) -> None:
        self.toasts.add(t.text, now, severity=t.severity, title=t.title, noun=t.noun)  # type: ignore[arg-type]

    def _paint_tree(self, tree: PlanTree, plan: TreeRepaint) -> None:
        if plan.rebuild:
            self._rebuild_tree()
        elif plan.relabel_all:
            tree.relabel_all()
        else:
            for cid in plan.cells:
                tree.relabel_cell(cid)
            for gid in plan.groups:
                tree.relabel_group(gid)

    def _rebuild_tree(self) -> None:
        tree = self.main.query_one(PlanTree)
        tree.build(self.progress)
        self._followed = None
        title = PANE_TITLES["tree"]
        if tree.only_failed:
            title += " · failed only (F: all)"
        if tree.filter.active:
            title += f" · {tree.filter.text.strip()} ({len(tree.shown_matches)})"
        self.main.query_one("#tree").border_title = title
        narrowed = tree.filter.active or tree.only_failed
        hidden = self._selected is not None and self._selected.kind != "root"
        if narrowed and hidden and self._selected not in tree.nodes_by_ref:
            # The detail must not stay on what the tree no longer shows: the first cell the
            # tree keeps, or nothing.
            kept = [r for r in tree.nodes_by_ref if r.kind == "cell"]
            self._selected = kept[0] if kept else None
            self._show_detail()
        if not self.follow and self._selected is not None:
            tree.reveal(self._selected)

    def _is_live(self, ev: Event) -> bool:
        """Whether an event is news rather than replayed history: only news deserves a
        notification (attaching to a long campaign must not replay a storm of toasts). The
        stream has no replay marker, so an event's age decides, and after a restart of the
        engine everything before it is history."""
        if self.read_only:
            return False
        return ev.ts >= self._history_before and self.clock() - ev.ts < REPLAY_AGE_S

    def _show_toast(self, toast: Toast) -> None:
        timeout = 5 if toast.count == 1 else 6  # with the cooldown: two on screen at most
        hint = "\n(F shows the failed cells)" if "failed" in toast.title and toast.count > 1 else ""
        self.notify(
            toast.text + hint,
            title=toast.title,
            severity=toast.severity,  # type: ignore[arg-type]
            timeout=timeout,
            markup=False,
        )

    def _announce_end(self, ev: CampaignFinished) -> None:
        for toast in self.toasts.due(time.monotonic(), flush=True):
            self._show_toast(toast)
        word = "aborted" if self.progress.aborted else "finished"
        checks = len(self.progress.failed_checks())
        bad = f", {checks} failed check{'s' * (checks != 1)}" if checks else ""
        again = "r, R, g run cells again; " if self.relaunch is not None else ""
        self.notify(
            f"campaign {word}: {ev.finished} done, {ev.failed} failed, "
            f"{ev.skipped} skipped{bad} (exit {ev.exit_code}); {again}q to leave",
            severity="error"
            if ev.failed or self.progress.aborted
            else "warning"
            if checks
            else "information",
            timeout=30,
            markup=False,
        )

    # --- painting -------------------------------------------------------------------------------

    def _paint_health(self, clock: float, now: float) -> None:
        self._health_due = False
        self._health_at = now
        self.main.query_one(HealthPane).show(self.progress, clock, self.gpu_history)

    def _paint(self) -> None:
        now = self.clock()
        self.main.query_one(CampaignHeader).show(self.progress, now, live=not self.read_only)
        self._paint_health(now, time.monotonic())
        self._show_detail()

    @_while_mounted
    def _tick(self) -> None:
        self._paint()
        self._results_tick()
        self._paint_messages()  # an expired message goes

    @_while_mounted
    def _redraw_plots(self, force: bool = False) -> None:
        running = [g for g in self.progress.groups.values() if g.status == "running"]
        speculative = not running or any(g.speculative for g in running)
        self.plot_draws += self.main.query_one(PlotsPane).redraw(
            self.live, force=force, speculative=speculative, groups=self.plotted_groups()
        )
        if self._request_cells:
            # request counts of running cells: only the cell's own label changes (its
            # ancestors count settled cells), and at this rate even a flood costs nothing
            tree = self.main.query_one(PlanTree)
            for cid in self._request_cells:
                node = tree.nodes_by_ref.get(NodeRef("cell", cid))
                if node is not None:
                    tree.relabel_node(node)
            if self._selected is not None and self._selected.key in self._request_cells:
                self._show_detail()
            self._request_cells.clear()

    def plotted_groups(self) -> dict[str, str] | None:
        """Whose series the plots draw, and their labels: every running group and the
        selected one (``▸`` marks it), as ``config TPn`` (``@host`` once several hosts run);
        None while nothing runs and nothing is selected (then every series)."""
        p = self.progress
        gids = list(p.running_groups)
        selected = self.selected_group() if self._selected is not None else None
        if selected is not None and selected not in gids:
            gids.append(selected)
        gids = [g for g in gids if g in p.groups]
        if not gids:
            return None
        hosts = {p.groups[g].host for g in gids}
        labels: dict[str, str] = {}
        for gid in gids:
            g = p.groups[gid]
            label = f"{g.config or gid} TP{g.tp}" + (f"@{g.host}" if len(hosts) > 1 else "")
            labels[gid] = ("▸" if gid == selected and len(gids) > 1 else "") + label
        return labels

    def _show_detail(self) -> None:
        tree = self.main.query_one(PlanTree)
        ref = self._selected
        cells = tree.cell_ids_under(ref) if ref is not None else []
        self.main.query_one(DetailPane).show(self.progress, ref, cells, self.clock())

    def _on_theme_changed(self, _theme: object) -> None:
        self.main.query_one(PlanTree).relabel_all()
        self.main.query_one(LogPane).retheme()
        self._paint()
        self._redraw_plots(force=True)
        self.main.query_one(ResultsPane)._redraw()

    # --- the results table ------------------------------------------------------------------

    def _results_tick(self) -> None:
        """Once a second: recompute the table when a cell finished a moment ago, or when the
        cells view on disk changed (the engine writes it when a cell ends, off its loop;
        the request view only now and then); while the pane is hidden, at most every
        ``HIDDEN_RESULTS_S``, so that it shows a table the moment it is shown."""
        root = self.results_root()
        if self.results_source is None or root is None:
            return
        with contextlib.suppress(OSError):
            mtime = ResultsLayout(root).cells.stat().st_mtime
            if mtime != self._results_mtime:
                self._results_mtime = mtime
                self._results_due = self._results_due or time.monotonic()
        due = self._results_due
        now = time.monotonic()
        if due is None or now < due or self._results_busy:
            return
        hidden = not self.main.query_one("#results").display
        if hidden and self._results_at is not None and now - self._results_at < HIDDEN_RESULTS_S:
            return  # kept current while hidden, but not at every cell's end
        self._results_due = None
        self._results_busy = True
        self._results_at = now
        self._compute_results(root)

    @work(thread=True, group="results", exclusive=True)
    def _compute_results(self, root: Path) -> None:
        assert self.results_source is not None
        try:
            frame = self.results_source(root)
            note = ""
        except Exception as exc:  # a results directory mid-write, a report bug: say so
            frame, note = None, f"results not computed: {type(exc).__name__}: {exc}"
        self.post_message(ResultsComputed(frame, note))

    def on_results_computed(self, message: ResultsComputed) -> None:
        self._results_busy = False
        self.results_computed += 1
        self._show_results(message)

    @_while_mounted
    def _show_results(self, message: ResultsComputed) -> None:
        """A table computed while the console was leaving finds no pane: it is dropped."""
        pane = self.main.query_one(ResultsPane)
        if message.frame is None:
            pane.show(pane.frame, message.note)  # keep the last good table, say why
        else:
            pane.show(message.frame, message.note)

    # --- the tree -------------------------------------------------------------------------------

    def _follow_target(self) -> NodeRef | None:
        """What following shows: the running cell of the group it shows while that group
        runs one (packed groups start cells in turn: hopping between them every second or
        two left no time to act on one), else the running cell started last, else the
        current group."""
        p = self.progress
        shown = self._selected.key if self._selected is not None else None
        group = p.cells[shown].group if shown in p.cells else None
        if group is not None:
            own = [c for c in p.cells.values() if c.group == group and c.status == "running"]
            if own:
                return NodeRef("cell", max(own, key=lambda c: c.started_at or 0.0).id)
        if p.current_cell:
            return NodeRef("cell", p.current_cell)
        return NodeRef("group", p.current_group) if p.current_group else None

    def _follow_current(self) -> None:
        tree = self.main.query_one(PlanTree)
        ref = self._follow_target()
        if ref is None or ref.key == self._followed:
            return
        if tree.reveal(ref, collapse_others=True) is None:
            return  # not in the tree (filtered out)
        if self._followed is not None:  # a move from one shown target to another
            self.followed_at = self.now_mono()
        self._followed = ref.key
        self._selected = ref
        self._show_detail()
        self._sync_log()

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[NodeRef]) -> None:
        self._selected = event.node.data
        if not self.screen_stack:  # a highlight still queued as the console closes
            return
        self._show_detail()
        self._sync_log()
        self._redraw_plots(force=True)

    # --- whose log and series ---------------------------------------------------------------

    def selected_group(self) -> str | None:
        """The group the selection belongs to (a group, one of its workloads or cells), else
        the latest running group of a selected host, else the current group, else the one
        started last (an ended campaign)."""
        p = self.progress
        ref = self._selected
        if ref is not None:
            if ref.kind == "group" and ref.key in p.groups:
                return ref.key
            if ref.kind == "workload":
                gid = ref.key.rpartition("/")[0]
                if gid in p.groups:
                    return gid
            if ref.kind == "cell" and ref.key in p.cells:
                return p.cells[ref.key].group
            if ref.kind == "host":
                on = p.running_on(ref.key)
                if on:
                    return on[-1].id
        if p.current_group is not None:
            return p.current_group
        started = [g for g in p.groups.values() if g.started_at is not None]
        if started:
            return max(started, key=lambda g: g.started_at or 0.0).id
        return next(iter(p.groups), None)

    def group_status(self, gid: str) -> str:
        """Whether a group still runs, for the log pane's title."""
        p = self.progress
        g = p.groups.get(gid)
        if g is None:
            return ""
        if self.read_only:
            return "stored log (not running)"
        if gid in p.running_groups:
            return "running" if g.server != "starting" else "running · server starting"
        if g.status == "pending" and g.server == "pending":
            return "not started"
        return f"ended ({g.status})" if g.status not in ("pending", "running") else "stopped"

    def _group_lines(self, gid: str) -> list[str]:
        """What is kept of a group's log; a group the console has no lines of and that no
        longer runs (it ran before the console attached, or nothing runs the campaign) is
        read from its stored log, once. In the console that runs the campaign a running
        group waits for its lines: they are on their way in the event stream, and reading
        its file too would show them twice. An attached console reads the file of every
        group it shows, running or not, once: the stream replays only the campaign's last
        events, which may hold an earlier server's crash and none of the newer runs' lines;
        the stream's lines from before the read are dropped (they are in the file)."""
        attached = not self.control.owns_engine and not self.read_only
        if attached and gid not in self._seeded:
            self._seeded.add(gid)
            read_at = time.time()
            root = self.results_root()
            stored = stored_log_tail(ResultsLayout(root).log_of(gid)) if root else None
            if stored is not None:  # else the stream's lines are all there is
                self._log_read[gid] = read_at
                self.group_logs.seed(gid, stored, replace=True)
            return self.group_logs.lines(gid)
        if (
            not self.group_logs.has(gid)
            and gid not in self._seeded
            and gid not in self.progress.running_groups
        ):
            self._seeded.add(gid)
            root = self.results_root()
            stored = stored_log_tail(ResultsLayout(root).log_of(gid)) if root else None
            if stored:
                self.group_logs.seed(gid, stored)
        return self.group_logs.lines(gid)

    def _sync_log(self) -> None:
        """Show the selected group's log, its title saying whose it is and whether it runs."""
        gid = self.selected_group()
        logpane = self.main.query_one(LogPane)
        if gid is None:
            return
        running = list(self.progress.running_groups)
        hint = ""
        if len(running) > 1:
            where = f"{running.index(gid) + 1} of " if gid in running else ""
            hint = f"{where}{len(running)} running (n: next)"
        lines = self._group_lines(gid) if gid != logpane.group else []
        logpane.show_group(gid, lines, self.group_status(gid), hint)
        if self.read_only and not logpane.lines and gid != self._noted:
            self._noted = gid
            root = self.results_root()
            logpane.note(f"(no stored log for {gid} in {root}/logs/)")

    def action_next_running_group(self) -> None:
        """Cycle the selection (and with it the log and the plots' marked series) through
        the groups that run now, in start order; following stops, as for any move."""
        running = list(self.progress.running_groups)
        if not running:
            self._say_view("no group is running now", timeout=3)
            return
        current = self.selected_group()
        nxt = (
            running[(running.index(current) + 1) % len(running)]
            if current in running
            else running[0]
        )
        self.follow = False
        self._selected = NodeRef("group", nxt)
        self.main.query_one(PlanTree).reveal(self._selected)
        self._show_detail()
        self._sync_log()
        self._redraw_plots(force=True)

    def _on_notify(self, event: Any) -> None:
        """Textual's handler of a notification (it keeps it, with its timeout); the console
        says it on its message line (tui/messages.py), never in a toast over a pane."""
        super()._on_notify(event)
        self._paint_messages()

    def _paint_messages(self) -> None:
        """The message line: the newest live notification (expired ones gone)."""
        if not self.screen_stack:
            return
        live = [n for n in self._notifications if not n.has_expired]
        with contextlib.suppress(NoMatches):
            self.main.query_one(MessageBar).show(live, palette_for(self))

    def _say_view(self, text: str, timeout: float = 3) -> None:
        self.notify(text, timeout=timeout, markup=False)

    def on_tree_node_expanded(self, event: Tree.NodeExpanded[NodeRef]) -> None:
        self.main.query_one(PlanTree).relabel_node(event.node)

    def on_tree_node_collapsed(self, event: Tree.NodeCollapsed[NodeRef]) -> None:
        self.main.query_one(PlanTree).relabel_node(event.node)

    def on_plan_navigated(self, _event: PlanNavigated) -> None:
        if self.follow:
            self.follow = False
            self.notify("following off: f follows the running cell again", timeout=3)

    def _selected_node(self) -> TreeNode[NodeRef] | None:
        return self.main.query_one(PlanTree).cursor_node

    def selected_ref(self) -> NodeRef | None:
        node = self._selected_node()
        return node.data if node is not None else None

    def cell_ids_under(self, ref: NodeRef) -> list[str]:
        return self.main.query_one(PlanTree).cell_ids_under(ref)

    # --- view actions ---------------------------------------------------------------------------

    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        self._followed = None
        if self.follow:
            self._follow_current()
        self.notify("following the running cell" if self.follow else "following off", timeout=2)

    def action_toggle_failed_only(self) -> None:
        tree = self.main.query_one(PlanTree)
        tree.only_failed = not tree.only_failed
        self._rebuild_tree()
        n = len(tree.shown_failures)
        self.notify(
            f"plan: failed cells only ({n})" if tree.only_failed else "plan: every cell",
            timeout=3,
        )

    def action_filter_tree(self) -> None:
        """ctrl+f: type words of a name or a status; the tree keeps the cells that match."""
        self._user_display["tree"] = True
        self._apply_panes()
        box = self.main.query_one(PlanFilterInput)
        box.display = True
        box.value = self.main.query_one(PlanTree).filter.text
        box.focus()

    def on_filter_set(self, message: FilterSet) -> None:
        tree = self.main.query_one(PlanTree)
        tree.filter = PlanFilter(message.text)
        box = self.main.query_one(PlanFilterInput)
        box.display = tree.filter.active
        self._rebuild_tree()
        tree.focus()
        if tree.filter.active:
            n = len(tree.shown_matches)
            self.notify(f"plan: {n} cell{'s' * (n != 1)} match (ctrl+f, esc clears)", timeout=3)

    def action_search_log(self) -> None:
        self._user_display["logpane"] = True
        self._apply_panes()
        self.main.query_one(LogPane).open_search()

    def action_freeze_log(self) -> None:
        frozen = self.main.query_one(LogPane).toggle_freeze()
        self.notify(
            "log view frozen; the campaign keeps running (l to follow)"
            if frozen
            else "log view following again",
            timeout=3,
        )

    def action_wrap_log(self) -> None:
        wrapped = self.main.query_one(LogPane).toggle_wrap()
        self._user_wrap = wrapped
        self.notify(
            "log lines wrap (w cuts them again)"
            if wrapped
            else "log lines cut at the edge: ← → scroll the focused log sideways",
            timeout=3,
        )

    def action_maximize_pane(self) -> None:
        screen = self.screen
        if screen.maximized is not None:
            screen.minimize()
        elif screen.focused is not None:
            screen.maximize(screen.focused)

    def action_toggle_pane(self, pane_id: str) -> None:
        pane = self.main.query_one(f"#{pane_id}")
        show = not pane.display
        self._user_display[pane_id] = show
        if show and pane_id in SLOT:  # plots and results share a slot: one at a time
            for other in SLOT:
                if other != pane_id:
                    self._user_display[other] = False
        self._apply_panes()
        if show and pane_id == "results":
            self.main.query_one("#results-table").focus()
        if not show and self.focused is None:
            self.main.query_one(PlanTree).focus()

    def action_next_theme(self) -> None:
        names = list(self.console_themes) or [self.theme]
        i = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(i + 1) % len(names)]
        self.notify(f"theme: {self.theme}", timeout=2)

    def action_set_theme(self, name: str) -> None:
        self.theme = name

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.key_table()))

    def action_save_screenshot(self) -> None:
        """An SVG of the screen as it is, into the results directory (``screenshots/``),
        else the working directory: somewhere the operator can find it again."""
        root = self.results_root()
        directory = root / "screenshots" if root is not None and root.is_dir() else Path.cwd()
        name = f"console-{time.strftime('%Y%m%dT%H%M%S')}-{int(time.time() * 1000) % 1000:03d}.svg"
        try:
            directory.mkdir(exist_ok=True)
            path = self.save_screenshot(filename=name, path=str(directory))
        except OSError as exc:
            self.notify(f"screenshot not saved: {exc}", severity="error", timeout=8, markup=False)
            return
        self.notify(f"screenshot saved: {path}", timeout=6, markup=False)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Textual's palette commands less Quit and Screenshot: the console's own (from the
        key table) ask before quitting and save into the results directory."""
        for cmd in super().get_system_commands(screen):
            if cmd.title not in ("Screenshot", "Quit"):  # the console's own are in its table
                yield cmd

    # --- leaving --------------------------------------------------------------------------

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

    # --- keys, help, palette --------------------------------------------------------------------

    def key_table(self) -> list[tuple[str, str, str]]:
        rows: list[tuple[str, str, str]] = []
        for b in self.BINDINGS:
            assert isinstance(b, Binding)
            if b.id in keymap.ALIASES:
                continue
            keys = ", ".join(
                self.get_key_display(Binding(k.strip(), b.action)) for k in b.key.split(",")
            )
            rows.append((keys, b.description, self.HELP.get(b.action, "")))
        rows.extend(keymap.PANE_KEYS)
        return rows

    def palette_commands(self) -> list[tuple[str, str, str]]:
        """(title, help, action) for the command palette."""
        out: list[tuple[str, str, str]] = [
            ("Pause campaign", "pause after the running cell", "pause"),
            ("Resume campaign", "start cells again after a pause", "resume"),
        ]
        for b in self.BINDINGS:
            assert isinstance(b, Binding)
            if b.id in keymap.ALIASES or b.action == "toggle_pause":
                continue
            title = keymap.PALETTE_TITLES.get(b.action, b.description)
            if b.action.startswith("toggle_pane") and b.action not in keymap.PALETTE_TITLES:
                title = f"Toggle {b.description.lower()}"
            out.append((title, self.HELP.get(b.action, ""), b.action))
        for name in self._theme_names():
            out.append((f"Theme: {name}", "switch the console theme", f"set_theme('{name}')"))
        return out

    def _theme_names(self) -> Iterable[str]:
        yield from self.console_themes


def run_console(
    control: CampaignControl,
    theme: str | None = None,
    *,
    relaunch: Relaunch | None = None,
    refresh_hz: float = DEFAULT_REFRESH_HZ,
) -> int:
    """Open the console on a campaign and return the exit status: the campaign's own when it
    finished, 130 when the operator left before the end. Prints what happened on the way
    out (counts, results directory, report)."""
    app = ConsoleApp(control, theme, relaunch=relaunch, refresh_hz=refresh_hz)
    result = app.run()
    if app.start_error is not None:
        raise app.start_error
    code = result if isinstance(result, int) else app.campaign_exit_code()
    for line in app.summary_lines(code):
        print(line)
    return code

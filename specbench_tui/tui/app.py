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
import os
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
from textual.screen import Screen
from textual.widgets import Footer, Static
from textual.widgets._footer import FooterKey

from specbench_tui.engine.commands import CampaignControl
from specbench_tui.errors import InputError
from specbench_tui.results.events import (
    CampaignFinished,
    Event,
)
from specbench_tui.results.progress import CampaignProgress
from specbench_tui.tui import keymap
from specbench_tui.tui.campaign_keys import CampaignKeys
from specbench_tui.tui.console_exit import Leaving
from specbench_tui.tui.console_layout import PANE_TITLES, PaneLayout
from specbench_tui.tui.console_log import LogView
from specbench_tui.tui.console_messages import MessagesView
from specbench_tui.tui.console_results import ResultsView
from specbench_tui.tui.console_tree import PlanNavigated, TreeView
from specbench_tui.tui.detail import DetailPane
from specbench_tui.tui.frame import (
    HEALTH_GPU_S,
    FrameChanges,
    Repaint,
    ToastSpec,
    ViewState,
    fold_batch,
    plan_repaint,
)
from specbench_tui.tui.gpu_history import GpuHistory
from specbench_tui.tui.group_logs import GroupLogs
from specbench_tui.tui.header import CampaignHeader
from specbench_tui.tui.health import HealthPane
from specbench_tui.tui.inbox import EventInbox
from specbench_tui.tui.log_pane import LogPane
from specbench_tui.tui.messages import MessageBar
from specbench_tui.tui.mounted import while_mounted
from specbench_tui.tui.palette import ConsoleCommands
from specbench_tui.tui.plan_filter import PlanFilterInput
from specbench_tui.tui.plan_tree import NodeRef, PlanTree
from specbench_tui.tui.plots import LiveData, PlotsPane
from specbench_tui.tui.relaunch import Relaunch
from specbench_tui.tui.results_pane import ResultsPane
from specbench_tui.tui.results_source import comparison
from specbench_tui.tui.screens import HelpScreen
from specbench_tui.tui.themes import DEFAULT_THEME, load_all_themes, resolve_theme_name
from specbench_tui.tui.toasts import Toast, ToastBatcher

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


class ConsoleApp(
    TreeView, LogView, ResultsView, MessagesView, Leaving, PaneLayout, CampaignKeys, App[int]
):
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

    @while_mounted
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

    @while_mounted
    def _tick(self) -> None:
        self._paint()
        self._results_tick()
        self._paint_messages()  # an expired message goes

    @while_mounted
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

    # --- the results table ------------------------------------------------------------------

    # --- the tree -------------------------------------------------------------------------------

    # --- whose log and series ---------------------------------------------------------------

    # --- view actions ---------------------------------------------------------------------------

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.key_table()))

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Textual's palette commands less Quit and Screenshot: the console's own (from the
        key table) ask before quitting and save into the results directory."""
        for cmd in super().get_system_commands(screen):
            if cmd.title not in ("Screenshot", "Quit"):  # the console's own are in its table
                yield cmd

    # --- leaving --------------------------------------------------------------------------

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

"""The campaign console: a Textual app that follows a campaign through ``CampaignControl``.

It only ever subscribes to events and sends commands, so the same app works on a campaign in
this process and (through a socket-backed control) on a headless one. Data flows one way:

    control.subscribe() -> reader task -> EventInbox -> frame timer (20 Hz) -> CampaignProgress,
    LiveData -> panes

The reader never touches a widget; the frame timer applies whatever arrived since the last
frame in one go, so a flood of thousands of events a second costs a few list operations per
frame and keys stay responsive. Plots redraw on their own slower timer, and only when their
data changed; clock-driven text (elapsed, uptime, ETA) repaints once a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from textual import events, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.widgets import Footer, Tree
from textual.widgets.tree import TreeNode

from specbench_tui.engine.commands import CampaignControl, Command, Reply
from specbench_tui.results.events import (
    CampaignFinished,
    CampaignStarted,
    CellFailed,
    CellFinished,
    CellQueued,
    CellSkipped,
    CellStarted,
    Event,
    GpuSample,
    GroupFinished,
    GroupStarted,
    LogLine,
    Notice,
    RequestDone,
    ServiceFailed,
    ServiceReady,
    TelemetryChosen,
)
from specbench_tui.results.progress import CampaignProgress
from specbench_tui.tui.detail import DetailPane
from specbench_tui.tui.header import CampaignHeader
from specbench_tui.tui.health import HealthPane
from specbench_tui.tui.inbox import EventInbox
from specbench_tui.tui.log_pane import LogPane, display_line
from specbench_tui.tui.palette import ConsoleCommands
from specbench_tui.tui.plan_tree import NodeRef, PlanTree
from specbench_tui.tui.plots import LiveData, PlotsPane
from specbench_tui.tui.screens import ConfirmScreen, HelpScreen
from specbench_tui.tui.themes import DEFAULT_THEME, load_all_themes, resolve_theme_name

#: Exit status when the console is closed before the campaign finished (as for Ctrl-C).
EXIT_INTERRUPTED = 130
FRAME_S = 0.05  # apply pending events 20 times a second
PLOT_S = 0.25  # redraw changed plots 4 times a second
CLOCK_S = 1.0  # elapsed, uptime, ETA
#: Events handled per reader step before yielding to the UI: a replay of a long campaign or a
#: flood must not hold the event loop.
READER_CHUNK = 256
#: Events older than this when they arrive are history (replay): no notification for them.
REPLAY_AGE_S = 30.0
#: Longest wait for an in-process campaign to stop after quitting mid-run.
QUIT_GRACE_S = 20.0

#: Panes the number keys toggle, in screen order.
PANES: dict[str, str] = {"1": "tree", "2": "detail", "3": "health", "4": "plots", "5": "logpane"}
PANE_TITLES: dict[str, str] = {
    "tree": "Plan",
    "detail": "Detail",
    "health": "Service & GPUs",
    "plots": "Live",
    "logpane": "Log",
}

_LIFECYCLE = (
    CampaignStarted,
    CampaignFinished,
    GroupStarted,
    GroupFinished,
    ServiceReady,
    ServiceFailed,
    CellStarted,
    CellFinished,
    CellFailed,
    CellSkipped,
    CellQueued,
)
_CELL_EVENTS = (CellStarted, CellFinished, CellFailed, CellSkipped, CellQueued)


class PlanNavigated(events.Event):
    """The operator moved the tree cursor themselves: stop following the running cell."""


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


class ConsoleApp(App[int]):
    """The console. ``clock`` exists so tests and snapshots can freeze time-dependent text
    (elapsed, uptime, ETA); ``SPECBENCH_TUI_FROZEN_TIME=<epoch seconds>`` does the same from
    outside."""

    CSS_PATH = "app.tcss"
    TITLE = "specbench"
    COMMANDS: ClassVar[set[Any]] = App.COMMANDS | {ConsoleCommands}

    #: The key table: the footer, the help screen and the palette are all built from it.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space,p", "toggle_pause", "Pause/Resume", id="campaign.pause"),
        Binding("s", "skip", "Skip", id="campaign.skip"),
        Binding("r", "rerun", "Rerun", id="campaign.rerun"),
        Binding("R", "rerun_failed", "Rerun failed", id="campaign.rerun_failed", show=False),
        Binding("a", "abort", "Abort", id="campaign.abort"),
        Binding("g", "retry_group", "Retry group", id="campaign.retry_group", show=False),
        Binding("f", "toggle_follow", "Follow", id="view.follow"),
        Binding("slash", "search_log", "Search", id="view.search"),
        Binding("l", "freeze_log", "Freeze log", id="view.freeze_log", show=False),
        Binding("z", "maximize_pane", "Zoom", id="view.maximize"),
        Binding("1", "toggle_pane('tree')", "Plan pane", id="view.pane.tree", show=False),
        Binding("2", "toggle_pane('detail')", "Detail pane", id="view.pane.detail", show=False),
        Binding("3", "toggle_pane('health')", "Health pane", id="view.pane.health", show=False),
        Binding("4", "toggle_pane('plots')", "Plots pane", id="view.pane.plots", show=False),
        Binding("5", "toggle_pane('logpane')", "Log pane", id="view.pane.log", show=False),
        Binding("t", "next_theme", "Theme", id="view.theme", show=False),
        Binding("question_mark,f1", "help", "Help", id="app.help"),
        Binding("q", "request_quit", "Quit", id="app.quit"),
        Binding("ctrl+q", "request_quit", "Quit", id="app.quit_ctrl", show=False, priority=True),
    ]

    #: Longer words for the help screen and the palette, keyed by action.
    HELP: ClassVar[dict[str, str]] = {
        "toggle_pause": "pause after the running cell, or resume (the answer says which)",
        "skip": "skip the selected cell or group (the running cell while following)",
        "rerun": "queue the selected cell, workload or group again",
        "rerun_failed": "queue every failed cell again",
        "abort": "stop the campaign (asks first); finished results are kept",
        "retry_group": "restart the selected (or current) service group's server",
        "toggle_follow": "follow the running cell in the plan tree, or stop following",
        "search_log": "filter the log for a text; esc clears",
        "freeze_log": "freeze the log view; the campaign keeps running",
        "maximize_pane": "zoom the focused pane to the whole screen, or back",
        "toggle_pane('tree')": "show or hide the plan tree",
        "toggle_pane('detail')": "show or hide the detail pane",
        "toggle_pane('health')": "show or hide service and GPU health",
        "toggle_pane('plots')": "show or hide the live plots",
        "toggle_pane('logpane')": "show or hide the log",
        "next_theme": "switch to the next console theme",
        "help": "this screen",
        "request_quit": "leave the console (asks first while the campaign runs)",
    }

    def __init__(
        self,
        control: CampaignControl,
        theme: str | None = None,
        *,
        clock: Callable[[], float] | None = None,
        theme_dirs: list[Any] | None = None,
    ) -> None:
        super().__init__()
        self.control = control
        self.progress = CampaignProgress()
        self.live = LiveData()
        self.inbox = EventInbox()
        frozen = os.environ.get("SPECBENCH_TUI_FROZEN_TIME")
        if clock is None and frozen:
            frozen_at = float(frozen)
            clock = lambda: frozen_at  # noqa: E731
        self.clock: Callable[[], float] = clock or time.time
        self.follow = True
        self.stream_ended = False
        self.frames = 0  # batches applied (the bench reads these)
        self.plot_draws = 0
        self._followed: str | None = None
        self._selected: NodeRef | None = None
        self._auto_hidden: set[str] = set()
        self._request_cells: set[str] = set()
        self._quitting = False
        self.engine_exit_code: int | None = None
        self._user_display: dict[str, bool] = {}
        self._startup_notes: list[tuple[str, str]] = []
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

    # --- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield CampaignHeader(id="header")
        with Horizontal(id="body"):
            with Vertical(id="left"):
                yield ConsolePlanTree(id="tree")
                yield DetailPane(id="detail")
            with Vertical(id="right"):
                yield HealthPane(id="health")
                yield PlotsPane(id="plots")
                yield LogPane(id="logpane")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        for pane_id, title in PANE_TITLES.items():
            pane = self.query_one(f"#{pane_id}")
            pane.add_class("pane")
            pane.border_title = title
        self.query_one("#logpane", LogPane).border_title = "Log"
        self.theme_changed_signal.subscribe(self, self._on_theme_changed)
        self._apply_size(self.size.width, self.size.height)
        self.query_one(PlanTree).focus()
        for text, severity in self._startup_notes:
            self.notify(text, severity=severity, timeout=10)  # type: ignore[arg-type]
        self.set_interval(FRAME_S, self._frame)
        self.set_interval(PLOT_S, self._redraw_plots)
        self.set_interval(CLOCK_S, self._tick)
        self._read_events()
        if callable(getattr(self.control, "start_engine", None)):
            self._run_engine()
        self._paint()

    def on_resize(self, event: events.Resize) -> None:
        self._apply_size(event.size.width, event.size.height)

    def _apply_size(self, width: int, height: int) -> None:
        """Compact below 100x32: the plots fold away (4 toggles them back) so that the tree,
        the health lines and the log keep room to be read at 80x24."""
        compact = width < 100 or height < 32
        self.screen.set_class(compact, "-compact")
        self.screen.set_class(width >= 180 and height >= 45, "-wide")
        self._auto_hidden = {"plots"} if compact else set()
        self._apply_panes()

    def _apply_panes(self) -> None:
        for pane_id in PANE_TITLES:
            shown = self._user_display.get(pane_id, pane_id not in self._auto_hidden)
            self.query_one(f"#{pane_id}").display = shown
        left_shown = any(self.query_one(f"#{p}").display for p in ("tree", "detail"))
        self.query_one("#left").display = left_shown
        right = ("health", "plots", "logpane")
        self.query_one("#right").display = any(self.query_one(f"#{p}").display for p in right)
        if self.query_one("#plots").display:
            self._redraw_plots(force=True)

    # --- the event stream -----------------------------------------------------------------------

    @work(exclusive=True, group="events")
    async def _read_events(self) -> None:
        """Read the subscription into the inbox; touches no widget. Yields to the UI every
        ``READER_CHUNK`` events, since a queue that is never empty never yields by itself."""
        n = 0
        try:
            async for ev in self.control.subscribe():
                self.inbox.put(ev)
                n += 1
                if n % READER_CHUNK == 0:
                    await asyncio.sleep(0)
        except Exception as exc:  # a dropped socket or an engine crash: say so, keep the UI
            self.notify(f"lost the campaign's event stream: {exc}", severity="error", timeout=30)
        self.stream_ended = True

    @work(exclusive=True, group="engine")
    async def _run_engine(self) -> None:
        """An in-process campaign runs in the console's event loop (the engine's
        ``start_engine``); a detached control has no such method and needs nothing here."""
        try:
            self.engine_exit_code = await self.control.start_engine()  # type: ignore[attr-defined]
        except Exception as exc:
            self.notify(f"the campaign engine stopped: {exc}", severity="error", timeout=60)
            self.engine_exit_code = 1
        if self._quitting:
            self.exit(self.campaign_exit_code())

    @_while_mounted
    def _frame(self) -> None:
        batch = self.inbox.drain()
        if batch:
            self.apply_batch(batch)

    def apply_batch(self, batch: list[Event]) -> None:
        """Apply one frame's events: state first, then only the widgets they touched."""
        p = self.progress
        tree = self.query_one(PlanTree)
        logpane = self.query_one(LogPane)
        lines: list[str] = []
        cells: set[str] = set()
        groups: set[str] = set()
        rebuilt = lifecycle = gpus = False
        for ev in batch:
            p.apply(ev)
            if isinstance(ev, LogLine):
                if logpane.group is None:
                    logpane.set_group(ev.group)
                if ev.group == logpane.group:
                    lines.append(display_line(ev))
                continue
            if isinstance(ev, RequestDone):
                self._request_cells.add(ev.cell_id)  # repainted at the plot rate, not per frame
                continue
            if isinstance(ev, GpuSample):
                gpus = True
                continue
            if isinstance(ev, TelemetryChosen):
                self.query_one(HealthPane).telemetry[ev.host] = ev
                gpus = True
                continue
            if isinstance(ev, _LIFECYCLE):
                lifecycle = True
            if isinstance(ev, CampaignStarted):
                rebuilt = True
                self.live.clear()
                cells.clear()
                groups.clear()
            elif isinstance(ev, GroupStarted):
                logpane.add(lines)
                lines = []
                logpane.set_group(ev.group)
                groups.add(ev.group)
            elif isinstance(ev, ServiceReady | ServiceFailed | GroupFinished):
                groups.add(ev.group)
            elif isinstance(ev, _CELL_EVENTS):
                cells.add(ev.cell_id)
                if isinstance(ev, CellFailed) and self._is_live(ev):
                    self.notify(
                        f"cell failed: {ev.cell or ev.cell_id}: {ev.reason}",
                        severity="error",
                        timeout=8,
                    )
            elif isinstance(ev, Notice) and self._is_live(ev):
                sev = {"warning": "warning", "error": "error"}.get(ev.level, "information")
                self.notify(ev.text, severity=sev, timeout=8)  # type: ignore[arg-type]
            elif isinstance(ev, CampaignFinished):
                self._announce_end(ev)
        logpane.add(lines)
        logpane.dropped = self.inbox.dropped
        self.live.ingest(batch, p.started_at)
        if rebuilt:
            tree.build(p)
            self._followed = None
        else:
            for cid in cells:
                tree.relabel_cell(cid)
            for gid in groups:
                tree.relabel_group(gid)
                for cid in p.groups[gid].cells if gid in p.groups else []:
                    tree.relabel_cell(cid)
        if self.follow:
            self._follow_current()
        self.frames += 1
        now = self.clock()
        self.query_one(CampaignHeader).show(p, now)
        if gpus or lifecycle:
            self.query_one(HealthPane).show(p, now)
        if lifecycle:
            self._show_detail()

    def _is_live(self, ev: Event) -> bool:
        """Whether an event is news rather than replayed history: only news deserves a
        notification (attaching to a long campaign must not replay a storm of toasts). The
        stream has no replay marker, so an event's age decides."""
        return self.clock() - ev.ts < REPLAY_AGE_S

    def _announce_end(self, ev: CampaignFinished) -> None:
        word = "aborted" if self.progress.aborted else "finished"
        self.notify(
            f"campaign {word}: {ev.finished} done, {ev.failed} failed, "
            f"{ev.skipped} skipped (exit {ev.exit_code}); q to leave",
            severity="error" if ev.failed or self.progress.aborted else "information",
            timeout=30,
        )

    # --- painting -------------------------------------------------------------------------------

    def _paint(self) -> None:
        now = self.clock()
        self.query_one(CampaignHeader).show(self.progress, now)
        self.query_one(HealthPane).show(self.progress, now)
        self._show_detail()

    @_while_mounted
    def _tick(self) -> None:
        self._paint()

    @_while_mounted
    def _redraw_plots(self, force: bool = False) -> None:
        self.plot_draws += self.query_one(PlotsPane).redraw(self.live, force=force)
        if self._request_cells:
            # request counts of running cells: only the cell's own label changes (its
            # ancestors count settled cells), and at this rate even a flood costs nothing
            tree = self.query_one(PlanTree)
            for cid in self._request_cells:
                node = tree.nodes_by_ref.get(NodeRef("cell", cid))
                if node is not None:
                    tree.relabel_node(node)
            if self._selected is not None and self._selected.key in self._request_cells:
                self._show_detail()
            self._request_cells.clear()

    def _show_detail(self) -> None:
        tree = self.query_one(PlanTree)
        ref = self._selected
        cells = tree.cell_ids_under(ref) if ref is not None else []
        self.query_one(DetailPane).show(self.progress, ref, cells, self.clock())

    def _on_theme_changed(self, _theme: object) -> None:
        self.query_one(PlanTree).relabel_all()
        self.query_one(LogPane).retheme()
        self._paint()
        self._redraw_plots(force=True)

    # --- the tree -------------------------------------------------------------------------------

    def _follow_current(self) -> None:
        p = self.progress
        tree = self.query_one(PlanTree)
        target = p.current_cell
        ref = NodeRef("cell", target) if target else None
        if ref is None and p.current_group:
            ref = NodeRef("group", p.current_group)
        if ref is None or ref.key == self._followed:
            return
        self._followed = ref.key
        tree.reveal(ref, collapse_others=True)
        self._selected = ref
        self._show_detail()

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[NodeRef]) -> None:
        self._selected = event.node.data
        self._show_detail()

    def on_tree_node_expanded(self, event: Tree.NodeExpanded[NodeRef]) -> None:
        self.query_one(PlanTree).relabel_node(event.node)

    def on_tree_node_collapsed(self, event: Tree.NodeCollapsed[NodeRef]) -> None:
        self.query_one(PlanTree).relabel_node(event.node)

    def on_plan_navigated(self, _event: PlanNavigated) -> None:
        if self.follow:
            self.follow = False
            self.notify("following off: f follows the running cell again", timeout=3)

    def _selected_node(self) -> TreeNode[NodeRef] | None:
        return self.query_one(PlanTree).cursor_node

    def selected_ref(self) -> NodeRef | None:
        node = self._selected_node()
        return node.data if node is not None else None

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
        if ref is None:
            return self.progress.current_group
        if ref.kind == "group":
            return ref.key
        if ref.kind == "cell" and ref.key in self.progress.cells:
            return self.progress.cells[ref.key].group
        if ref.kind == "workload":
            return ref.key.rpartition("/")[0]
        return self.progress.current_group

    # --- commands to the campaign ---------------------------------------------------------------

    def send(self, action: str, target: str | None = None) -> None:
        """Send without blocking the keys; the answer comes back as a notification."""
        self._send(Command(action=action, target=target, by="console"))  # type: ignore[arg-type]

    @work(group="commands")
    async def _send(self, command: Command) -> Reply:
        try:
            reply = await self.control.send(command)
        except Exception as exc:
            reply = Reply(False, f"{command.action} failed: {exc}")
        self.notify(
            reply.text,
            title=command.action.replace("_", " "),
            severity="information" if reply.ok else "warning",
            timeout=5,
        )
        return reply

    def action_toggle_pause(self) -> None:
        self.send("resume" if self.progress.paused else "pause")

    def action_pause(self) -> None:
        self.send("pause")

    def action_resume(self) -> None:
        self.send("resume")

    def action_skip(self) -> None:
        ref = self.selected_ref()
        target = self._target(ref)
        if ref is not None and ref.kind == "cell" and ref.key == self.progress.current_cell:
            target = ref.key
        self.send("skip", target)

    def action_rerun(self) -> None:
        target = self._target(self.selected_ref())
        if target is None:
            self.notify(
                "select a cell, workload or group in the plan tree to rerun",
                severity="warning",
                timeout=4,
            )
            return
        self.send("rerun", target)

    def action_rerun_failed(self) -> None:
        self.send("rerun_failed")

    def action_retry_group(self) -> None:
        self.send("retry_group", self._group_of(self.selected_ref()))

    def action_abort(self) -> None:
        if self.progress.finished:
            self.notify("the campaign has already ended", severity="warning", timeout=4)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.send("abort")

        self.push_screen(
            ConfirmScreen(
                "Abort the campaign? The running cell is stopped and nothing else runs. "
                "Finished results are kept; running the plan again resumes.",
                yes="Abort",
                no="Keep running",
            ),
            answered,
        )

    # --- view actions ---------------------------------------------------------------------------

    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        self._followed = None
        if self.follow:
            self._follow_current()
        self.notify("following the running cell" if self.follow else "following off", timeout=2)

    def action_search_log(self) -> None:
        self._user_display["logpane"] = True
        self._apply_panes()
        self.query_one(LogPane).open_search()

    def action_freeze_log(self) -> None:
        frozen = self.query_one(LogPane).toggle_freeze()
        self.notify(
            "log view frozen; the campaign keeps running (l to follow)"
            if frozen
            else "log view following again",
            timeout=3,
        )

    def action_maximize_pane(self) -> None:
        screen = self.screen
        if screen.maximized is not None:
            screen.minimize()
        elif screen.focused is not None:
            screen.maximize(screen.focused)

    def action_toggle_pane(self, pane_id: str) -> None:
        pane = self.query_one(f"#{pane_id}")
        self._user_display[pane_id] = not pane.display
        self._apply_panes()
        if not self._user_display[pane_id] and self.focused is None:
            self.query_one(PlanTree).focus()

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

    def action_request_quit(self) -> None:
        if self.progress.finished or self.stream_ended or not self.progress.campaign:
            self.exit(self.campaign_exit_code())
            return
        detached = bool(getattr(self.control, "detached", False))
        question = (
            "Leave the console? The campaign keeps running headless; attach again to watch it."
            if detached
            else "Quit? The campaign runs in this process and stops with the console. "
            "Finished cells are kept; running the plan again resumes."
        )

        def answered(yes: bool | None) -> None:
            if not yes:
                return
            engine = [w for w in self.workers if w.group == "engine" and w.is_running]
            if detached or not engine:
                self.exit(EXIT_INTERRUPTED)
                return
            # in-process: stop the campaign cleanly (server stopped, results flushed) and
            # leave when the engine returns; a stuck engine does not keep the console open
            self._quitting = True
            self.send("abort")
            self.notify("stopping the campaign…", timeout=QUIT_GRACE_S)
            self.set_timer(QUIT_GRACE_S, lambda: self.exit(EXIT_INTERRUPTED))

        self.push_screen(ConfirmScreen(question, yes="Quit", no="Stay"), answered)

    def campaign_exit_code(self) -> int:
        """The campaign's exit code if it finished, else 130 (interrupted)."""
        p = self.progress
        if self._quitting:
            return EXIT_INTERRUPTED
        if p.finished and p.exit_code is not None:
            return p.exit_code
        if self.engine_exit_code is not None:
            return self.engine_exit_code
        return EXIT_INTERRUPTED

    # --- keys, help, palette --------------------------------------------------------------------

    def key_table(self) -> list[tuple[str, str, str]]:
        rows: list[tuple[str, str, str]] = []
        for b in self.BINDINGS:
            assert isinstance(b, Binding)
            if b.id == "app.quit_ctrl":
                continue
            keys = ", ".join(
                self.get_key_display(Binding(k.strip(), b.action)) for k in b.key.split(",")
            )
            rows.append((keys, b.description, self.HELP.get(b.action, "")))
        rows.append(("tab", "Next pane", "move the focus between panes"))
        rows.append(("ctrl+p", "Palette", "every action by name, themes too"))
        rows.append(("enter", "Expand", "expand or collapse a tree node"))
        return rows

    def palette_commands(self) -> list[tuple[str, str, str]]:
        """(title, help, action) for the command palette."""
        out: list[tuple[str, str, str]] = [
            ("Pause campaign", "pause after the running cell", "pause"),
            ("Resume campaign", "start cells again after a pause", "resume"),
        ]
        for b in self.BINDINGS:
            assert isinstance(b, Binding)
            if b.id == "app.quit_ctrl" or b.action == "toggle_pause":
                continue
            title = {
                "Skip": "Skip selected cell",
                "Rerun": "Rerun selected",
                "Abort": "Abort campaign",
                "Follow": "Follow running cell (toggle)",
                "Search": "Search log",
                "Zoom": "Maximize focused pane (toggle)",
                "Theme": "Next theme",
                "Help": "Help (keys and panes)",
                "Quit": "Quit console",
            }.get(b.description, b.description)
            if b.action.startswith("toggle_pane"):
                title = f"Toggle {b.description.lower()}"
            out.append((title, self.HELP.get(b.action, ""), b.action))
        for name in self._theme_names():
            out.append((f"Theme: {name}", "switch the console theme", f"set_theme('{name}')"))
        return out

    def _theme_names(self) -> Iterable[str]:
        yield from self.console_themes


def run_console(control: CampaignControl, theme: str | None = None) -> int:
    """Open the console on a campaign and return the exit status: the campaign's own when it
    finished, 130 when the operator left before the end."""
    app = ConsoleApp(control, theme)
    result = app.run()
    return result if isinstance(result, int) else app.campaign_exit_code()

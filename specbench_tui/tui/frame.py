"""One frame's events folded into the console's state, and what that changed: pure functions
(no widget is touched), so what a batch does to the console can be tested without one.

``fold_batch`` applies the events to the campaign's state (the one reducer,
``results/state.py``, through ``CampaignProgress``) and says what they touched;
``plan_repaint`` turns that and the console's view state (its clocks, what it holds back)
into a ``Repaint``: which tree rows, which panes, which toasts. The app's painter does what
the ``Repaint`` says and decides nothing.

Imports no textual (nor does importing it load textual): the widgets live elsewhere in ``tui/``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from specbench_tui.results.events import (
    CampaignFinished,
    CampaignStarted,
    CellFailed,
    CellFinished,
    CellQueued,
    CellSkipped,
    CellStarted,
    CheckVerdict,
    Event,
    GpuSample,
    GpusWaiting,
    GroupFinished,
    GroupStarted,
    HostState,
    LogLine,
    Notice,
    RequestDone,
    ServiceFailed,
    ServiceReady,
    TelemetryChosen,
)
from specbench_tui.results.progress import CampaignProgress, GroupState
from specbench_tui.tui.log_text import display_line
from specbench_tui.tui.toasts import host_news

#: Events that change what the tree, the header's counts or the detail pane show.
LIFECYCLE = (
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
    CheckVerdict,
)
CELL_EVENTS = (CellStarted, CellFinished, CellFailed, CellSkipped, CellQueued)
#: Events after which the results table may have changed.
RESULTS_EVENTS = (CellFinished, CheckVerdict, CampaignFinished, CellQueued)
#: GPU samples (each GPU at its own moment) repaint the health pane at most this often.
HEALTH_GPU_S = 1.0
#: After a cell finished, the results table is recomputed this much later, once for a burst.
RESULTS_DELAY_S = 1.0


@dataclass(frozen=True)
class ToastSpec:
    """A notification a frame raises (the batcher groups them into toasts)."""

    text: str
    severity: str
    noun: tuple[str, str]
    title: str = ""


@dataclass
class FrameChanges:
    """What one batch changed, for the painter.

    ``log``: each group's new log lines as the log pane shows them, in arrival order (the
    pane shows the selected group's; the console keeps every group's). ``started``: a
    ``campaign_started`` came (a new run: the live plots and the tree start over).
    ``notices``: live notices as toasts, which the toast batcher may hold back as answers
    already shown; ``ended``: a live ``campaign_finished``.
    """

    log: dict[str, list[str]] = field(default_factory=dict)
    cells: set[str] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    hosts: list[str] = field(default_factory=list)
    request_cells: set[str] = field(default_factory=set)
    toasts: list[ToastSpec] = field(default_factory=list)
    notices: list[ToastSpec] = field(default_factory=list)
    started: bool = False
    lifecycle: bool = False
    gpus: bool = False
    checks: bool = False
    results: bool = False  # the results table may have changed
    ended: CampaignFinished | None = None


def _toast(ev: Event) -> ToastSpec | None:
    """The notification a live lifecycle event raises, if any."""
    if isinstance(ev, ServiceFailed):
        return ToastSpec(
            f"{ev.group}: {ev.reason}",
            "error",
            ("server failed to start", "servers failed to start"),
            "server failed",
        )
    if isinstance(ev, CellFailed):
        return ToastSpec(
            f"{ev.cell or ev.cell_id}: {ev.reason}", "error", ("cell failed", "cells failed"),
            "cell failed",
        )  # fmt: skip
    if isinstance(ev, CheckVerdict) and ev.status == "fail":
        return ToastSpec(
            f"{ev.config} TP{ev.tp}: {ev.text or ev.check}",
            "error",
            ("config failed a check", "configs failed a check"),
            f"{ev.check} check failed",
        )
    return None


def notice_toast(ev: Notice) -> ToastSpec:
    """A notice as a toast: its level is the severity (anything else is information)."""
    if ev.level == "error":
        return ToastSpec(ev.text, "error", ("error", "errors"))
    if ev.level == "warning":
        return ToastSpec(ev.text, "warning", ("warning", "warnings"))
    return ToastSpec(ev.text, "information", ("note", "notes"))


def _lifecycle(ev: Event, out: FrameChanges, live: bool) -> None:
    """What a lifecycle event changed (the state has it already)."""
    out.lifecycle = out.lifecycle or isinstance(ev, LIFECYCLE)
    out.results = out.results or isinstance(ev, RESULTS_EVENTS)
    if isinstance(ev, CampaignStarted):
        out.started = True
        out.cells.clear()
        out.groups.clear()
    elif isinstance(ev, GroupStarted | ServiceReady | GroupFinished | ServiceFailed):
        out.groups.add(ev.group)
    elif isinstance(ev, CELL_EVENTS):
        out.cells.add(ev.cell_id)
    elif isinstance(ev, CheckVerdict):
        out.checks = True
    if not live:
        return
    toast = _toast(ev)
    if toast is not None:
        out.toasts.append(toast)
    if isinstance(ev, Notice):
        out.notices.append(notice_toast(ev))
    elif isinstance(ev, CampaignFinished):
        out.ended = ev


def fold_batch(
    progress: CampaignProgress,
    batch: Sequence[Event],
    is_live: Callable[[Event], bool],
    log_read: Mapping[str, float] | None = None,
) -> FrameChanges:
    """Apply ``batch`` to ``progress`` and say what it changed. ``is_live``: whether an event
    is news, not replayed history (only news raises notifications). ``log_read``: per group,
    when its stored log was read into the console: its lines from before are in it already."""
    out = FrameChanges()
    for ev in batch:
        if isinstance(ev, HostState):
            before = progress.host_states.get(ev.host)
            progress.apply(ev)
            out.hosts.append(ev.host)
            out.gpus = True  # the health pane says which host is away
            news = host_news(ev.host, before.state if before else "", ev.state, ev.reason)
            if news is not None and is_live(ev):
                severity, title, noun, text = news
                out.toasts.append(ToastSpec(text, severity, noun, title))
            continue
        progress.apply(ev)
        if isinstance(ev, LogLine):
            if log_read and ev.ts <= log_read.get(ev.group, float("-inf")):
                continue
            lines = out.log.get(ev.group)
            if lines is None:
                lines = out.log[ev.group] = []
            lines.append(display_line(ev))
        elif isinstance(ev, RequestDone):
            out.request_cells.add(ev.cell_id)  # repainted at the plot rate, not per frame
        elif isinstance(ev, GpuSample | TelemetryChosen | GpusWaiting):
            if isinstance(ev, GpusWaiting):
                out.groups.add(ev.group)
            out.gpus = True  # the reducer keeps a chosen source; the health pane shows it
        else:
            _lifecycle(ev, out, is_live(ev))
    return out


@dataclass(frozen=True)
class ViewState:
    """What the console's repaint depends on besides the events: ``now`` (monotonic s);
    ``results_due``: when the results table is to be recomputed (None: not asked);
    ``health_due``: GPU samples came in that the health pane does not show yet;
    ``health_at``: when the health pane was last painted."""

    now: float
    results_due: float | None = None
    health_due: bool = False
    health_at: float = float("-inf")


@dataclass(frozen=True)
class TreeRepaint:
    """The plan tree's part of a frame: rebuilt (a new run, or a narrowed tree whose set of
    shown cells changed), every label redrawn (a check verdict marks configs across
    groups), or only the rows named."""

    rebuild: bool = False
    relabel_all: bool = False
    hosts: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    cells: tuple[str, ...] = ()


@dataclass(frozen=True)
class Repaint:
    """What the painter does for one frame. The header is repainted every frame (its counts
    and clock); ``health``: the health pane now, ``health_due``: samples still held back
    after this frame (``HEALTH_GPU_S``); ``detail``: the detail pane; ``sync_log``: the log
    pane's title and group; ``clear_live``: a new run, the live plots start over;
    ``results_due``: the results table's next recomputation; ``toasts`` go to the batcher,
    ``notices`` too unless they echo an answer already shown."""

    tree: TreeRepaint
    results_due: float | None
    health: bool
    health_due: bool
    detail: bool
    sync_log: bool
    clear_live: bool
    toasts: tuple[ToastSpec, ...] = ()
    notices: tuple[ToastSpec, ...] = ()


def _tree_repaint(
    changes: FrameChanges, groups: Mapping[str, GroupState], narrowed_stale: Callable[[], bool]
) -> TreeRepaint:
    hosts = tuple(changes.hosts)
    if changes.started or (changes.lifecycle and narrowed_stale()):
        return TreeRepaint(rebuild=True, hosts=hosts)
    if changes.checks:
        return TreeRepaint(relabel_all=True, hosts=hosts)
    cells = list(changes.cells)
    for gid in changes.groups:  # a group's line changes its cells' (its server's state)
        cells.extend(groups[gid].cells if gid in groups else ())
    return TreeRepaint(hosts=hosts, groups=tuple(changes.groups), cells=tuple(cells))


def plan_repaint(
    changes: FrameChanges,
    view: ViewState,
    groups: Mapping[str, GroupState],
    narrowed_stale: Callable[[], bool] = lambda: False,
) -> Repaint:
    """The ``Repaint`` for a frame's ``changes``, given the console's ``view`` and the
    campaign's ``groups``. ``narrowed_stale``: whether a narrowed tree (failed only, a
    filter) now shows other cells than it would; asked only after a lifecycle event."""
    if changes.started or (changes.results and view.results_due is None):
        results_due: float | None = view.now + RESULTS_DELAY_S
    else:
        results_due = view.results_due
    held = view.health_due or changes.gpus
    health = bool(
        changes.lifecycle or changes.hosts or (held and view.now - view.health_at >= HEALTH_GPU_S)
    )
    return Repaint(
        tree=_tree_repaint(changes, groups, narrowed_stale),
        results_due=results_due,
        health=health,
        health_due=held and not health,
        detail=changes.lifecycle,
        sync_log=changes.lifecycle or bool(changes.log),
        clear_live=changes.started,
        toasts=tuple(changes.toasts),
        notices=tuple(changes.notices),
    )

"""One frame's events folded into the console's state, and what that changed: a pure function
(no widget is touched), so what a batch does to the console can be tested without one; the
app's painter then updates only the widgets it names.

Imports no textual: the console's widgets live elsewhere in ``tui/``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
from specbench_tui.results.progress import CampaignProgress
from specbench_tui.tui.log_pane import display_line
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
    ``notices``: live notices, which the toast batcher may hold back as answers already
    shown; ``ended``: a live ``campaign_finished``.
    """

    log: dict[str, list[str]] = field(default_factory=dict)
    cells: set[str] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    hosts: list[str] = field(default_factory=list)
    request_cells: set[str] = field(default_factory=set)
    toasts: list[ToastSpec] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
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
        out.notices.append(ev)
    elif isinstance(ev, CampaignFinished):
        out.ended = ev


def fold_batch(
    progress: CampaignProgress,
    batch: Sequence[Event],
    is_live: Callable[[Event], bool],
) -> FrameChanges:
    """Apply ``batch`` to ``progress`` and say what it changed. ``is_live``: whether an event
    is news, not replayed history (only news raises notifications)."""
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

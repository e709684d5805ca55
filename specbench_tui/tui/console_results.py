"""The results pane's half of the console: the comparison table computed from the results
directory in a worker thread, after cells finish, and shown.

A mixin of ``ConsoleApp`` (tui/app.py), which holds the state these read."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import polars as pl
from textual import work
from textual.message import Message

from specbench_tui.results.layout import ResultsLayout
from specbench_tui.tui.mounted import while_mounted
from specbench_tui.tui.results_pane import ResultsPane

#: While the results pane is hidden (the plots hold its slot during a run) the table is still
#: recomputed, at most this often, so the pane is never empty when it comes into view at the end.
HIDDEN_RESULTS_S = 10.0


class ResultsComputed(Message):
    """The results table, computed in a worker thread (which never touches a widget)."""

    def __init__(self, frame: pl.DataFrame | None, note: str) -> None:
        super().__init__()
        self.frame = frame
        self.note = note


class ResultsView:
    """The results pane's half of the console."""

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

    @while_mounted
    def _show_results(self, message: ResultsComputed) -> None:
        """A table computed while the console was leaving finds no pane: it is dropped."""
        pane = self.main.query_one(ResultsPane)
        if message.frame is None:
            pane.show(pane.frame, message.note)  # keep the last good table, say why
        else:
            pane.show(message.frame, message.note)

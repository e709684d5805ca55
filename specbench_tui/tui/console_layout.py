"""The console's layout: panes by terminal size, the keys that show, hide and zoom them, themes
and the screenshot key.

A mixin of ``ConsoleApp`` (tui/app.py), which holds the state these read."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from textual import events

from specbench_tui.tui.log_pane import LogPane
from specbench_tui.tui.plan_tree import PlanTree
from specbench_tui.tui.results_pane import ResultsPane

#: Terminals shorter than this give the message line a row only while it has a message.
SHORT_H = 24
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


class PaneLayout:
    """The console's layout."""

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

    def _on_theme_changed(self, _theme: object) -> None:
        self.main.query_one(PlanTree).relabel_all()
        self.main.query_one(LogPane).retheme()
        self._paint()
        self._redraw_plots(force=True)
        self.main.query_one(ResultsPane)._redraw()

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

    def _theme_names(self) -> Iterable[str]:
        yield from self.console_themes

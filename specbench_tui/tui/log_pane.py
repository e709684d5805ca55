"""The server log of the current service group: SGLang stats lines and the plan's ``[logs]``
pattern matches highlighted, searchable (a filter), and freezable without pausing anything.

Built on Textual's ``Log``, which renders only the visible lines: appending a few thousand
lines a second costs a list extend, not a render per line. Lines are kept (bounded) here too,
so a filter or an unfreeze can show what arrived meanwhile.
"""

from __future__ import annotations

import re
from collections import deque
from typing import ClassVar

from rich.highlighter import Highlighter
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import Input, Log

from specbench_tui.results.events import LogLine
from specbench_tui.tui.look import Palette, palette_for

#: Lines kept for filtering; the full log is in ``logs/<group>.log`` of the results directory.
KEEP_LINES = 5000

#: Lines the plan's own ``[logs]`` patterns matched start with this mark.
PATTERN_MARK = "◆ "

_STATS = re.compile(r"(?:Decode|Prefill) batch[.,]")
_VALUE = re.compile(
    r"(accept len|accept rate|gen throughput \(token/s\)|#running-req|"
    r"#queue-req|token usage|input throughput \(token/s\))[:=] *([0-9.]+)"
)
_BAD = re.compile(r"error|exception|traceback|out of memory|killed|fatal", re.IGNORECASE)
_WARN = re.compile(r"warn", re.IGNORECASE)
_READY = re.compile(r"fired up and ready to roll")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


class ServerLogHighlighter(Highlighter):
    """Colours from the current theme (see ``look``), and the search term reversed."""

    def __init__(self, pal: Palette) -> None:
        self.pal = pal
        self.query: str = ""

    def highlight(self, text: Text) -> None:
        s = text.plain
        pal = self.pal
        if s.startswith(PATTERN_MARK):
            text.stylize(pal.accent + Style(bold=True), 0, len(PATTERN_MARK))
            for m in _NUMBER.finditer(s):
                text.stylize(pal.accent, m.start(), m.end())
        if _STATS.search(s):
            text.stylize(pal.muted)
            for m in _VALUE.finditer(s):
                text.stylize(pal.primary, m.start(1), m.end(1))
                text.stylize(pal.success + Style(bold=True), m.start(2), m.end(2))
        elif _BAD.search(s):
            text.stylize(pal.error)
        elif _WARN.search(s):
            text.stylize(pal.warning)
        elif _READY.search(s):
            text.stylize(pal.success + Style(bold=True))
        if self.query:
            low, q = s.lower(), self.query.lower()
            start = low.find(q)
            while start >= 0:
                text.stylize(Style(reverse=True, bold=True), start, start + len(q))
                start = low.find(q, start + len(q))


_DATED = re.compile(r"^\[\d{4}-\d{2}-\d{2} (\d{2}:\d{2}:\d{2})")


def display_line(ev: LogLine) -> str:
    """The text shown for a line: SGLang's ``[YYYY-MM-DD hh:mm:ss TPn]`` prefix loses its
    date (the pane is narrow and the stats are at the end of the line), and a line is marked
    when the plan's own ``[logs]`` patterns matched it."""
    line = _DATED.sub(r"[\1", ev.line, count=1)
    return PATTERN_MARK + line if ev.matches else line


class LogPane(Vertical):
    ALLOW_MAXIMIZE = True

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close_search", "Close search", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.group: str | None = None
        self.lines: deque[str] = deque(maxlen=KEEP_LINES)
        self.frozen = False
        self.unseen = 0  # lines that arrived while frozen
        self.query_text = ""
        self.dropped = 0
        self._highlighter: ServerLogHighlighter | None = None

    def compose(self) -> ComposeResult:
        log = Log(max_lines=KEEP_LINES, highlight=True, auto_scroll=True, id="log")
        yield log
        yield Input(placeholder="filter the log (enter: apply, esc: clear)", id="log-search")

    def on_mount(self) -> None:
        self.query_one("#log-search", Input).display = False
        self.retheme()
        self._retitle()

    @property
    def log_widget(self) -> Log:
        return self.query_one("#log", Log)

    def retheme(self) -> None:
        self._highlighter = ServerLogHighlighter(palette_for(self.app))
        self._highlighter.query = self.query_text
        log = self.log_widget
        log.highlighter = self._highlighter
        log._render_line_cache.clear()  # cached strips carry the old theme's colours
        log.refresh()

    def _retitle(self) -> None:
        parts = [f"Log · {self.group}" if self.group else "Log"]
        if self.query_text:
            n = sum(1 for line in self.lines if self.query_text.lower() in line.lower())
            parts.append(f"filter '{self.query_text}': {n} lines")
        if self.frozen:
            parts.append(f"FROZEN, {self.unseen} new (l: follow)")
        if self.dropped:
            parts.append(f"{self.dropped} live events dropped")
        self.border_title = " · ".join(parts)

    # --- feeding ------------------------------------------------------------------------------

    def set_group(self, group: str | None) -> None:
        """A new server means a new log: the tail shows only the current group's lines."""
        if group == self.group:
            return
        self.group = group
        self.lines.clear()
        self.unseen = 0
        self.log_widget.clear()
        self._retitle()

    def add(self, lines: list[str]) -> None:
        if not lines:
            return
        self.lines.extend(lines)
        if self.frozen:
            self.unseen += len(lines)
            self._retitle()
            return
        shown = self._matching(lines)
        if shown:
            self.log_widget.write_lines(shown)
        if self.query_text:
            self._retitle()

    def _matching(self, lines: list[str] | deque[str]) -> list[str]:
        if not self.query_text:
            return list(lines)
        q = self.query_text.lower()
        return [line for line in lines if q in line.lower()]

    def _rewrite(self) -> None:
        log = self.log_widget
        log.clear()
        log.write_lines(self._matching(self.lines))
        log.scroll_end(animate=False)
        self._retitle()

    # --- freeze and search --------------------------------------------------------------------

    def toggle_freeze(self) -> bool:
        self.frozen = not self.frozen
        if not self.frozen:
            self.unseen = 0
            self._rewrite()
        self._retitle()
        return self.frozen

    def open_search(self) -> None:
        search = self.query_one("#log-search", Input)
        search.display = True
        search.value = self.query_text
        search.focus()

    def set_query(self, text: str) -> None:
        self.query_text = text.strip()
        if self._highlighter is not None:
            self._highlighter.query = self.query_text
        self._rewrite()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.set_query(event.value)
        self.log_widget.focus()

    def action_close_search(self) -> None:
        search = self.query_one("#log-search", Input)
        if search.display or self.query_text:
            search.display = False
            search.value = ""
            self.set_query("")
            self.log_widget.focus()

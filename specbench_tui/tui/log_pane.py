"""The server log of the selected service group: the engine's statistics lines shown compactly
(the figures the operator watches first), the plan's ``[logs]`` pattern matches marked with what
they extracted, searchable (a filter), wrappable, and freezable without pausing anything.

Built on Textual's ``Log``, which renders only the visible lines: appending a few thousand
lines a second costs a list extend, not a render per line. Lines are kept (bounded) here too,
so a filter, a wrap toggle or an unfreeze can show what arrived meanwhile. The full raw log is
in ``logs/<group>.log`` of the results directory.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from typing import ClassVar

from rich.highlighter import Highlighter
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import Input, Log

from specbench_tui.engines.registry import adapters
from specbench_tui.tui.log_text import (  # the line's text is made there, without textual
    PATTERN_END,
    PATTERN_MARK,
    STATS_MARK,
)
from specbench_tui.tui.look import Palette, palette_for

#: Lines kept for filtering; the full log is in ``logs/<group>.log`` of the results directory.
KEEP_LINES = 5000

#: A wrapped line continues on lines that start with this.
CONTINUED = "  ↪ "

_BAD = re.compile(r"error|exception|traceback|out of memory|killed|fatal", re.IGNORECASE)
_WARN = re.compile(r"warn", re.IGNORECASE)
_READY = re.compile("|".join(re.escape(a.ready_line) for a in adapters()))
#: A web server's access line for a request that went well: routine, so shown dim.
_ACCESS_OK = re.compile(r'"(?:GET|POST) [^"]*" 2\d\d')
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_FIGURE = re.compile(r"([a-z][\w-]*) ([-+]?\d+(?:\.\d+)?)")
_WATCHED = ("accept ", "gen ")


def wrap_lines(lines: Iterable[str], width: int) -> list[str]:
    """Hard-wrap at ``width`` columns; continuation lines are marked and indented."""
    width = max(width, len(CONTINUED) + 8)
    out: list[str] = []
    room = width - len(CONTINUED)
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        out.append(line[:width])
        rest = line[width:]
        while rest:
            out.append(CONTINUED + rest[:room])
            rest = rest[room:]
    return out


class ServerLogHighlighter(Highlighter):
    """Colours from the current theme (see ``look``), and the search term reversed."""

    def __init__(self, pal: Palette) -> None:
        self.pal = pal
        self.query: str = ""

    def highlight(self, text: Text) -> None:
        s = text.plain
        pal = self.pal
        body = 0  # where the line proper starts (after a pattern's head)
        if s.startswith(PATTERN_MARK):
            end = s.find(PATTERN_END)
            end = len(s) if end < 0 else end
            body = min(end + len(PATTERN_END), len(s))
            text.stylize(pal.accent + Style(bold=True), 0, len(PATTERN_MARK))
            for m in _NUMBER.finditer(s, 0, end):
                text.stylize(pal.accent + Style(bold=True), m.start(), m.end())
            text.stylize(pal.muted, end, body)
        mark = s.find(STATS_MARK, body)
        if mark >= 0 and not s.startswith(CONTINUED):
            text.stylize(pal.muted, body, mark)
            for m in _FIGURE.finditer(s, mark + 1):
                label, value = m.span(1), m.span(2)
                watched = s.startswith(_WATCHED, m.start())
                text.stylize(pal.muted, *label)
                text.stylize((pal.success + Style(bold=True)) if watched else pal.primary, *value)
        elif _ACCESS_OK.search(s):
            text.stylize(pal.muted)
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


class ServerLog(Log):
    """Textual's ``Log`` with keys to scroll it when focused (it has none of its own)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "scroll_up", "Scroll up", show=False),
        Binding("down", "scroll_down", "Scroll down", show=False),
        Binding("left", "scroll_left", "Scroll left", show=False),
        Binding("right", "scroll_right", "Scroll right", show=False),
        Binding("home", "scroll_home", "Top", show=False),
        Binding("end", "scroll_end", "End", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
    ]


class LogPane(Vertical):
    ALLOW_MAXIMIZE = True

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close_search", "Close search", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.group: str | None = None  # the group whose lines ``lines`` holds
        self.shown_group: str | None = None  # the group on screen (differs while frozen)
        self.status = ""  # whether ``group`` still runs, said in the title
        self.hint = ""  # how to see another group's log (several run)
        self.lines: deque[str] = deque(maxlen=KEEP_LINES)
        self.frozen = False
        self.wrap = False
        self.unseen = 0  # lines that arrived while frozen
        self.query_text = ""
        self.dropped = 0
        self._highlighter: ServerLogHighlighter | None = None
        self._wrapped_at = 0

    def compose(self) -> ComposeResult:
        log = ServerLog(max_lines=KEEP_LINES, highlight=True, auto_scroll=True, id="log")
        yield log
        # compact (one line): a short log pane at 80x24 keeps lines in view while typing
        yield Input(
            placeholder="filter the log (enter: apply, esc: clear)", id="log-search", compact=True
        )

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
        shown = self.shown_group if self.frozen else self.group
        parts = [f"Log · {shown}" if shown else "Log"]
        if shown and self.status and shown == self.group:
            parts.append(self.status)
        if self.hint:
            parts.append(self.hint)
        if self.query_text:
            n = sum(1 for line in self.lines if self.query_text.lower() in line.lower())
            parts.append(f"filter '{self.query_text}': {n} lines")
        if self.frozen:
            where = f" of {self.group}" if self.group != self.shown_group else ""
            parts.append(f"FROZEN, {self.unseen} new{where} (l: follow)")
        if self.wrap:
            parts.append("wrapped (w)")
        if self.dropped:
            parts.append(f"{self.dropped} live events dropped")
        self.border_title = " · ".join(parts)

    # --- feeding ------------------------------------------------------------------------------

    def show_group(
        self, group: str | None, lines: Iterable[str], status: str = "", hint: str = ""
    ) -> None:
        """Show ``group``'s log, ``lines`` being what was kept of it so far; ``status``
        (running, ended, ...) and ``hint`` go in the title. The same group again only
        updates the title (its new lines come through ``add``)."""
        changed = (status, hint) != (self.status, self.hint)
        self.status, self.hint = status, hint
        if group == self.group:
            if changed:
                self._retitle()
            return
        self.group = group
        self.lines.clear()
        self.lines.extend(lines)
        self.unseen = len(self.lines) if self.frozen else 0
        if not self.frozen:
            self._rewrite()
        self._retitle()

    def note(self, text: str) -> None:
        """A line of the console's own, not the server's (why the log is empty)."""
        self.log_widget.write_line(text)

    def add(self, lines: list[str]) -> None:
        if not lines:
            return
        self.lines.extend(lines)
        if self.frozen:
            self.unseen += len(lines)
            self._retitle()
            return
        shown = self._display(self._matching(lines))
        if shown:
            self.log_widget.write_lines(shown)
        if self.query_text:
            self._retitle()

    def _matching(self, lines: list[str] | deque[str]) -> list[str]:
        if not self.query_text:
            return list(lines)
        q = self.query_text.lower()
        return [line for line in lines if q in line.lower()]

    def _width(self) -> int:
        """The width lines wrap at: the log's, less its scrollbar column whether or not the
        scrollbar shows yet (it appears once the lines overflow, which would change it)."""
        return max(self.log_widget.size.width - 1, 20)

    def _display(self, lines: list[str]) -> list[str]:
        if not self.wrap:
            return lines
        self._wrapped_at = self._width()
        return wrap_lines(lines, self._wrapped_at)

    def _rewrite(self) -> None:
        log = self.log_widget
        log.clear()
        self.shown_group = self.group
        log.write_lines(self._display(self._matching(self.lines)))
        self._to_end()
        self._retitle()

    def _to_end(self) -> None:
        """Scroll to the newest line once the log has its size (``Log`` follows new lines
        only while it is at the end, which a log written before it had a size is not)."""
        log = self.log_widget
        self.call_after_refresh(log.scroll_end, animate=False, immediate=True)

    def on_resize(self) -> None:
        if self.frozen:
            return
        if self.wrap and self._width() != self._wrapped_at:
            self._rewrite()
        else:
            self._to_end()

    # --- freeze, wrap and search --------------------------------------------------------------

    def toggle_freeze(self) -> bool:
        self.frozen = not self.frozen
        if not self.frozen:
            self.unseen = 0
            self._rewrite()
        self._retitle()
        return self.frozen

    def toggle_wrap(self) -> bool:
        return self.set_wrap(not self.wrap)

    def set_wrap(self, wrap: bool) -> bool:
        if wrap != self.wrap:
            self.wrap = wrap
            if not self.frozen:
                self._rewrite()
            self._retitle()
        return self.wrap

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

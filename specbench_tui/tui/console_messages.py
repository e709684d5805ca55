"""The console's message line: every notification said there (tui/messages.py), never in a toast
over a pane.

A mixin of ``ConsoleApp`` (tui/app.py), which holds the state these read."""

from __future__ import annotations

import contextlib
from typing import Any

from textual.css.query import NoMatches

from specbench_tui.tui.look import palette_for
from specbench_tui.tui.messages import MessageBar


class MessagesView:
    """The console's message line."""

    def _on_notify(self, event: Any) -> None:
        """Textual's handler of a notification (it keeps it, with its timeout); the console
        says it on its message line (tui/messages.py), never in a toast over a pane."""
        super()._on_notify(event)
        self._paint_messages()

    def clear_notifications(self) -> None:
        """Textual's, and the message line said again at once (not at the next tick)."""
        super().clear_notifications()  # type: ignore[misc]
        self._paint_messages()

    def _unnotify(self, notification: Any, refresh: bool = True) -> None:
        """A notification that expired or was dismissed goes from the line at once."""
        super()._unnotify(notification, refresh)  # type: ignore[misc]
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

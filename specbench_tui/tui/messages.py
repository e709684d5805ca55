"""The console's messages on one line above the footer.

Textual's toasts float over whatever is under them: at the top right they covered the
Service & GPUs pane, at the bottom right the log's last lines, and they drew over the help
screen. Here the newest live notification is said on a line of its own, which covers no
pane and sits under any dialog, with how many others are live beside it. The notifications
themselves stay Textual's (``App.notify``, their timeouts, ``app._notifications``); only
their drawing moves here.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.notifications import Notification
from textual.widgets import Static

from specbench_tui.tui.look import Palette

#: The mark before a message, per severity.
SEVERITY_MARKS = {"error": "✗", "warning": "⚠", "information": "•"}


def message_line(notes: Sequence[Notification], palette: Palette) -> Text:
    """The newest of ``notes`` on one line: its severity's mark and colour, its title, the
    first line of its message, and how many more are live ("" for none)."""
    if not notes:
        return Text("")
    n = notes[-1]
    style = {"error": palette.error, "warning": palette.warning}.get(n.severity, palette.accent)
    out = Text(f"{SEVERITY_MARKS.get(n.severity, '•')} ", style=style)
    if n.title:
        out.append(f"{n.title}: ", style=palette.bold)
    body = n.message
    if n.markup:
        try:
            body = Text.from_markup(n.message).plain
        except Exception:  # a message that is not valid markup: said as written
            body = n.message
    first, _, rest = body.strip().partition("\n")
    out.append(first + (" …" if rest.strip() else ""))
    if len(notes) > 1:
        out.append(f"  (+{len(notes) - 1} more)", style=palette.muted)
    return out


class MessageBar(Static):
    """One line for the newest live notification (empty when there is none)."""

    def show(self, notes: Sequence[Notification], palette: Palette) -> None:
        self.update(message_line(notes, palette))
        self.set_class(not notes, "-empty")
        self.set_class(bool(notes) and notes[-1].severity == "error", "-error")
        self.set_class(bool(notes) and notes[-1].severity == "warning", "-warning")

"""The one-line campaign header: what runs where, how far along, how long left, and whether
the campaign is running, paused or how it ended, readable at a glance from across the room.

An ending is said as it is: a campaign that finished with failed cells or a failed check is
not a green FINISHED, and its bar shows the failures in their own colours.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.widgets import Static

from specbench_tui.results.eta import campaign_left, eta_text
from specbench_tui.results.progress import CampaignProgress, format_clock
from specbench_tui.tui.look import MARKS, Palette, palette_for, stacked_bar


def failed_check_cells(p: CampaignProgress) -> int:
    return sum(1 for c in p.cells.values() if c.failed_check)


def campaign_state(p: CampaignProgress, *, live: bool = True) -> tuple[str, str]:
    """(badge text, tone) for where the campaign stands. ``live=False``: nothing runs it
    (a results directory opened read-only), so a log without an end was interrupted."""
    c = p.counts
    if p.runs == 0:
        return "waiting", "muted"
    if not p.finished:
        if not live:
            return "interrupted", "error"
        if p.aborted:
            return "aborting", "error"
        return ("paused", "warning") if p.paused else ("running", "accent")
    if p.aborted:
        return "aborted", "error"
    if c.failed:
        return f"finished · {c.failed} failed", "error"
    if p.failed_checks():
        return "finished · check failed", "warning"
    if c.pending:
        return f"partial · {c.pending} not run", "warning"
    return "finished", "success"


def _tone(pal: Palette, tone: str) -> Style:
    return {
        "success": pal.success,
        "warning": pal.warning,
        "error": pal.error,
        "accent": pal.accent,
    }.get(tone, pal.muted)


class CampaignHeader(Static):
    """Rebuilt on the app's slow tick (elapsed changes every second) and after each batch."""

    DEFAULT_CSS = """
    CampaignHeader {
        dock: top;
        height: 1;
        background: $panel;
        color: $foreground;
        padding: 0 1;
    }
    """

    _shown: Text | None = None  # what is on screen: unchanged text is not repainted

    def show(self, p: CampaignProgress, now: float, *, live: bool = True) -> None:
        """Built in two parts so that a narrow terminal loses the campaign's name before it
        loses a count or the ETA: the state, clock, counts and ETA always show whole, the
        ETA's range and the progress bar where they fit, the name and hosts in what is left."""
        pal = palette_for(self.app)
        c = p.counts
        width = self.size.width or 80
        tail = Text(no_wrap=True)
        word, tone = campaign_state(p, live=live)
        mark = {"running": "▶", "paused": "⏸", "waiting": "…", "aborting": "…"}.get(word, "■")
        tail.append("  ")
        tail.append(
            f" {mark} {word.upper()} ", style=_tone(pal, tone) + Style(bold=True, reverse=True)
        )
        if not live:
            tail.append(" read-only", style=pal.muted)
        tail.append("  ")
        tail.append(format_clock(p.elapsed_s(now)))
        tail.append("  ")
        checks = failed_check_cells(p)
        for status, n in (("done", c.done - checks), ("failed_check", checks)):
            if n or status == "done":
                tail.append(f"{MARKS[status]}{n} ", style=pal.status(status))
        for status, n in (("failed", c.failed), ("skipped", c.skipped)):
            tail.append(f"{MARKS[status]}{n} ", style=pal.status(status))
        tail.append(f"/{c.total}", style=pal.muted)
        span = ""
        if not p.finished and live:
            shown, span = eta_text(campaign_left(p, now), p.eta_s(now))
            tail.append("  ETA ", style=pal.muted)
            tail.append(shown)
        head = Text(no_wrap=True, overflow="ellipsis")
        head.append("specbench ", style=pal.primary + pal.bold)
        head.append(p.campaign or "waiting for the campaign…", style=pal.bold)
        where = Text()
        if p.hosts:
            where.append(" @ " + ",".join(p.hosts), style=pal.muted)
        if p.simulated and "sim" not in p.hosts:
            where.append(" (simulated)", style=pal.muted)
        room = width - len(tail)
        if len(head) + len(where) <= room:
            head.append_text(where)
        elif len(head) > room:
            head.truncate(max(room, 10), overflow="ellipsis")
        head.append_text(tail)
        extra = f" ({span})" if span else ""
        if extra and len(head) + len(extra) <= width:
            head.append(extra, style=pal.muted)
        if width >= 110 and c.total and len(head) + 22 <= width:
            parts = [
                ((c.done - checks) / c.total, pal.success),
                (checks / c.total, pal.warning),
                (c.failed / c.total, pal.error),
                (c.skipped / c.total, pal.warning + Style(dim=True)),
            ]
            head.append("  ")
            head.append_text(stacked_bar(parts, 16, pal.muted))
            head.append(f" {100 * c.settled / c.total:3.0f}%")
        if head != self._shown:  # a frame that changes nothing repaints nothing
            self._shown = head
            self.update(head)

"""The one-line campaign header: what runs where, how far along, how long left, and whether
the campaign is running or paused, readable at a glance from across the room."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.widgets import Static

from specbench_tui.results.progress import CampaignProgress, format_clock
from specbench_tui.tui.look import MARKS, bar, palette_for


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

    def show(self, p: CampaignProgress, now: float) -> None:
        pal = palette_for(self.app)
        c = p.counts
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append("specbench ", style=pal.primary + pal.bold)
        t.append(p.campaign or "waiting for the campaign…", style=pal.bold)
        if p.hosts:
            t.append(" @ " + ",".join(p.hosts), style=pal.muted)
        if p.simulated and "sim" not in p.hosts:
            t.append(" (simulated)", style=pal.muted)
        word = p.state_word
        state_style = {
            "running": pal.accent,
            "paused": pal.warning,
            "finished": pal.success,
            "aborted": pal.error,
            "aborting": pal.error,
        }.get(word, pal.muted)
        mark = {"running": "▶", "paused": "⏸", "finished": "■", "aborted": "■"}.get(word, "…")
        t.append("  ")
        t.append(f" {mark} {word.upper()} ", style=state_style + Style(bold=True, reverse=True))
        t.append("  ")
        t.append(format_clock(p.elapsed_s(now)))
        t.append("  ")
        for status, n in (("done", c.done), ("failed", c.failed), ("skipped", c.skipped)):
            t.append(f"{MARKS[status]}{n} ", style=pal.status(status))
        t.append(f"/{c.total}", style=pal.muted)
        eta = p.eta_s(now)
        t.append("  ETA ", style=pal.muted)
        t.append(format_clock(eta) if eta is not None else "—")
        width = self.size.width
        if width >= 110 and c.total:
            t.append("  ")
            t.append_text(bar(c.settled / c.total, 16, pal.success, pal.muted))
            t.append(f" {100 * c.settled / c.total:3.0f}%")
        if t != self._shown:  # a frame that changes nothing repaints nothing
            self._shown = t
            self.update(t)

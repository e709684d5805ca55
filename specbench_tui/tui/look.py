"""Status marks and theme-derived Rich styles shared by the panes.

The panes build Rich ``Text`` (the tree's labels, bars, the log highlighter), which cannot
refer to CSS variables; so the colours are read from the current theme here, once per theme
change, and every pane asks this module rather than hard-coding a colour. That is what makes
the 16-colour theme work: its ``ansi_*`` colours come through as the terminal's own.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual.app import App
from textual.color import Color, ColorParseError

#: One glyph per status, distinct in shape as well as colour (colour-blind and 16-colour use).
MARKS: dict[str, str] = {
    "pending": "·",
    "running": "▶",
    "done": "✓",
    "failed": "✗",
    "skipped": "↷",
    "failed_check": "⚠",
}

SERVER_MARKS: dict[str, str] = {
    "pending": "·",
    "starting": "…",
    "ready": "●",
    "failed": "✗",
    "stopped": "○",
}


@dataclass(frozen=True)
class Palette:
    """Rich styles for the semantic colours of the current theme."""

    success: Style
    error: Style
    warning: Style
    accent: Style
    primary: Style
    muted: Style
    bold: Style

    def status(self, status: str) -> Style:
        return {
            "done": self.success,
            "failed": self.error,
            "skipped": self.warning,
            "failed_check": self.warning,
            "running": self.accent,
            "ready": self.success,
            "starting": self.accent,
            "stopped": self.muted,
        }.get(status, self.muted)


def shown_status(status: str, failed_check: bool) -> str:
    """The mark a cell shows: a finished cell whose config failed a correctness check is not
    a plain done (its figures are not a speed-up), so it gets a mark of its own."""
    return "failed_check" if failed_check and status == "done" else status


def _style(variables: dict[str, str], name: str, fallback: str) -> Style:
    try:
        return Style(color=Color.parse(variables.get(name, fallback)).rich_color)
    except ColorParseError:  # a theme variable that is not a plain colour: fall back
        return Style(color=Color.parse(fallback).rich_color)


#: Theme colours the plots' series take, in turn (one per running group, or per kind of a
#: single group's plot), so the plots match the panes around them in every theme.
SERIES_VARIABLES = ("primary", "accent", "success", "secondary", "warning", "error")


def series_colours(app: App[object]) -> list[str | tuple[int, int, int]]:
    """The plots' series colours from the theme, as plotext takes them: an RGB triple, or
    for an ANSI theme the terminal's own colour by name (``blue``, ``cyan+`` for bright)."""
    out: list[str | tuple[int, int, int]] = []
    for name in SERIES_VARIABLES:
        raw = app.theme_variables.get(name, "")
        if raw.startswith("ansi_"):
            base = raw.removeprefix("ansi_")
            bright = base.startswith("bright_")
            out.append(base.removeprefix("bright_") + ("+" if bright else ""))
            continue
        try:
            out.append(Color.parse(raw).rgb)
        except ColorParseError:  # not a plain colour: leave it out
            continue
    return out or ["blue", "yellow", "green"]


def palette_for(app: App[object]) -> Palette:
    v = app.theme_variables
    return Palette(
        success=_style(v, "success", "green"),
        error=_style(v, "error", "red"),
        warning=_style(v, "warning", "yellow"),
        accent=_style(v, "accent", "yellow"),
        primary=_style(v, "primary", "blue"),
        muted=Style(dim=True),
        bold=Style(bold=True),
    )


def bar(fraction: float, width: int, style: Style, empty: Style) -> Text:
    """A horizontal bar in eighths of a cell, so that small changes are visible at any width."""
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    partial = " ▏▎▍▌▋▊▉"[part].strip() if part else ""
    text = Text("█" * full + partial, style=style)
    text.append("░" * (width - full - (1 if partial else 0)), style=empty)
    return text


def stacked_bar(parts: list[tuple[float, Style]], width: int, empty: Style) -> Text:
    """A bar of several coloured parts (done, failed, skipped...), each a fraction of the
    whole, so a campaign that ended in failures never fills up green."""
    text = Text()
    used = 0
    total = 0.0
    for fraction, style in parts:
        total += max(fraction, 0.0)
        cells = min(round(total * width), width) - used
        if cells > 0:
            text.append("█" * cells, style=style)
            used += cells
    text.append("░" * (width - used), style=empty)
    return text

"""Durations as people write them in plans: "15m", "90s", "1h30m", "500ms", or plain seconds."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: object) -> float:
    """Seconds from a duration; raises ValueError with the accepted forms."""
    if isinstance(value, bool):
        raise ValueError('expected a duration like "90s", "15m" or "1h30m"')
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if text and _PART.sub("", text) == "":
            total = sum(float(n) * _UNITS[u] for n, u in _PART.findall(text))
            return total
    raise ValueError(f'{value!r} is not a duration; write e.g. "90s", "15m" or "1h30m"')


def format_duration(seconds: float) -> str:
    """Short human form: 42s, 7m05s, 3h12m."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"

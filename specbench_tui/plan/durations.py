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
    """Say a duration the way a plan writes it ("15m", "90s", "1h30m"), not as 900.0; past an
    hour, to the minute (seconds are noise in an estimate of hours)."""
    if seconds < 10 and seconds != int(seconds):
        return f"{seconds:.1f}s"
    s = round(seconds) if seconds < 3600 else round(seconds / 60) * 60
    if s < 120 and s % 60:
        return f"{s}s"
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    out = (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{sec}s" if sec else "")
    return out or "0s"

"""Durations as people write them in plans: "15m", "90s", "1h30m", "500ms", or plain seconds."""

from __future__ import annotations

import math
import re

_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
MAX_SECONDS = 365 * 86400.0


def parse_duration(value: object, *, allow_zero: bool = False) -> float:
    """Seconds from a duration; raises ValueError with the accepted forms.

    A timeout of zero, a negative one or NaN would silently mean "never" or "at once", so
    they are refused (``allow_zero`` for the few that may be nothing, like an overhead).
    """
    seconds: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if text and _PART.sub("", text) == "":
            seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(text))
    if seconds is None:
        raise ValueError(f'{value!r} is not a duration; write e.g. "90s", "15m" or "1h30m"')
    if not math.isfinite(seconds):
        raise ValueError(f"{value!r} is not a finite duration")
    if seconds > MAX_SECONDS:  # a timer that far out overflows the event loop's clock
        raise ValueError(f"a duration must be at most 365d (got {value!r})")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        what = "more than zero" if not allow_zero else "zero or more"
        raise ValueError(f"a duration must be {what} (got {value!r})")
    return seconds


def parse_duration_or_zero(value: object) -> float:
    return parse_duration(value, allow_zero=True)


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

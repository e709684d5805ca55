"""Numbers as the report prints them, in one place for both formats."""

from __future__ import annotations

import math
from typing import Any

from specbench_tui.report.stats import TOO_FEW

MISSING = "—"


def num(v: Any) -> float | None:
    """A finite float or None."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _digits(v: float, digits: int | None) -> int:
    if digits is not None:
        return digits
    a = abs(v)
    return 0 if a >= 1000 else 1 if a >= 10 else 2


def fnum(v: Any, digits: int | None = None, suffix: str = "") -> str:
    f = num(v)
    if f is None:
        return MISSING
    return f"{f:,.{_digits(f, digits)}f}{suffix}"


def toks(v: Any) -> str:
    """tok/s: whole numbers from 1000 up, one decimal below."""
    f = num(v)
    return MISSING if f is None else fnum(f, 0 if abs(f) >= 1000 else 1)


def secs(v: Any) -> str:
    return fnum(v, 3)


def ms(v: Any) -> str:
    """Seconds shown as milliseconds."""
    f = num(v)
    if f is None:
        return MISSING
    v = f * 1000
    return fnum(v, 2 if v < 1 else 1 if v < 100 else 0)


def speedup(v: Any) -> str:
    return fnum(v, 2, "x")


def accept(v: Any) -> str:
    return fnum(v, 2)


def pct(v: Any) -> str:
    return fnum(v, 1)


def share(v: Any) -> str:
    """A fraction 0..1 as a percentage."""
    f = num(v)
    return MISSING if f is None else f"{f * 100:.0f}%"


def count(v: Any) -> str:
    return MISSING if v is None else f"{int(v):,}"


def interval(lo: Any, hi: Any, fmt: Any = fnum) -> str:
    """``[lo–hi]`` (an en dash: a comma would read as a thousands separator), or nothing when
    there is no interval (one unit)."""
    if num(lo) is None:
        return ""
    if num(hi) is None:  # a ratio whose denominator is not clearly above zero
        return f"[{fmt(lo)}–∞)"
    return f"[{fmt(lo)}–{fmt(hi)}]"


def with_ci(mean: Any, lo: Any, hi: Any, fmt: Any = fnum) -> str:
    """A positive figure with its interval; where the interval reaches zero (two units of a
    noisy rate), ``too few units`` instead of a bound cut at zero (``[0.0-590.5]``)."""
    low, m = num(lo), num(mean)
    if low is not None and low <= 0 and m is not None and m > 0:
        return f"{fmt(mean)} ({TOO_FEW})"
    ci = interval(lo, hi, fmt)
    return f"{fmt(mean)} {ci}" if ci else fmt(mean)


def ratio(value: Any, lo: Any, hi: Any, too_few: Any = False) -> str:
    """A speed-up with its interval, or with ``too few units`` where the interval has no
    meaningful bounds (report/stats.py ``Ratio.too_few``)."""
    if too_few and num(value) is not None:
        return f"{speedup(value)} ({TOO_FEW})"
    return with_ci(value, lo, hi, speedup)


def duration(s: Any) -> str:
    """Seconds as ``1 h 02 min``, ``3 min 05 s`` or ``12.3 s``."""
    f = num(s)
    if f is None:
        return MISSING
    if f < 60:
        return f"{f:.1f} s"
    m, sec = divmod(round(f), 60)
    if m < 60:
        return f"{m} min {sec:02d} s"
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min"


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else (many or word + 's')}"

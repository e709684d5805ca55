"""Keys and values of an engine's ``key: value`` log fields, normalised one way for every
engine, so a graph of ``gen_throughput`` or ``accept_len`` reads the same from SGLang's scheduler
lines and vLLM's periodic stats."""

from __future__ import annotations

import re
from dataclasses import dataclass

_UNIT = re.compile(r"\s*\([^)]*\)")
_NON_WORD = re.compile(r"[^a-z0-9]+")
_BOOLS = {"true": 1.0, "false": 0.0}
# Log keys whose normalised form is used so often that a lookup beats the regex work.
_KEY_CACHE: dict[str, str] = {}


def norm_key(raw: str) -> str:
    key = _KEY_CACHE.get(raw)
    if key is None:
        key = _NON_WORD.sub("_", _UNIT.sub("", raw).lower()).strip("_")
        if len(_KEY_CACHE) < 512:
            _KEY_CACHE[raw] = key
    return key


def number(raw: str) -> tuple[float, float | None] | None:
    """``"12"`` -> (12, None); ``"3/100"`` -> (3, 100); ``"True"`` -> (1, None); else None."""
    raw = raw.strip().rstrip(".%")
    try:
        return float(raw), None
    except ValueError:
        pass
    b = _BOOLS.get(raw.lower())
    if b is not None:
        return b, None
    if "/" in raw:
        used, _, total = raw.partition("/")
        try:
            return float(used), float(total)
        except ValueError:
            return None
    return None


@dataclass(frozen=True)
class LogCounts:
    """What one periodic stats line says about the stretch it describes, for pooling lines
    by their tokens: tokens, verify steps (None: the line does not say) and seconds (None:
    likewise). An engine may give all three up to one factor common to its lines."""

    tokens: float
    steps: float | None
    seconds: float | None

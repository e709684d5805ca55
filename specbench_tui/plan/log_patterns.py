"""The plan's ``[logs]`` patterns: user code run on untrusted text, so compiled with the
``regex`` module, whose matches can be given a time limit, and tried on long lines before a
campaign starts, so a pattern that backtracks catastrophically is refused up front."""

from __future__ import annotations

import regex

#: Seconds one plan pattern may spend on one line.
PATTERN_TIMEOUT_S = 0.02
#: Lines a plan pattern must get through within the limit for the plan to be accepted.
PROBE_LINES = (
    "a" * 10_000,
    "0" * 10_000,
    " " * 10_000,
    "x." * 5_000,
    "accept len: " + "9" * 10_000,
    "[2026-01-01 00:00:00 TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.01, "
    "accept len: 3.10, gen throughput (token/s): 100.0, #queue-req: 0, " * 100,
)


def compile_pattern(pattern: str) -> regex.Pattern[str]:
    """Compile a plan's ``[logs]`` pattern and try it on long lines; raises ValueError when it
    does not compile or takes too long (a pattern that backtracks catastrophically)."""
    try:
        rx = regex.compile(pattern)
    except regex.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    for line in (*PROBE_LINES, *_probes_from(pattern)):
        try:
            rx.search(line, timeout=PATTERN_TIMEOUT_S * 10)
        except TimeoutError:
            raise ValueError(
                f"takes over {PATTERN_TIMEOUT_S * 10 * 1000:.0f} ms on a {len(line)}-byte line "
                "(catastrophic backtracking?); simplify it, e.g. avoid nested repeats like (a+)+"
            ) from None
    return rx


def _probes_from(pattern: str, most: int = 12) -> list[str]:
    """Long lines made of the pattern's own characters: what makes nested repeats backtrack
    is a long run of what they match, almost ending in a match."""
    chars = list(dict.fromkeys(c for c in pattern if c.isalnum() or c in " ._-:=/"))[:most]
    words = " ".join(["word"] * 3000) + "!"
    out = [words, "1" * 40 + "a"]
    for c in chars:
        out.append(c * 5000)
        out.append((c * 29 + "#") * 200)
    return out

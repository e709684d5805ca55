"""How a server log line reads in the console: a ``[date time TPn]`` stamp shortened,
an engine's statistics line as its parsed figures, a line the plan's ``[logs]`` patterns
matched marked with what they extracted.

Plain text and no textual, so that the console's pure fold of a frame's events
(``tui/frame.py``) can make the lines without a widget; ``tui/log_pane.py`` styles them.
"""

from __future__ import annotations

import re

from specbench_tui.results.events import LogLine

#: Lines the plan's own ``[logs]`` patterns matched start with this mark, then what they
#: extracted, then ``PATTERN_END`` and the line.
PATTERN_MARK = "◆ "
PATTERN_END = " │ "
#: A parsed stats line is shown as ``[time TPn] STATS_MARK`` and its figures.
STATS_MARK = "▸"

#: Stats shown first, in this order: (key, label, format spec, unit); any other parsed figure
#: follows. Formatted with ``format()`` (no per-line template parsing: a flood of stats lines
#: goes through here).
_DECODE = (
    ("accept_len", "accept", ".2f", ""),
    ("gen_throughput", "gen", ".0f", " tok/s"),
    ("accept_rate", "rate", ".2f", ""),
    ("running_req", "run", ".0f", ""),
    ("queue_req", "queue", ".0f", ""),
    ("token_usage", "usage", ".2f", ""),
    ("token", "tokens", ".0f", ""),
)
_PREFILL = (
    ("new_seq", "new-seq", ".0f", ""),
    ("new_token", "new-tok", ".0f", ""),
    ("cached_token", "cached", ".0f", ""),
    ("input_throughput", "in", ".0f", " tok/s"),
    ("running_req", "run", ".0f", ""),
    ("queue_req", "queue", ".0f", ""),
    ("token_usage", "usage", ".2f", ""),
)
_KNOWN = {
    "decode": frozenset(k for k, *_ in _DECODE),
    "prefill": frozenset(k for k, *_ in _PREFILL),
}
_NOT_SHOWN = frozenset({"decode", "prefill", "cuda_graph"})
_ENGINE_KEYS = _KNOWN["decode"] | _KNOWN["prefill"] | _NOT_SHOWN

_PREFIX = re.compile(r"^\[(?:\d{4}-\d{2}-\d{2} )?(\d{2}:\d{2}:\d{2})([^\]]*)\]\s*")


def _fmt(value: float, spec: str = "g") -> str:
    try:
        return format(value, spec)
    except (ValueError, TypeError):
        return str(value)


def compact_stats(prefix: str, stats: dict[str, float], kind: str) -> str:
    """``[09:59:15 TP0] ▸decode accept 2.95 · gen 1139 tok/s · run 1 · …``: every figure
    the line carried, the watched ones first, so none is ever cut off at the pane's edge."""
    order = _DECODE if kind == "decode" else _PREFILL
    parts = [
        f"{label} {_fmt(stats[key], spec)}{unit}"
        for key, label, spec, unit in order
        if key in stats
    ]
    known = _KNOWN[kind]
    for key, value in stats.items():  # in the line's own order
        if key not in known and key not in _NOT_SHOWN and not key.endswith("_total"):
            parts.append(f"{key} {_fmt(value)}")
    return f"{prefix}{STATS_MARK}{kind} " + " · ".join(parts)


def display_line(ev: LogLine) -> str:
    """The text shown for a line: a ``[YYYY-MM-DD hh:mm:ss TPn]`` prefix (a scheduler rank's
    stamp) loses its date; an engine's statistics line becomes its parsed figures; a line the
    plan's ``[logs]`` patterns matched starts with what they extracted."""
    line = ev.line
    m = _PREFIX.match(line)
    prefix = f"[{m.group(1)}{m.group(2)}] " if m else ""
    stats = ev.stats or {}
    kind = ""
    if "decode" in stats:  # the engine's parser marks the kind of its statistics lines
        kind = "decode"
    elif "prefill" in stats:
        kind = "prefill"
    text = compact_stats(prefix, stats, kind) if kind else prefix + (line[m.end() :] if m else line)
    if not ev.matches:
        return text
    found = " ".join(f"{k} {_fmt(v)}" for k, v in stats.items() if k not in _ENGINE_KEYS)
    return f"{PATTERN_MARK}{found or ','.join(ev.matches)}{PATTERN_END}{text}"

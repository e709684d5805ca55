"""Numbers from server log lines, for live series and the report.

The engines' own statistics lines are parsed without configuration, by their adapters
(``EngineAdapter.parse_stats_line``: each engine's periodic decode and throughput lines),
into the same keys (``gen_throughput``, ``accept_len``,
``running_req``, ...), so one live graph serves every engine. Each format has a substring no
other line has, so every line is simply offered to every adapter, the first answer wins.

The plan's ``[logs]`` patterns run on every line; their named groups come out under the group
names (a pattern without named groups gives its first group, or 1.0, under the pattern name).
A plan's pattern is the user's code run on untrusted text, so it runs under the ``regex``
module with a time limit per line: a pattern that backtracks catastrophically costs that line
its figures, not the campaign its event loop (``timeouts`` counts them, per pattern).
"""

from __future__ import annotations

from collections import Counter

import regex

from specbench_tui.engines.log_values import number
from specbench_tui.engines.registry import adapters
from specbench_tui.errors import InputError
from specbench_tui.plan.log_patterns import PATTERN_TIMEOUT_S, compile_pattern

_ENGINES = adapters()
# Without their closing punctuation: builds differ in it.
_READY_LINES = tuple(dict.fromkeys(a.ready_line.rstrip("!.") for a in _ENGINES))


class LogParser:
    """Parses server log lines into ``{name: float}``.

    Custom patterns are compiled once here; a bad one is an :class:`InputError` naming it, so a
    typo in ``[logs]`` stops the campaign before any server starts.
    """

    def __init__(self, patterns: dict[str, str] | None = None) -> None:
        self._patterns: list[tuple[str, regex.Pattern[str]]] = []
        self.timeouts: Counter[str] = Counter()  # lines a pattern gave up on, per pattern
        for name, pattern in (patterns or {}).items():
            try:
                self._patterns.append((name, compile_pattern(pattern)))
            except ValueError as exc:
                raise InputError(f"[logs] {name}: {exc}") from None

    @staticmethod
    def is_ready(line: str) -> bool:
        """True on the start-up line (any engine's) that says the server is up."""
        return any(ready in line for ready in _READY_LINES)

    def parse(self, line: str) -> dict[str, float] | None:
        """The numbers in one log line, or None when it carries none we know. Never raises."""
        return self.parse_line(line)[0]

    def parse_line(self, line: str) -> tuple[dict[str, float] | None, list[str]]:
        """The numbers in one log line and the names of the plan's ``[logs]`` patterns that
        matched it (a console highlights those). Never raises."""
        matched: list[str] = []
        try:
            return self._parse(line, matched), matched
        except Exception:  # a log line is untrusted input; a parser bug must not stop a run
            return None, []

    def _parse(self, line: str, matched: list[str]) -> dict[str, float] | None:
        out: dict[str, float] = {}
        for engine in _ENGINES:
            found = engine.parse_stats_line(line)
            if found:
                out = found
                break
        for name, rx in self._patterns:
            try:
                m = rx.search(line, timeout=PATTERN_TIMEOUT_S)
            except TimeoutError:
                self.timeouts[name] += 1
                continue
            if m is None:
                continue
            matched.append(name)
            named = m.groupdict()
            if named:
                for key, raw in named.items():
                    if raw is None:
                        continue
                    value = number(raw)
                    if value is not None:
                        out[key] = value[0]
            elif m.re.groups:
                value = number(m.group(1) or "")
                if value is not None:
                    out[name] = value[0]
            else:
                out[name] = 1.0
        return out or None

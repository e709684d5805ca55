"""Numbers from SGLang server log lines, for live series and the report.

SGLang's scheduler prints one ``Decode batch`` line every few dozen decode steps and one
``Prefill batch`` line per prefill; both are ``key: value`` lists separated by commas whose
keys change between builds (``#token`` vs ``#full token`` on hybrid GDN models, new fields
such as ``#mamba-slot: 3/100``). So the parser does not hard-code the field list: it splits the
line and normalises every key, which keeps it working on builds it has never seen.

Key names (all values floats):

``decode`` / ``prefill``
    1.0 on a ``Decode batch`` / ``Prefill batch`` line that carried numbers: the kind marker.
``running_req``, ``queue_req``
    ``#running-req``, ``#queue-req``.
``token``, ``token_usage``
    ``#token`` and ``token usage``: KV tokens held and the pool's fill fraction. On hybrid
    models, which print ``#full token`` / ``full token usage`` instead, these two are copied from
    the ``full_*`` values (kept too) so one graph serves every model.
``mamba_usage``, ``full_token``, ``full_token_usage``, ``swa_token_usage``, ...
    hybrid-model pool fields, named after their log key.
``accept_len``, ``accept_rate``
    speculative decoding's rolling acceptance (decode lines of speculative servers only).
``cuda_graph``
    1.0 / 0.0.
``gen_throughput``, ``input_throughput``
    token/s.
``new_seq``, ``new_token``, ``cached_token``
    prefill lines.

Any other ``key: value`` pair comes out under its normalised key (lower case, ``#`` and the
``(token/s)`` unit dropped, other punctuation turned into ``_``); a ``used/total`` value gives
``key`` = used and ``key_total`` = total. Text that is not a number is skipped.

The plan's ``[logs]`` patterns run on every line; their named groups come out under the group
names (a pattern without named groups gives its first group, or 1.0, under the pattern name).
A plan's pattern is the user's code run on untrusted text, so it runs under the ``regex``
module with a time limit per line: a pattern that backtracks catastrophically costs that line
its figures, not the campaign its event loop (``timeouts`` counts them, per pattern).
"""

from __future__ import annotations

import re
from collections import Counter

import regex

from specbench_tui.errors import InputError
from specbench_tui.plan.log_patterns import PATTERN_TIMEOUT_S, compile_pattern

READY_MARKER = "The server is fired up and ready to roll"

_UNIT = re.compile(r"\s*\([^)]*\)")
_NON_WORD = re.compile(r"[^a-z0-9]+")
_BOOLS = {"true": 1.0, "false": 0.0}
# Log keys whose normalised form is used so often that a lookup beats the regex work.
_KEY_CACHE: dict[str, str] = {}


def _norm_key(raw: str) -> str:
    key = _KEY_CACHE.get(raw)
    if key is None:
        key = _NON_WORD.sub("_", _UNIT.sub("", raw).lower()).strip("_")
        if len(_KEY_CACHE) < 512:
            _KEY_CACHE[raw] = key
    return key


def _number(raw: str) -> tuple[float, float | None] | None:
    """``"12"`` -> (12, None); ``"3/100"`` -> (3, 100); ``"True"`` -> (1, None); else None."""
    raw = raw.strip().rstrip(".")
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


def _parse_fields(rest: str, out: dict[str, float]) -> None:
    for part in rest.split(","):
        key_raw, sep, value_raw = part.partition(":")
        if not sep:
            continue
        key = _norm_key(key_raw)
        if not key:
            continue
        value = _number(value_raw)
        if value is None:
            continue
        out[key] = value[0]
        if value[1] is not None:
            out[f"{key}_total"] = value[1]


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
        """True on SGLang's start-up line that says the server accepts requests."""
        return READY_MARKER in line

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
        # One cheap substring test keeps the common (non-stats) line off the slow path.
        if " batch" in line:
            at = line.find("Decode batch")
            kind = "decode"
            if at < 0:
                at = line.find("Prefill batch")
                kind = "prefill"
            if at >= 0:
                _parse_fields(line[at + len(kind) + 6 :], out)
                if out:  # the marker alone, on a line with no numbers, says nothing
                    out[kind] = 1.0
                if "token" not in out and "full_token" in out:
                    out["token"] = out["full_token"]
                if "token_usage" not in out and "full_token_usage" in out:
                    out["token_usage"] = out["full_token_usage"]
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
                    value = _number(raw)
                    if value is not None:
                        out[key] = value[0]
            elif m.re.groups:
                value = _number(m.group(1) or "")
                if value is not None:
                    out[name] = value[0]
            else:
                out[name] = 1.0
        return out or None

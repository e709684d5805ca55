"""A server's effective settings, and which of them make two servers' figures incomparable.

A speed-up compares two servers that should differ only in their speculative settings. An
engine changes other settings of its own accord when speculation is on (SGLang turns overlap
scheduling off for some algorithms, lowers ``cuda_graph_max_bs``, caps running requests), and
a plan can differ by accident; either way the baseline then measures another server. So each
ready server's settings are recorded with the run's manifest, from the best source it has:

- SGLang: ``GET /server_info``, every server argument by name (``source`` "/server_info");
- vLLM: the start-up log's ``non-default args: {...}`` line (api_utils.py), every argument
  that differs from vLLM's default; a key one side lacks is at its default there;
- otherwise the plan's own command, ``--flag value`` pairs under the flag's name.

``differing`` names the keys two servers' settings differ in, leaving out what cannot change a
measurement (addresses, ports, seeds, logging and metrics switches, start-up timings) and the
speculative settings, which are what the comparison is of.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from typing import Any

#: The sources of a server's settings, as the manifest names them.
SERVER_INFO = "/server_info"
NON_DEFAULT_ARGS = "start-up log: non-default args"
PLAN_COMMAND = "the plan's command"
#: A running server (a config's ``url``) that lists no settings: no command of the plan
#: started it, so nothing says them, and its comparisons are not judged key by key.
NOT_REPORTED = "not reported: a running server that does not list its settings"

#: Where the settings come from, in words (the report's Comparability section).
SOURCES_SAID = (
    "as the server reports them: SGLang's /server_info, vLLM's non-default args, else the "
    "plan's command"
)

_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$")

#: Keys that say where a server listens or what it prints, never how it computes.
_IGNORED = frozenset(
    {
        "host",
        "port",
        "served_model_name",
        "random_seed",
        "seed",
        "startup_time",
        "internal_states",
        "version",
        "status",
        "simulated",
        "api_key",
        "launch_command",  # the whole command line: its flags are keys of their own
        "uvicorn_log_level",
        "disable_log_stats",
        "disable_log_requests",
        "disable_uvicorn_access_log",
    }
)
#: Name parts of the same kind: ports, addresses, logging, metrics, traces, file places.
_IGNORED_PARTS = re.compile(
    r"(^|_)(port|ports|ip|url|urls|endpoint|endpoints|log|logs|logging|metrics|metric|trace|"
    r"dir|labels|profile|profiler)(_|$)"
)
#: Speculative settings: what a config is compared by, never a reason it is not comparable.
_SPECULATIVE = re.compile(r"^(speculative|spec_|num_speculative)|draft")


def from_server_info(info: Mapping[str, Any]) -> dict[str, Any]:
    """SGLang's server info is its settings as they are."""
    return dict(info)


def from_log(lines: Sequence[str]) -> dict[str, Any] | None:
    """The last ``non-default args: {...}`` line among ``lines`` (a Python dict literal, as
    vLLM prints it), else None."""
    for line in reversed(lines):
        m = _NON_DEFAULT.search(line)
        if m is None:
            continue
        try:
            got = ast.literal_eval(m.group(1))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
        return got if isinstance(got, dict) else None
    return None


def from_command(command: Sequence[str]) -> dict[str, Any]:
    """The ``--flag value`` / ``--flag=value`` / ``--flag`` words of a launch command, by the
    flag's name with dashes as underscores (a switch is True); the last of a repeated flag."""
    out: dict[str, Any] = {}
    args = list(command)
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if not word.startswith("--") or word == "--":
            continue
        name, eq, value = word[2:].partition("=")
        key = name.replace("-", "_")
        if eq:
            out[key] = value
        elif i < len(args) and not args[i].startswith("--"):
            out[key] = args[i]
            i += 1
        else:
            out[key] = True
    return out


def counts(key: str) -> bool:
    """Whether a setting can change what a server measures and is not a speculative one."""
    k = key.lower().lstrip("_")
    return not (k in _IGNORED or _IGNORED_PARTS.search(k) or _SPECULATIVE.search(k))


#: Caps on how many requests run at once: they change a measurement only where the level
#: reaches the lower of the two (a speculative server is often given a lower one).
BATCH_CAPS = frozenset({"max_running_requests", "max_num_seqs", "max_batch_size"})
#: The KV pool's size in tokens: a draft model takes some of the memory, so it differs with
#: speculation by nature; it changes a measurement only where the requests in flight could
#: fill the smaller pool.
POOL_SIZES = frozenset({"max_total_num_tokens", "max_total_tokens"})
#: The memory settings behind the pool: where the pool's size is not reported, they count
#: under concurrency (one request at a time never fills a pool).
MEMORY_SHARES = frozenset(
    {
        "mem_fraction_static",
        "gpu_memory_utilization",
        "kv_cache_memory_bytes",
        "num_gpu_blocks_override",
        "free_gpu_memory_fraction",
    }
)

_ABSENT = object()


def differing(
    a: Mapping[str, Any], b: Mapping[str, Any], level: int = 0, need: int | None = None
) -> list[str]:
    """The keys, in name order, whose values differ between two servers' settings and that
    can change a measurement at concurrency ``level`` (0: one request at a time), ``need``
    tokens in flight at most (None: not known). Left out: what ``counts`` leaves out; caps
    on running requests the level does not reach; pool sizes ``need`` cannot fill (or any,
    where ``need`` is not known); memory shares where both sides report their pool's size
    or the level is 0. A key one side lacks differs when the other has it (for vLLM's
    non-default args: one side left it at its default)."""
    keys = sorted(k for k in {*a, *b} if counts(k))
    pools = any(k in a for k in POOL_SIZES) and any(k in b for k in POOL_SIZES)
    out = []
    for k in keys:
        x, y = a.get(k, _ABSENT), b.get(k, _ABSENT)
        if _norm(x) == _norm(y):
            continue
        if k in BATCH_CAPS and not _cap_reached(level, x, y):
            continue
        if k in POOL_SIZES and (need is None or not _cap_reached(need, x, y)):
            continue
        if k in MEMORY_SHARES and (level == 0 or pools):
            continue
        out.append(k)
    return out


def _cap_reached(level: int, *caps: Any) -> bool:
    """Whether ``level`` (requests, or tokens) reaches the lower of the caps (an unknown or
    absent cap is taken as reached under any load: the comparison cannot rule it out)."""
    low = []
    for c in caps:
        v = _norm(c)
        if isinstance(v, float):
            low.append(v)
    if len(low) < len(caps):
        return level > 0
    return level >= min(low)


def _norm(v: Any) -> Any:
    """Values as the two sources may spell them: a list and a tuple alike, "8" and 8 alike."""
    if isinstance(v, list | tuple):
        return tuple(_norm(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((str(k), _norm(x)) for k, x in v.items()))
    if isinstance(v, str):
        with_number = v.strip()
        try:
            return float(with_number)
        except ValueError:
            return with_number
    if isinstance(v, bool) or v is None or v is _ABSENT:
        return v
    if isinstance(v, int | float):
        return float(v)
    return repr(v)


def said(a: Mapping[str, Any], b: Mapping[str, Any], keys: Sequence[str], most: int = 4) -> str:
    """``key: a vs b`` for the first ``most`` keys, and how many more."""
    parts = [f"{k}: {_shown(a, k)} vs {_shown(b, k)}" for k in keys[:most]]
    more = len(keys) - most
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _shown(d: Mapping[str, Any], key: str) -> str:
    if key not in d:
        return "default"
    text = repr(d[key])
    return text if len(text) <= 40 else text[:37] + "..."

"""The engines a plan may name: the one place that knows them all.

Adding an engine is its module (``engines/<engine>.py``, an :class:`EngineAdapter`) and one
line in :data:`_ADAPTERS`. The functions below answer for an engine by its name, for the code
that holds a name (a group, a results row) rather than an adapter.
"""

from __future__ import annotations

from collections.abc import Sequence

from specbench_tui.engines import sglang, trtllm, vllm
from specbench_tui.engines.adapter import EngineAdapter
from specbench_tui.engines.log_values import LogCounts

_ADAPTERS: dict[str, EngineAdapter] = {
    a.name: a for a in (sglang.ADAPTER, vllm.ADAPTER, trtllm.ADAPTER)
}

ENGINE_NAMES: tuple[str, ...] = tuple(_ADAPTERS)

#: The engine of a plan that names none, and the one results without an engine recorded
#: assume.
DEFAULT_ENGINE = sglang.ADAPTER.name

#: The engine whose wire format the embedded simulator speaks (``specbench_tui/sim``): a
#: rehearsal of any plan runs its groups as this engine's.
SIMULATED_ENGINE = sglang.ADAPTER.name

#: Every client API some engine serves (the plan's ``api``), in a stable order.
API_NAMES: tuple[str, ...] = tuple(dict.fromkeys(api for a in _ADAPTERS.values() for api in a.apis))


def adapter(engine: str) -> EngineAdapter:
    """The adapter of an engine by its plan name. An empty name (a results log written
    before groups recorded their engine) is the default engine."""
    found = _ADAPTERS.get(engine or DEFAULT_ENGINE)
    if found is None:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINE_NAMES)}")
    return found


def adapters() -> tuple[EngineAdapter, ...]:
    """Every engine's adapter, in registry order (log lines are offered to each)."""
    return tuple(_ADAPTERS.values())


def accept_length(
    engine: str, tokens: float | None, steps: float | None, accepted: float | None
) -> float | None:
    """The accept length of ``engine`` (an empty name: :data:`DEFAULT_ENGINE`) from counts
    summed over what it covers: output tokens, verify steps and accepted draft tokens
    (``EngineAdapter.accept_length``)."""
    return adapter(engine).accept_length(tokens, steps, accepted)


def accept_length_definition(engine: str) -> str:
    """The definition in words, as the report's methodology and the README name it."""
    return adapter(engine).accept_length_definition


def engine_dead(engine: str, error: str) -> str | None:
    """When a request's error is ``engine``'s own answer that it can no longer serve (its
    server is dead however its process looks), that answer in words
    (``EngineAdapter.dead_engine``); else None."""
    return adapter(engine).dead_engine(error)


def log_window(engine: str, stats: dict[str, float], seconds: float) -> LogCounts | None:
    """What one of ``engine``'s periodic stats lines says about its stretch (tokens, steps,
    seconds), for pooling a cell's lines by their tokens (``EngineAdapter.log_window``)."""
    return adapter(engine).log_window(stats, seconds)


def engine_starting(command: Sequence[str]) -> str | None:
    """The engine a launch command starts (``EngineAdapter.starts``), None where no engine's
    program is in it (a wrapper script): what a plan that names no engine runs."""
    found = [a.name for a in _ADAPTERS.values() if a.starts(command)]
    return found[0] if len(found) == 1 else None


def engine_owning(models: object) -> str | None:
    """The engine a ``GET /v1/models`` answer names in its models' ``owned_by`` (each
    engine's own default), None where it names none this tool knows."""
    data = models.get("data") if isinstance(models, dict) else None
    if not isinstance(data, list):
        return None
    owners = {m.get("owned_by") for m in data if isinstance(m, dict)}
    found = [a.name for a in _ADAPTERS.values() if a.owned_by in owners]
    return found[0] if len(found) == 1 else None

"""The engines a plan may name: the one place that knows them all.

Adding an engine is its module (``engines/<engine>.py``, an :class:`EngineAdapter`) and one
line in :data:`_ADAPTERS`.
"""

from __future__ import annotations

from specbench_tui.engines import sglang, trtllm, vllm
from specbench_tui.engines.adapter import EngineAdapter

_ADAPTERS: dict[str, EngineAdapter] = {
    a.name: a for a in (sglang.ADAPTER, vllm.ADAPTER, trtllm.ADAPTER)
}

ENGINE_NAMES: tuple[str, ...] = tuple(_ADAPTERS)

#: The engine of a plan that names none.
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

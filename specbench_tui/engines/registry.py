"""The engines a plan may name, and the traits of each: the one place that knows them all."""

from __future__ import annotations

from specbench_tui.engines import sglang, vllm
from specbench_tui.engines.traits import ENGINE_NAMES, EngineTraits

_TRAITS: dict[str, EngineTraits] = {"sglang": sglang.TRAITS, "vllm": vllm.TRAITS}


def traits(engine: str) -> EngineTraits:
    """The traits of an engine by its plan name (``sglang`` or ``vllm``)."""
    found = _TRAITS.get(engine)
    if found is None:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINE_NAMES)}")
    return found

"""The engines a plan may name, and the traits of each: the one place that knows them all."""

from __future__ import annotations

from collections.abc import Callable

from specbench_tui.engines import sglang, vllm
from specbench_tui.engines.log_values import LogCounts
from specbench_tui.engines.traits import ENGINE_NAMES, EngineTraits

_TRAITS: dict[str, EngineTraits] = {"sglang": sglang.TRAITS, "vllm": vllm.TRAITS}

AcceptLength = Callable[[float | None, float | None, float | None], float | None]
#: Each engine's accept length from summed counts (tokens, verify steps, accepted drafts): the
#: definition its own counters and logs use, for requests, cells, the report and the console.
_ACCEPT: dict[str, AcceptLength] = {"sglang": sglang.accept_length, "vllm": vllm.accept_length}
_DEFINITIONS: dict[str, str] = {
    "sglang": sglang.ACCEPT_LENGTH_DEFINITION,
    "vllm": vllm.ACCEPT_LENGTH_DEFINITION,
}
_LOG_WINDOW: dict[str, Callable[[dict[str, float], float], LogCounts | None]] = {
    "sglang": sglang.log_window,
    "vllm": vllm.log_window,
}
#: The engine the simulator speaks, and the one results without an engine recorded assume.
DEFAULT_ENGINE = "sglang"


def traits(engine: str) -> EngineTraits:
    """The traits of an engine by its plan name (``sglang`` or ``vllm``)."""
    found = _TRAITS.get(engine)
    if found is None:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINE_NAMES)}")
    return found


def accept_length(
    engine: str, tokens: float | None, steps: float | None, accepted: float | None
) -> float | None:
    """The accept length of ``engine`` (an empty name: :data:`DEFAULT_ENGINE`) from counts
    summed over what it covers: output tokens, verify steps and accepted draft tokens."""
    return _ACCEPT[engine or DEFAULT_ENGINE](tokens, steps, accepted)


def accept_length_definition(engine: str) -> str:
    """The definition in words, as the report's methodology and the README name it."""
    return _DEFINITIONS[engine or DEFAULT_ENGINE]


def log_window(engine: str, stats: dict[str, float], seconds: float) -> LogCounts | None:
    """What one of ``engine``'s periodic stats lines says about its stretch (tokens, steps,
    seconds), for pooling a cell's lines by their tokens; ``seconds`` is the stretch as the
    stamps give it."""
    return _LOG_WINDOW[engine or DEFAULT_ENGINE](stats, seconds)

"""The facts about one serving engine that a plan and a campaign need before anything runs.

Everything here is pure data or pure functions of the server command, so plan expansion, the
dry run and the simulator can use it without touching a host.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

EngineName = Literal["sglang", "vllm"]
ENGINE_NAMES: tuple[EngineName, ...] = ("sglang", "vllm")


@dataclass(frozen=True)
class Speculation:
    """What a server command asks for: speculative decoding on or off, and which algorithm."""

    on: bool
    algorithm: str | None = None  # as the engine names it: "EAGLE", "DDTREE", "ngram", ...


@dataclass(frozen=True)
class EngineTraits:
    """One engine's defaults and markers.

    ``health_paths`` maps the client API to the endpoints tried for readiness (the first 200
    wins); ``ready_line`` is the start-up log line after which health checks come at once.
    """

    name: EngineName
    label: str
    default_launch: tuple[str, ...]
    default_api: Literal["sglang", "openai"]
    apis: tuple[Literal["sglang", "openai"], ...]
    ready_line: str
    health_paths: dict[str, tuple[str, ...]]
    requested_speculation: Callable[[Sequence[str]], Speculation]
    # How a measured request gets a cold prefix cache: "flush" (POST /flush_cache before it,
    # SGLang) or "salt" (a cache_salt of its own in the request, vLLM: its cache reset is a
    # development-mode endpoint).
    cold_cache: Literal["flush", "salt"] = "flush"
    # What the engine does with a prompt the client rendered from the model's template:
    # "adds_bos": its text routes tokenize with special tokens, so the model's BOS comes once
    # more; a leading BOS the template wrote is taken off the text (SGLang). "verbatim": the
    # request asks for the text to be tokenized as it is (vLLM ``add_special_tokens: false``).
    text_prompt: Literal["adds_bos", "verbatim"] = "adds_bos"


def flag_value(command: Sequence[str], *names: str) -> str | None:
    """The value of the last ``--flag VALUE`` or ``--flag=VALUE`` among ``names``; a flag given
    twice takes its last value, as argparse does."""
    value: str | None = None
    args = list(command)
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(name + "="):
                value = arg[len(name) + 1 :]
    return value


def has_flag(command: Sequence[str], *names: str) -> bool:
    return any(a in names or any(a.startswith(n + "=") for n in names) for a in command)

"""TensorRT-LLM's adapter: ``trtllm-serve`` (its OpenAI-compatible server), the per-request
accept length in its chat stream, its Prometheus counters and its speculative config.

Built from TensorRT-LLM's source (NVIDIA/TensorRT-LLM), which cannot run on the machines that
test this project; the fixtures beside the tests (``tests/fixtures/trtllm/``) follow the same
files:

``tensorrt_llm/commands/serve.py``
    ``trtllm-serve MODEL --host --port --tp_size N --backend pytorch --config FILE.yaml``
    (``--extra_llm_api_options`` is the older name of ``--config``); ``python -m
    tensorrt_llm.commands.serve`` runs the same command. Speculative decoding is asked for in
    the YAML file's ``speculative_config`` (``decoding_type: Eagle``, ``MTP``, ``NGram``...).
``tensorrt_llm/serve/openai_server.py``
    ``/health`` (200 once the engine runs), ``/version`` (``{"version": ...}``), ``/v1/models``
    (the model directory's name), ``/v1/chat/completions``; with ``return_perf_metrics: true``
    in the YAML, the Prometheus page at ``/prometheus/metrics`` (``/metrics`` is a JSON queue
    of iteration stats that each read drains, so it cannot give a window's deltas).
``tensorrt_llm/serve/postprocess_handlers.py``
    every streamed choice carries ``avg_decoded_tokens_per_iter``: the request's generated
    tokens over its decoding iterations so far. The iterations count the context (prefill)
    iteration, which makes the first token, and one per verify step after it (the samplers
    of ``tensorrt_llm/_torch`` add one to ``py_decoding_iter`` for each); the usage chunk
    (``stream_options.include_usage``) carries ``completion_tokens``.
``tensorrt_llm/metrics/collector.py``
    per finished request: ``trtllm_generation_tokens_total`` and, per draft position
    (label ``token_position``), ``trtllm_spec_decode_drafted_tokens_total`` and
    ``trtllm_spec_decode_accepted_tokens_total``. The iteration counters
    (``trtllm_spec_decode_num_*_tokens_total``) are fed from only the latest of the iteration
    stats the server drains, so they undercount and are not used.

The acceptance definition is vLLM's (one plus accepted drafts per verify step, the bonus token
included). Per request, from the stream: ``n`` completion tokens over ``a`` tokens per
iteration give ``round(n / a)`` iterations, so ``round(n / a) - 1`` verify steps and
``n - 1 - steps`` accepted drafts (each step makes one token of its own plus its accepted
drafts). Per cell, from the counters: verify steps are the drafted tokens at position 0 (every
step drafts a first token), accepted drafts the sum over positions.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from specbench_tui.engines.adapter import (
    EngineAdapter,
    Speculation,
    flag_value,
)
from specbench_tui.engines.counters import Counters
from specbench_tui.engines.facts import ServerFacts
from specbench_tui.engines.streams import (
    MAX_COUNT,
    BadServerData,
    OpenAIStream,
    StreamMode,
    StreamParser,
)
from specbench_tui.errors import DataError
from specbench_tui.results.cells import ServiceGroup

READY_LINE = "Application startup complete."  # uvicorn's, once the engine is loaded
PROMETHEUS_PATH = "/prometheus/metrics"
CONFIG_FLAGS = ("--config", "--extra_llm_api_options")
_PROGRAMS = ("trtllm-serve", "tensorrt_llm.commands.serve")

GENERATION_TOKENS = "trtllm_generation_tokens_total"
DRAFTED_PER_POSITION = "trtllm_spec_decode_drafted_tokens_total"
ACCEPTED_PER_POSITION = "trtllm_spec_decode_accepted_tokens_total"
POSITION_LABEL = "token_position"
SPEC_CONFIG_INFO = "trtllm_speculative_config_info"
PARALLEL_CONFIG_INFO = "trtllm_parallel_config_info"

PER_ITER_KEY = "avg_decoded_tokens_per_iter"


# --- what a command asks for: the speculative_config of its YAML file -------------------------

_TOP_KEY = re.compile(r"^speculative_config\s*:\s*(.*?)\s*(?:#.*)?$")
_CHILD = re.compile(r"^(\s+)([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(.*?)\s*(?:#.*)?$")
_FLOW_TYPE = re.compile(r"\bdecoding_type\s*:\s*['\"]?([A-Za-z0-9_.-]+)")


class ConfigFileError(DataError, ValueError):
    """The ``--config`` YAML cannot be read, or its ``speculative_config`` cannot be told."""


def _scalar(raw: str) -> str:
    return raw.strip().strip("'\"")


def speculation_of_yaml(text: str) -> Speculation:
    """``speculative_config`` of a ``trtllm-serve`` YAML file: present (and not null) means
    speculative decoding, ``decoding_type`` names the algorithm.

    Only the shapes the engine's documentation writes are read: a block mapping under a
    top-level ``speculative_config:`` key, or a flow mapping on its line. Anything else is a
    :class:`ConfigFileError`, never a guess.
    """
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _TOP_KEY.match(line)
        if not m:
            continue
        rest = m.group(1)
        if rest in ("null", "~", "Null", "NULL"):
            return Speculation(on=False)
        if rest.startswith("{"):
            t = _FLOW_TYPE.search(rest)
            return Speculation(on=True, algorithm=t.group(1) if t else None)
        if rest:
            raise ConfigFileError(f"speculative_config: {rest!r} is not a mapping")
        indent: int | None = None
        for child in lines[i + 1 :]:
            if not child.strip() or child.lstrip().startswith("#"):
                continue
            c = _CHILD.match(child)
            if c is None:
                if not child[:1].isspace():
                    break  # the next top-level key
                raise ConfigFileError(f"cannot read the line {child.strip()!r}")
            if indent is None:
                indent = len(c.group(1))
            if len(c.group(1)) == indent and c.group(2) == "decoding_type":
                return Speculation(on=True, algorithm=_scalar(c.group(3)) or None)
        if indent is None:
            raise ConfigFileError("speculative_config: is empty")
        return Speculation(on=True)
    return Speculation(on=False)


def _config_path(command: Sequence[str]) -> str | None:
    return flag_value(command, *CONFIG_FLAGS)


# --- the chat stream --------------------------------------------------------------------------


def trtllm_spec_counts(per_iter: Any, completion: int | None) -> dict[str, Any]:
    """Verify steps, accepted drafts and accept length of one request from its completion
    tokens and ``avg_decoded_tokens_per_iter`` (see the module docstring)."""
    if per_iter is None or completion is None:
        return {}
    if isinstance(per_iter, bool) or not isinstance(per_iter, int | float):
        raise BadServerData(f"{PER_ITER_KEY} = {per_iter!r} is not a number")
    if not (1.0 <= per_iter <= MAX_COUNT) or per_iter > max(completion, 1):
        raise BadServerData(f"{PER_ITER_KEY} = {per_iter!r} is out of range")
    if completion == 0:
        return {}
    steps = round(completion / per_iter) - 1
    if steps <= 0:
        return {"verify": 0}  # it ended on its first token: no step verified a draft
    accepted = completion - 1 - steps
    if accepted < 0:
        raise BadServerData(
            f"{PER_ITER_KEY} = {per_iter!r} gives {steps} steps for {completion} tokens"
        )
    return {"verify": steps, "accepted": accepted, "accept_length": 1.0 + accepted / steps}


class TrtllmChatStream(OpenAIStream):
    """The chat stream with the running ``avg_decoded_tokens_per_iter`` of each choice."""

    def __init__(self) -> None:
        super().__init__()
        self.per_iter: Any = None

    def _chunk(self, data: dict[str, Any], choice: dict[str, Any] | None) -> None:
        if choice is not None and choice.get(PER_ITER_KEY) is not None:
            self.per_iter = choice[PER_ITER_KEY]

    def _spec_counts(self, output_tokens: int | None) -> dict[str, Any]:
        return trtllm_spec_counts(self.per_iter, output_tokens)


# --- counters and the Prometheus page ---------------------------------------------------------


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def _counters(text: str) -> Counters:
    generation: float | None = None
    drafted: dict[int, float] = {}
    accepted: dict[int, float] = {}
    for name, labels, value in _samples(text):
        if name == GENERATION_TOKENS:
            generation = (generation or 0.0) + value
        elif name in (DRAFTED_PER_POSITION, ACCEPTED_PER_POSITION):
            try:
                pos = int(labels.get(POSITION_LABEL, ""))
            except ValueError:
                continue
            into = drafted if name == DRAFTED_PER_POSITION else accepted
            into[pos] = into.get(pos, 0.0) + value
    # The page exists only with the collector, whose labelled counters have a sample only
    # once a finished request moved them: a family absent here means none yet, zero (and
    # stays so on a server without speculation).
    n = max([*drafted, *accepted], default=-1) + 1
    return Counters(
        generation_tokens=generation or 0.0,
        verify_steps=drafted.get(0, 0.0),
        accepted_tokens=sum(accepted.values()),
        draft_tokens=sum(drafted.values()),
        per_position=tuple(accepted.get(i, 0.0) for i in range(n)),
    )


def _config_info(text: str) -> dict[str, Any]:
    """What the config-info gauges say: speculation on, its method, the TP size."""
    out: dict[str, Any] = {}
    for name, labels, value in _samples(text):
        if value != 1.0:
            continue
        if name == SPEC_CONFIG_INFO:
            enabled = labels.get("spec_enabled", "").lower()
            if enabled in ("true", "false"):
                out["speculative"] = enabled == "true"
            if labels.get("spec_method") and out.get("speculative"):
                out["algorithm"] = labels["spec_method"]
        elif name == PARALLEL_CONFIG_INFO:
            with contextlib.suppress(ValueError):
                out["tp"] = int(labels.get("tensor_parallel_size", ""))
    return out


# --- the adapter ------------------------------------------------------------------------------


class TrtllmAdapter(EngineAdapter):
    """TensorRT-LLM's ``trtllm-serve``."""

    name = "trtllm"
    label = "TensorRT-LLM"
    owned_by = "tensorrt_llm"
    programs = _PROGRAMS
    packages = ("tensorrt_llm", "tensorrt", "torch", "transformers")
    default_launch = (
        "{python}",
        "-m",
        "tensorrt_llm.commands.serve",
        "{model}",
        "--tp_size",
        "{tp}",
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "--backend",
        "pytorch",
    )
    ready_line = READY_LINE
    cold_cache = "salt"  # the chat request's cache_salt, passed to generate_async
    metrics_path = PROMETHEUS_PATH

    def check_command(self, command: Sequence[str]) -> str | None:
        """The YAML file a command names must be readable here: what the config asks for
        (its ``speculative_config``) is read from it before anything runs."""
        path = _config_path(command)
        if path is None:
            return None
        try:
            speculation_of_yaml(Path(path).expanduser().read_text(encoding="utf-8"))
        except OSError as exc:
            return (
                f"{CONFIG_FLAGS[0]} {path}: cannot read it here ({exc.strerror or exc}); "
                "the speculative_config it holds is what the config asks for"
            )
        except (ConfigFileError, UnicodeDecodeError) as exc:
            return f"{CONFIG_FLAGS[0]} {path}: {exc}"
        return None

    def requested_speculation(self, command: Sequence[str]) -> Speculation:
        path = _config_path(command)
        if path is None:
            return Speculation(on=False)
        try:
            return speculation_of_yaml(Path(path).expanduser().read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return Speculation(on=False)  # check_command said why, before this was asked

    def model_path(self, command: Sequence[str]) -> str | None:
        """The command's one positional argument: ``trtllm-serve [serve] MODEL ...``."""
        args = list(command)
        at = next((i for i, a in enumerate(args) if a.endswith(_PROGRAMS)), None)
        if at is None:
            return None
        rest = args[at + 1 :]
        if rest[:1] == ["serve"]:
            rest = rest[1:]
        return rest[0] if rest and not rest[0].startswith("-") else None

    def same_algorithm(self, asked: str, running: str) -> bool:
        """``decoding_type`` is matched without case (``Eagle``, ``EAGLE3``, ``MTP``...)."""
        return asked.replace("-", "").lower() == running.replace("-", "").lower()

    def stream_parser(self, api: str, mode: StreamMode = "auto") -> StreamParser:
        return TrtllmChatStream()

    parse_counters = staticmethod(_counters)

    def read_facts(self, facts: ServerFacts, metrics: str | None, log_lines: Sequence[str]) -> None:
        """The config-info gauges of the Prometheus page say speculation, method and TP."""
        if metrics is None:
            return
        facts.metrics = True
        with contextlib.suppress(ValueError):
            info = _config_info(metrics)
            facts.speculative = info.get("speculative")
            facts.algorithm = info.get("algorithm")
            facts.tp = info.get("tp")

    def notes(self, group: ServiceGroup, facts: ServerFacts) -> list[str]:
        if group.speculative and not facts.metrics:
            return [
                "cell acceptance from requests only: TensorRT-LLM serves its counters at "
                f"{PROMETHEUS_PATH} only with return_perf_metrics: true in its --config YAML"
            ]
        return []

    def missing_accept_length(self, api: str) -> str:
        return f"the stream carried no {PER_ITER_KEY} (or no completion_tokens in its usage)"


ADAPTER = TrtllmAdapter()

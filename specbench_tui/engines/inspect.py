"""After a server is ready: what actually runs, against what the config asked for.

A config that asks for speculative decoding and silently runs without it (a flag the build
ignores, a draft model that did not load) would produce a "speed-up" of nothing; a server that
runs at another TP size measures another setup. So once a server answers, this asks the engine
what it runs and returns the differences as problems that fail the group, plus what the rest
of the campaign needs: the served model name requests must carry, SGLang's stream mode, whether
the counters are there, and the engine version for the report.

Where each fact comes from:

SGLang
    ``GET /server_info`` (``/get_server_info`` on older builds): ``speculative_algorithm``,
    ``tp_size``, ``incremental_streaming_output``, ``enable_metrics``, ``version``.
vLLM
    ``GET /version``; ``GET /metrics`` (the ``vllm:spec_decode_*`` families exist only with
    speculative decoding); the start-up config line in the log
    (``speculative_config=SpeculativeConfig(method='ngram', ...)``, ``tensor_parallel_size=N``).
both
    ``GET /v1/models``: the served model name (the plan's ``served_model_name`` overrides it,
    and must be among the listed names).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from specbench_tui.engines import sglang, vllm
from specbench_tui.engines.counters import METRICS_PATH
from specbench_tui.engines.registry import traits
from specbench_tui.engines.streams import StreamMode
from specbench_tui.engines.traits import flag_value, has_flag
from specbench_tui.results.cells import ServiceGroup


@dataclass
class ServerFacts:
    """What a ready server reports about itself (None: it did not say)."""

    engine: str
    version: str | None = None
    served_model: str | None = None  # the name requests carry
    models: list[str] = field(default_factory=list)  # what /v1/models lists
    speculative: bool | None = None
    algorithm: str | None = None
    tp: int | None = None
    stream_mode: StreamMode = "auto"
    metrics: bool = False  # /metrics has the counters acceptance needs
    problems: list[str] = field(default_factory=list)  # what ran is not what was asked
    notes: list[str] = field(default_factory=list)  # what the operator should know

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


async def _get_json(client: httpx.AsyncClient, url: str) -> Any:
    resp = await client.get(url)
    if resp.status_code != 200:
        return None
    try:
        return resp.json()
    except ValueError:
        return None


async def _get_text(client: httpx.AsyncClient, url: str) -> str | None:
    resp = await client.get(url)
    return resp.text if resp.status_code == 200 else None


async def inspect_server(
    group: ServiceGroup,
    base_url: str,
    log_lines: Sequence[str] = (),
    *,
    client: httpx.AsyncClient | None = None,
) -> ServerFacts:
    """Ask a ready server what it runs; never raises for what the server says or lacks."""
    own = client is None
    if client is None:
        client = httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(20.0, connect=5.0))
    base = base_url.rstrip("/")
    facts = ServerFacts(engine=group.engine)
    try:
        with contextlib.suppress(httpx.HTTPError):
            models = await _get_json(client, base + "/v1/models")
            if isinstance(models, dict) and isinstance(models.get("data"), list):
                facts.models = [str(m["id"]) for m in models["data"] if isinstance(m, dict)]
        if group.engine == "vllm":
            await _vllm(facts, client, base, log_lines)
        else:
            await _sglang(facts, client, base)
    finally:
        if own:
            await client.aclose()
    _served_model(facts, group)
    if group.host_kind != "sim":  # the simulator rehearses a plan; it runs no real engine
        _compare(facts, group)
        _notes(facts, group)
    return facts


async def _sglang(facts: ServerFacts, client: httpx.AsyncClient, base: str) -> None:
    info: Any = None
    for path in sglang.SERVER_INFO_PATHS:
        with contextlib.suppress(httpx.HTTPError):
            info = await _get_json(client, base + path)
        if isinstance(info, dict):
            break
    if not isinstance(info, dict):
        facts.notes.append("the server answered no server info; what runs is not confirmed")
        return
    f = sglang.server_info_facts(info)
    facts.version = f["version"]
    facts.speculative = f["speculative"]
    facts.algorithm = f["algorithm"]
    facts.tp = f["tp"]
    facts.stream_mode = f["stream_mode"] or "auto"
    if f["metrics"]:
        # The counters appear on the page only once a request has moved them, so the page
        # answering is all that can be checked now.
        with contextlib.suppress(httpx.HTTPError):
            facts.metrics = await _get_text(client, base + METRICS_PATH) is not None


async def _vllm(
    facts: ServerFacts, client: httpx.AsyncClient, base: str, log_lines: Sequence[str]
) -> None:
    with contextlib.suppress(httpx.HTTPError):
        v = await _get_json(client, base + vllm.VERSION_PATH)
        if isinstance(v, dict) and v.get("version") is not None:
            facts.version = str(v["version"])
    text = None
    with contextlib.suppress(httpx.HTTPError):
        text = await _get_text(client, base + METRICS_PATH)
    cfg = vllm.config_facts(log_lines)
    facts.version = facts.version or cfg.get("version")
    facts.algorithm = cfg.get("algorithm")
    facts.tp = cfg.get("tp")
    if text is not None:
        facts.metrics = True
        facts.speculative = vllm.DRAFTS[: -len("_total")] in text
    else:
        facts.speculative = cfg.get("speculative")


def _served_model(facts: ServerFacts, group: ServiceGroup) -> None:
    if group.served_model_name:
        facts.served_model = group.served_model_name
        if facts.models and group.served_model_name not in facts.models:
            facts.problems.append(
                f"served_model_name = {group.served_model_name!r} but the server serves "
                f"{', '.join(map(repr, facts.models))} (GET /v1/models)"
            )
    elif facts.models:
        facts.served_model = facts.models[0]
    elif group.api == "openai":
        facts.notes.append(
            "GET /v1/models listed no model; requests carry no model name "
            "(set served_model_name if the server needs one)"
        )


def _compare(facts: ServerFacts, group: ServiceGroup) -> None:
    eng = traits(group.engine)
    asked = group.spec_algorithm or "speculative decoding"
    if group.speculative and facts.speculative is False:
        facts.problems.append(
            f"config {group.config!r} asks for {asked} but {eng.label} runs without "
            "speculative decoding; its speed-up would be meaningless"
        )
    elif not group.speculative and facts.speculative:
        facts.problems.append(
            f"config {group.config!r} asks for no speculative decoding but {eng.label} runs "
            f"{facts.algorithm or 'it'}"
        )
    elif group.speculative and facts.speculative is None:
        facts.notes.append(f"{eng.label} did not say whether it runs {asked}; not confirmed")
    if group.speculative and group.spec_algorithm and facts.algorithm:
        same = (vllm.same_algorithm if group.engine == "vllm" else sglang.same_algorithm)(
            group.spec_algorithm, facts.algorithm
        )
        if not same:
            facts.problems.append(
                f"config {group.config!r} asks for {group.spec_algorithm} but {eng.label} "
                f"runs {facts.algorithm}"
            )
    if facts.tp is not None and facts.tp != group.tp:
        facts.problems.append(f"the group is TP {group.tp} but {eng.label} runs with TP {facts.tp}")


def _notes(facts: ServerFacts, group: ServiceGroup) -> None:
    if group.engine == "sglang" and group.api != "openai" and facts.stream_mode == "cumulative":
        # Each chunk resends the whole text so far: the bytes a request reads, and the
        # client's CPU for it, grow with the square of its output (bench/client_cpu_bench.py).
        facts.notes.append(
            "SGLang streams cumulatively (every chunk resends the whole text): long outputs "
            "cost the client CPU that grows with their square; start SGLang with "
            "--incremental-streaming-output to stream deltas"
        )
    if not group.speculative:
        return
    cmd = group.command
    if group.engine == "vllm":
        if flag_value(cmd, "--per-request-spec-decode-metrics") in (None, "none"):
            facts.notes.append(
                "no per-request accept length: vLLM gives it with "
                "--per-request-spec-decode-metrics summary; only the counters will"
            )
    elif not facts.metrics:
        enabled = has_flag(cmd, "--enable-metrics")
        why = "" if enabled else " (start SGLang with --enable-metrics)"
        if group.api == "openai":
            facts.notes.append(
                "no accept length at all: SGLang's OpenAI stream carries no meta_info and "
                f"the cell counters are off{why}"
            )
        else:
            facts.notes.append(f"cell acceptance from requests only; no counters{why}")

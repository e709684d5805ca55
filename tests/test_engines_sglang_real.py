"""What the tool reads from the bytes of a real SGLang 0.5.23 (on a CPU, tiny random-weight
Qwen3; ``tests/fixtures/sglang-0.5.23-cpu/``), beside the formats built from SGLang's source
(``tests/fixtures/sglang/``, read by test_engines_streams.py and test_engines_replay.py).

The model is random: greedy decoding gives 48 newlines (token 201) for the 15-token prompt of
``/generate`` and of the chat route, and 16 times ``" checkout"`` on ``/v1/completions``."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specbench_tui.bench.client import BenchClient
from specbench_tui.bench.logparse import LogParser
from specbench_tui.engines.acceptance import cell_acceptance
from specbench_tui.engines.counters import CounterWindow
from specbench_tui.engines.inspect import inspect_server
from specbench_tui.engines.log_values import LogCounts
from specbench_tui.engines.registry import adapter, log_window
from specbench_tui.engines.sglang import GENERATION_TOKENS, VERIFY_CALLS
from specbench_tui.hosts.service import Service, ServiceError, describe_exit
from specbench_tui.results.cells import ServiceGroup
from specbench_tui.results.records import Measurement
from tests.support.replay import FIXTURES, Replay, payloads, serve

REAL = FIXTURES / "sglang-0.5.23-cpu"
SGLANG = adapter("sglang")
NEWLINES = "\n" * 48  # what the random model generates for the /generate and chat prompt
# Tokens per content chunk of each /generate capture.
CHUNK_TOKENS = {"ar": [1] * 48, "inc": [1, 1, 1, 2] + [1] * 43}


def read(path: str) -> str:
    return (REAL / path).read_text(encoding="utf-8")


def log_lines(path: str) -> list[str]:
    """A captured log's lines as a server's output is read: split at newlines only (a
    progress bar's carriage returns stay inside its line)."""
    return read(path).split("\n")


def nostream(mode_dir: str) -> dict[str, Any]:
    """The non-streamed ``/generate`` answer of the same request: the reference."""
    return json.loads(read(f"{mode_dir}/generate_nostream.json"))


def deprecated_info(mode_dir: str) -> str:
    """``/get_server_info`` as captured: the body, then a line ``HTTP 200`` that the capture
    appended (the status of the deprecated path), which is no part of the body."""
    body, status = read(f"{mode_dir}/get_server_info.json").rsplit("\n", 2)[:2]
    assert status == "HTTP 200"
    return body


def parse(
    path: str, api: str, mode: str = "auto", *, as_bytes: bool = False
) -> tuple[Measurement, Any]:
    parser = SGLANG.stream_parser(api, mode)  # type: ignore[arg-type]
    for i, p in enumerate(payloads((REAL / path).read_bytes())):
        parser.feed(p.encode() if as_bytes else p, 0.01 * (i + 1))
    out = Measurement()
    parser.finish(out, 1.0)
    return out, parser


# --- the native /generate stream, both modes -------------------------------------------------


@pytest.mark.parametrize(
    ("mode_dir", "mode", "decided"),
    [
        ("ar", "cumulative", "cumulative"),
        ("ar", "auto", "cumulative"),
        ("inc", "incremental", "incremental"),
        ("inc", "auto", "incremental"),
    ],
)
@pytest.mark.parametrize("as_bytes", [False, True])
def test_generate_stream_reads_as_the_unstreamed_answer(
    mode_dir: str, mode: str, decided: str, as_bytes: bool
) -> None:
    """The running count in meta_info numbers the chunks' tokens: in the incremental capture
    one chunk carries two (``completion_tokens`` 3 then 5, text ``"\\n\\n"``, two ids), so
    it has 47 chunks for 48 tokens, the cumulative one 48."""
    ref = nostream(mode_dir)
    out, parser = parse(f"{mode_dir}/generate_stream.sse", "sglang", mode, as_bytes=as_bytes)
    assert parser.mode == decided  # auto: told from the ids against completion_tokens
    assert parser.text == ref["text"] == NEWLINES
    assert parser.ids == ref["output_ids"] == [201] * 48
    assert out.output_tokens == ref["meta_info"]["completion_tokens"] == 48
    assert out.prompt_tokens == ref["meta_info"]["prompt_tokens"] == 15
    assert out.cached_tokens == 0  # the streamed request came first; the unstreamed hit 14
    chunks = CHUNK_TOKENS[mode_dir]
    assert out.chunks == len(chunks) and len(out.itl_s) == len(chunks) - 1
    assert parser.content_tokens == list(itertools.accumulate(chunks))
    assert out.finish_reason == "length" and parser.done and parser.finished
    assert parser.request_id in read(f"{mode_dir}/generate_stream.sse")
    assert out.output_sha256 == hashlib.sha256(ref["text"].encode()).hexdigest()
    # A server without speculation: no verify count in meta_info, so no acceptance at all.
    assert out.spec_verify_ct is None and out.accept_length is None
    assert out.spec_accepted_tokens is None and out.spec_accept_histogram is None
    assert out.error is None


def test_every_chunk_repeats_the_text_so_far_so_only_the_ids_tell_the_mode() -> None:
    """Each incremental piece is ``"\\n"``, which every cumulative text so far ends with: the
    text cannot tell the modes apart, the ids against ``completion_tokens`` do. Read in the
    wrong mode the text is wrong, which is why the server's own word (``/server_info``)
    sets the mode when it says it."""
    _, cum_as_inc = parse("ar/generate_stream.sse", "sglang", "incremental")
    assert cum_as_inc.text == "".join("\n" * n for n in range(1, 49))  # 1176 newlines
    _, inc_as_cum = parse("inc/generate_stream.sse", "sglang", "cumulative")
    assert inc_as_cum.text == "\n"  # the last piece taken for the whole text


# --- the OpenAI-compatible routes --------------------------------------------------------------


@pytest.mark.parametrize("mode_dir", ["ar", "inc"])
def test_chat_stream_text_and_usage(mode_dir: str) -> None:
    out, parser = parse(f"{mode_dir}/openai_chat.sse", "openai")
    assert parser.text == nostream(mode_dir)["text"]
    assert out.output_tokens == 48 and out.prompt_tokens == 15  # the usage chunk
    assert out.cached_tokens is None  # usage has prompt_tokens_details: null
    # 52 payloads: the role chunk and the finish chunk carry no token, nor do usage and [DONE].
    assert out.chunks == 48
    assert out.finish_reason == "length"
    assert parser.request_id is not None and parser.request_id in read(
        f"{mode_dir}/openai_chat.sse"
    )
    assert out.spec_verify_ct is None and out.accept_length is None  # no meta_info on this route


def test_completions_stream_text_and_usage() -> None:
    out, parser = parse("inc/openai_completions.sse", "openai")
    assert parser.text == " checkout" * 16
    assert out.output_tokens == 16 and out.prompt_tokens == 5
    assert out.chunks == 16 and out.finish_reason == "length"
    assert parser.request_id == "930d0e71191044bbb27b4002a8df89d7"
    assert out.spec_verify_ct is None and out.accept_length is None


# --- over HTTP: the client, the post-ready check and the counter window -------------------------


@pytest.fixture
async def replay() -> AsyncIterator[tuple[Replay, str]]:
    r = Replay()
    for d in ("ar", "inc"):
        r.stream(f"/{d}", (REAL / d / "generate_stream.sse").read_bytes())
        r.stream(f"/{d}-chat", (REAL / d / "openai_chat.sse").read_bytes())
        r.doc(f"/{d}/server_info", read(f"{d}/server_info.json"))
        r.doc(f"/{d}-old/get_server_info", deprecated_info(d))
        for prefix in (f"/{d}", f"/{d}-old"):
            r.doc(f"{prefix}/v1/models", read(f"{d}/v1_models.json"))
            r.doc(f"{prefix}/metrics", read(f"{d}/metrics_before.txt"), "text/plain")
    r.stream("/inc-cmpl", (REAL / "inc" / "openai_completions.sse").read_bytes())
    runner, url = await serve(r)
    try:
        yield r, url
    finally:
        await runner.cleanup()


def group(**kw: Any) -> ServiceGroup:
    base: dict[str, Any] = dict(
        id="h.tiny.tp1",
        host="h",
        host_kind="local",
        config="tiny",
        label="tiny",
        tp=1,
        gpu_ids=(0,),
        port=0,
        command=(),
        env=(),
        api="sglang",
        engine="sglang",
        ready_timeout_s=60,
        speculative=False,
    )
    base.update(kw)
    return ServiceGroup(**base)


@pytest.mark.parametrize(("mode_dir", "mode"), [("ar", "cumulative"), ("inc", "incremental")])
async def test_server_info_says_what_runs(
    replay: tuple[Replay, str], mode_dir: str, mode: str
) -> None:
    _, url = replay
    for prefix in (f"/{mode_dir}", f"/{mode_dir}-old"):  # /server_info, then the older path
        facts = await inspect_server(group(), url + prefix)
        assert facts.problems == []
        assert facts.engine == "sglang" and facts.version == "0.5.23"
        assert facts.speculative is False and facts.algorithm is None and facts.tp == 1
        assert facts.stream_mode == mode
        assert facts.metrics  # --enable-metrics, and /metrics answers
        assert facts.models == ["tiny"] and facts.served_model == "tiny"  # --served-model-name
        cumulative_note = any("--incremental-streaming-output" in n for n in facts.notes)
        assert cumulative_note == (mode == "cumulative")


async def test_server_info_fails_a_group_that_asks_for_other_than_runs(
    replay: tuple[Replay, str],
) -> None:
    _, url = replay
    g = group(speculative=True, spec_algorithm="NGRAM", config="ngram-4", tp=2)
    problems = (await inspect_server(g, url + "/inc")).problems
    assert len(problems) == 2
    assert "'ngram-4' asks for NGRAM but SGLang runs without speculative decoding" in problems[0]
    assert problems[1] == "the group is TP 2 but SGLang runs with TP 1"


@pytest.mark.parametrize(("mode_dir", "mode"), [("ar", "cumulative"), ("inc", "incremental")])
async def test_client_reads_the_real_generate_stream(
    replay: tuple[Replay, str], mode_dir: str, mode: str
) -> None:
    r, url = replay
    facts = await inspect_server(group(), url + f"/{mode_dir}")
    async with BenchClient(
        url + f"/{mode_dir}", "sglang", stream_mode=facts.stream_mode, speculative=False
    ) as client:
        done = await client.generate("x", max_tokens=48, timeout_s=10)
    assert r.requests[-1]["sampling_params"]["max_new_tokens"] == 48
    assert done.error is None
    assert done.text == nostream(mode_dir)["text"]
    assert done.output_ids == [201] * 48
    assert done.output_tokens == 48 and done.prompt_tokens == 15
    assert done.chunks == len(CHUNK_TOKENS[mode_dir])
    assert done.chunk_tokens == CHUNK_TOKENS[mode_dir]
    assert done.accept_length is None and done.spec_verify_ct is None


async def test_client_reads_the_real_openai_streams(replay: tuple[Replay, str]) -> None:
    r, url = replay
    async with BenchClient(url + "/inc-cmpl", "openai", model="tiny") as client:
        cmpl = await client.generate("x", max_tokens=16, timeout_s=10)
    assert "prompt" in r.requests[-1]  # the client renders: /v1/completions
    async with BenchClient(url + "/ar-chat", "openai", model="tiny") as client:
        chat = await client.generate("x", max_tokens=48, timeout_s=10)
    assert cmpl.error is None and cmpl.text == " checkout" * 16
    assert cmpl.output_tokens == 16 and cmpl.chunks == 16
    assert chat.error is None and chat.text == NEWLINES
    assert chat.output_tokens == 48 and chat.chunks == 48
    assert cmpl.accept_length is None and chat.accept_length is None


def _label_sets(text: str, name: str) -> dict[str, float]:
    return {
        s.labels.get("is_streaming", ""): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name
    }


@pytest.mark.parametrize("mode_dir", ["ar", "inc"])
def test_counters_sum_the_streaming_label_sets(mode_dir: str) -> None:
    before, after = read(f"{mode_dir}/metrics_before.txt"), read(f"{mode_dir}/metrics_after.txt")
    # Real 0.5.23: one label set per is_streaming. Before: the server's warm-up request
    # (8 tokens, not streamed). After: + the unstreamed /generate (48), and the streamed
    # /generate and chat request (48 each).
    assert _label_sets(before, GENERATION_TOKENS) == {"false": 8.0}
    assert _label_sets(after, GENERATION_TOKENS) == {"false": 56.0, "true": 96.0}
    # A server without speculation exports the speculative gauges at 0.0, and no verify
    # counter at all.
    line = (
        'sglang:spec_accept_length{engine_type="unified",model_name="tiny",moe_ep_rank="0",'
        'pp_rank="0",tp_rank="0"} 0.0'
    )
    assert line in before.splitlines() and line in after.splitlines()
    assert VERIFY_CALLS not in after
    b, a = SGLANG.parse_counters(before), SGLANG.parse_counters(after)
    assert b.generation_tokens == 8.0 and a.generation_tokens == 152.0
    d = a.minus(b)
    assert d.generation_tokens == 3 * 48
    assert d.verify_steps is None and d.accepted_tokens is None and d.per_position is None


async def test_counter_window_gives_no_accept_length_without_verify_steps(
    replay: tuple[Replay, str],
) -> None:
    r, url = replay
    window = CounterWindow(SGLANG, url + "/inc", settle_timeout_s=1.0)
    await window.measure()
    async with BenchClient(url + "/inc", "sglang", stream_mode="incremental") as client:
        done = await client.generate("x", max_tokens=48, timeout_s=10)
    r.doc("/inc/metrics", read("inc/metrics_after.txt"), "text/plain")
    window.expect(done.output_tokens)
    await window.pause()
    result = window.result()
    await window.aclose()
    assert result.settled and result.problem is None and result.deltas is not None
    assert result.deltas.generation_tokens == 144 and result.deltas.verify_steps is None
    # Had the plan asked for speculation (the post-ready check fails such a group first), the
    # 0.0 gauges must not become an accept length: there is none, from either side.
    acc = cell_acceptance([done], result, engine="sglang", speculative=True)
    assert acc["accept_length_weighted"] is None and acc["accept_length_counters"] is None
    assert acc["counter_verify_steps"] is None
    assert acc["acceptance_check"] == "no acceptance data"
    assert all(
        v is None
        for v in cell_acceptance([done], result, engine="sglang", speculative=False).values()
    )


# --- the server log -------------------------------------------------------------------------


def test_stats_lines_of_a_real_log() -> None:
    """Real 0.5.23 at TP 1: no `` TP0`` in the stamp, ``cpu graph`` for ``cuda graph``, and
    ``#pending-token`` on Prefill lines; every field comes out under its own key."""
    lines = log_lines("ar/stats_lines.txt")[:-1]
    parse_line = LogParser().parse
    assert parse_line(lines[0]) == {
        "new_seq": 1.0,
        "new_token": 11.0,
        "cached_token": 0.0,
        "token_usage": 0.0,
        "running_req": 0.0,
        "queue_req": 0.0,
        "pending_token": 0.0,
        "cpu_graph": 0.0,
        "input_throughput": 3.44,
        "prefill": 1.0,
    }
    assert parse_line(lines[3]) == {
        "running_req": 1.0,
        "token": 48.0,
        "token_usage": 0.0,
        "cpu_graph": 0.0,
        "gen_throughput": 0.93,
        "queue_req": 0.0,
        "decode": 1.0,
    }
    assert parse_line(lines[4])["cached_token"] == 14.0  # type: ignore[index]
    kinds = ["prefill" if "prefill" in s else "decode" for s in map(parse_line, lines) if s]
    assert kinds == ["prefill"] * 3 + ["decode", "prefill", "decode", "prefill", "decode"]
    assert SGLANG.log_stamp(lines[3], 2026) == (datetime(2026, 12, 7, 3, 47, 4), 1.0)
    # A decode line without speculation: one token per running request, no verify steps.
    counts = log_window("sglang", parse_line(lines[3]) or {}, 14.0)
    assert counts == LogCounts(1.0, None, pytest.approx(1 / 0.93))


@pytest.mark.parametrize(("mode_dir", "stats"), [("ar", 8), ("inc", 10)])
def test_whole_server_log(mode_dir: str, stats: int) -> None:
    """Of a whole log only the Prefill / Decode lines carry figures (not ``server_args=``,
    which holds the word "batch" too), and the engine's ready line, which a starting server
    is watched for, comes once, after the warm-up request."""
    parser = LogParser()
    lines = log_lines(f"{mode_dir}/server.log")
    found = [ln for ln in lines if parser.parse(ln)]
    assert len(found) == stats
    assert all(" Prefill batch, " in ln or " Decode batch, " in ln for ln in found)
    if mode_dir == "ar":
        assert found == log_lines("ar/stats_lines.txt")[:-1]
    ready = [i for i, ln in enumerate(lines) if SGLANG.ready_line in ln]
    assert len(ready) == 1
    assert lines[ready[0]].endswith("] The server is fired up and ready to roll!")
    assert '"POST /generate HTTP/1.1" 200 OK' in lines[ready[0] - 2]  # the warm-up request


# --- a server that dies before it is ready --------------------------------------------------------

VERIFY_DEATH = "AttributeError: 'NoneType' object has no attribute 'shape'"
SHIM_DEATH = (
    "NotImplementedError: sgl_kernel shim: copy_all_layer_kv_cache_cpu is a CPU kernel of "
    "sgl-kernel (built from source only); this stand-in lacks it"
)


class _Server(Service):
    """A server as the tool's process services see one, from captures: ``log`` (printed at
    once, then it exits, killed by SIGKILL: SGLang's own kill_process_tree after a child
    failed), or none (it runs, at ``base_url``)."""

    def __init__(self, log: Path | None = None, base_url: str | None = None) -> None:
        g = group(speculative=True, spec_algorithm="NGRAM", config="ngram-4")
        super().__init__(g, base_url=base_url)
        self.log = log
        self._code: int | None = None

    async def start(self) -> None:
        self._reset_for_start()

    def alive(self) -> bool:
        return self._code is None

    @property
    def exit_code(self) -> int | None:
        return self._code

    async def wait_exit(self) -> int | None:
        if self.log is None:
            await asyncio.sleep(3600)
            return None
        for raw in self.log.read_bytes().split(b"\n"):
            self._handle_raw(raw)
            await asyncio.sleep(0)
        self._code = -9
        return self._code

    async def stop(self, grace_s: float = 30.0) -> None:
        return None


async def test_health_generate_answers_200_with_no_body() -> None:
    """``/health_generate`` (a real one-token generation) is the native API's health check;
    the real server answers it 200 with an empty body."""
    assert SGLANG.health_paths("sglang") == ("/health_generate",)
    assert read("ar/health_generate.code").strip() == "200"
    r = Replay()
    r.doc("/health_generate", read("ar/health_generate.txt"), "text/plain")
    runner, url = await serve(r)
    try:
        svc = _Server(base_url=url)
        assert await svc.check_health()
        assert svc.last_health == "GET /health_generate 200"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("log", "cause"),
    [
        # The scheduler dies on its first verify step (the server's own warm-up request).
        ("a4_server.log", VERIFY_DEATH),
        # The capture's stand-in sgl_kernel lacked a CPU kernel: dead before that.
        ("a3_server.log", SHIM_DEATH),
    ],
)
async def test_a_server_that_dies_before_ready_fails_with_one_line(log: str, cause: str) -> None:
    lines = log_lines(f"ngram/{log}")
    assert cause in lines
    assert SGLANG.startup_failure(lines) == cause
    # What the group is failed with ("server did not start: " + this reason): one line that
    # names the error, though the log goes on after it (SIGQUIT handling, py-spy and CUDA
    # coredump attempts, kill_process_tree) and its last line is none of it.
    svc = _Server(REAL / "ngram" / log)
    await svc.start()
    with pytest.raises(ServiceError) as info:
        await svc.wait_ready(timeout_s=30)
    reason = info.value.reason
    assert reason == f"h.tiny.tp1: server {describe_exit(-9)} during start-up: {cause}"
    assert describe_exit(-9) == "was killed by SIGKILL"
    assert "\n" not in reason
    last = [ln for ln in info.value.log_tail if ln][-1]
    assert "kill_process_tree called: " in last and cause in info.value.log_tail
    assert not any(SGLANG.ready_line in ln for ln in lines)


async def test_a_death_after_ready_names_the_engines_own_error() -> None:
    """A server that dies mid-campaign (after ready) said only 'it was killed by SIGKILL':
    the group's notice and failure now name the error its log gives, as at start-up."""
    from specbench_tui.engine.cell_runner import confirm_death

    svc = _Server(REAL / "ngram" / "a4_server.log")
    await svc.start()
    await svc.wait_exit()
    said = f"it {describe_exit(-9)}: {VERIFY_DEATH}"
    assert svc.ended_said() == said
    assert await confirm_death(svc, None, lambda: False) == said  # type: ignore[arg-type]

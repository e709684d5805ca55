"""The client, the post-ready check and the counter window over real HTTP, against a replay
server that sends SGLang's formats (built from its source) and real vLLM bytes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from specbench_tui.bench.client import BenchClient
from specbench_tui.engines.acceptance import cell_acceptance
from specbench_tui.engines.counters import CounterWindow
from specbench_tui.engines.inspect import inspect_server
from specbench_tui.engines.registry import adapter
from specbench_tui.results.cells import ServiceGroup
from tests.support.replay import FIXTURES, Replay, serve

SGLANG = FIXTURES / "sglang"
VLLM = FIXTURES / "vllm"
ISSUE_TEXT = "\n\n11. aa"


@pytest.fixture
async def replay() -> AsyncIterator[tuple[Replay, str]]:
    r = Replay()
    r.stream("/cumulative", (SGLANG / "generate_cumulative.sse").read_bytes())
    r.stream("/incremental", (SGLANG / "generate_incremental.sse").read_bytes())
    r.stream("/openai", (SGLANG / "openai_chat.sse").read_bytes())
    r.stream("/vllm", (VLLM / "chat_stream_64_spec.sse").read_bytes())
    r.stream("/vllm-text", (VLLM / "cmpl_stream_64_spec_tokids.sse").read_bytes())
    runner, url = await serve(r)
    try:
        yield r, url
    finally:
        await runner.cleanup()


def group(**kw: Any) -> ServiceGroup:
    base: dict[str, Any] = dict(
        id="h.cfg.tp1",
        host="h",
        host_kind="local",
        config="cfg",
        label="cfg",
        tp=1,
        gpu_ids=(0,),
        port=0,
        command=(),
        env=(),
        api="sglang",
        ready_timeout_s=60,
        speculative=False,
    )
    base.update(kw)
    return ServiceGroup(**base)


@pytest.mark.parametrize(
    ("prefix", "mode"),
    [
        ("/cumulative", "cumulative"),
        ("/cumulative", "auto"),
        ("/incremental", "incremental"),
        ("/incremental", "auto"),
    ],
)
async def test_client_reads_every_sglang_mode_exactly(
    replay: tuple[Replay, str], prefix: str, mode: str
) -> None:
    _, url = replay
    async with BenchClient(url + prefix, "sglang", stream_mode=mode) as client:  # type: ignore[arg-type]
        done = await client.generate("x", max_tokens=10, timeout_s=10)
    assert done.error is None
    assert done.text == ISSUE_TEXT
    assert done.output_tokens == 10 and done.chunks == 6
    assert done.spec_verify_ct == 5 and done.accept_length == pytest.approx(2.0)
    assert done.request_id == "2dd4e02463c34096adc4ae6973e267e2"


async def test_client_sends_the_served_model_name(replay: tuple[Replay, str]) -> None:
    r, url = replay
    async with BenchClient(url + "/vllm", "openai", engine="vllm", model="tiny") as client:
        done = await client.generate("hi", max_tokens=64, timeout_s=10)
    async with BenchClient(url + "/openai", "openai") as client:
        sg = await client.generate("hi", max_tokens=10, timeout_s=10)
    assert r.requests[0]["model"] == "tiny"
    assert "model" not in r.requests[1]  # no name known: the server's own model
    assert r.requests[0]["stream_options"] == {"include_usage": True}
    assert done.error is None and done.output_tokens == 64 and done.spec_verify_ct == 18
    assert sg.text == ISSUE_TEXT and sg.accept_length is None


async def test_a_rendered_prompt_goes_to_vllms_completions_route(
    replay: tuple[Replay, str],
) -> None:
    """The client's rendering of the model's template, sent as vLLM's completions request,
    read from a real vLLM 0.32 completions stream (token ids in each chunk's choice)."""
    r, url = replay
    async with BenchClient(url + "/vllm-text", "openai", engine="vllm", model="tiny") as client:
        done = await client.generate("Once upon a time", max_tokens=64, timeout_s=10)
    body = r.requests[-1]
    assert body["prompt"] == "<|im_start|>user\nOnce upon a time<|im_end|>\n<|im_start|>assistant\n"
    assert body["add_special_tokens"] is False and body["return_token_ids"] is True
    assert "messages" not in body
    assert done.error is None and done.output_tokens == 64 and done.prompt_tokens == 18
    assert done.chunk_tokens == [1, 2, 2, 4, 4, 4, 4, 4, 4, 4, 4, 1, 1, 2, 2, 4, 4, 4, 4, 4, 1]
    assert done.spec_verify_ct == 19 and done.spec_accepted_tokens == 46
    assert done.output_ids is not None and len(done.output_ids) == 64


# --- after ready: what runs ----------------------------------------------------------------


async def test_sglang_server_info_confirms_what_runs(replay: tuple[Replay, str]) -> None:
    r, url = replay
    r.doc("/server_info", (SGLANG / "server_info_eagle.json").read_text())
    r.doc("/metrics", (SGLANG / "metrics_before.txt").read_text(), "text/plain")
    r.doc("/v1/models", '{"object":"list","data":[{"id":"qwen/qwen2.5-0.5b-instruct"}]}')
    g = group(
        tp=2,
        speculative=True,
        spec_algorithm="EAGLE",
        command=(
            "python",
            "-m",
            "sglang.launch_server",
            "--speculative-algorithm",
            "EAGLE",
            "--enable-metrics",
        ),
    )
    facts = await inspect_server(g, url)
    assert facts.problems == []
    assert facts.version == "0.0.0.dev1+g44ca2d01f"
    assert facts.speculative and facts.algorithm == "EAGLE" and facts.tp == 2
    assert facts.stream_mode == "incremental" and facts.metrics
    assert facts.served_model == "qwen/qwen2.5-0.5b-instruct"


async def test_sglang_asked_for_speculation_but_runs_without(
    replay: tuple[Replay, str],
) -> None:
    r, url = replay
    r.doc("/get_server_info", (SGLANG / "server_info_plain.json").read_text())  # older path
    g = group(speculative=True, spec_algorithm="DDTREE", config="ddtree-16")
    facts = await inspect_server(g, url)
    assert facts.speculative is False and facts.stream_mode == "cumulative"
    assert len(facts.problems) == 1
    assert "asks for DDTREE but SGLang runs without speculative decoding" in facts.problems[0]
    # Cumulative streaming costs the client CPU with the square of the output: said once.
    assert sum("--incremental-streaming-output" in n for n in facts.notes) == 1


async def test_sglang_wrong_tp_wrong_algorithm_and_unknown_served_name(
    replay: tuple[Replay, str],
) -> None:
    r, url = replay
    r.doc("/server_info", (SGLANG / "server_info_eagle.json").read_text())
    r.doc("/v1/models", '{"object":"list","data":[{"id":"qwen/qwen2.5-0.5b-instruct"}]}')
    g = group(tp=4, speculative=True, spec_algorithm="DFLASH", served_model_name="other")
    problems = (await inspect_server(g, url)).problems
    assert any("asks for DFLASH but SGLang runs EAGLE" in p for p in problems)
    assert any("TP 4 but SGLang runs with TP 2" in p for p in problems)
    assert any("served_model_name = 'other'" in p for p in problems)
    # NEXTN is SGLang's own alias of EAGLE: not a mismatch.
    g = group(tp=2, speculative=True, spec_algorithm="NEXTN")
    assert (await inspect_server(g, url)).problems == []


async def test_sglang_openai_route_without_counters_says_no_accept_length(
    replay: tuple[Replay, str],
) -> None:
    r, url = replay
    r.doc(
        "/server_info",
        (SGLANG / "server_info_plain.json")
        .read_text()
        .replace('"speculative_algorithm": null', '"speculative_algorithm": "EAGLE"'),
    )
    g = group(api="openai", speculative=True, spec_algorithm="EAGLE")
    facts = await inspect_server(g, url)
    assert facts.problems == []
    assert any("no accept length at all" in n and "--enable-metrics" in n for n in facts.notes)


async def test_vllm_metrics_and_config_line_confirm_what_runs(
    replay: tuple[Replay, str],
) -> None:
    r, url = replay
    r.doc("/v1/models", (VLLM / "models.json").read_text())
    r.doc("/version", (VLLM / "version.json").read_text())
    r.doc("/metrics", (VLLM / "metrics_after_single.txt").read_text(), "text/plain")
    log = (VLLM / "startup_spec.log").read_text().splitlines()
    g = group(
        engine="vllm",
        api="openai",
        speculative=True,
        spec_algorithm="ngram",
        command=("python", "--speculative-config", '{"method": "ngram"}'),
    )
    facts = await inspect_server(g, url, log)
    assert facts.problems == [], facts.problems
    assert facts.version == "0.32.0" and facts.served_model == "tiny"
    assert facts.speculative and facts.algorithm == "ngram" and facts.tp == 1
    assert facts.metrics
    assert any("--per-request-spec-decode-metrics" in n for n in facts.notes)
    # The same config on a server that runs without speculation fails its group.
    r.doc("/metrics", (VLLM / "metrics_nospec_idle.txt").read_text(), "text/plain")
    log = (VLLM / "startup_nospec.log").read_text().splitlines()
    facts = await inspect_server(g, url, log)
    assert facts.speculative is False
    assert any("runs without speculative decoding" in p for p in facts.problems)


async def test_simulated_hosts_are_not_held_to_the_plan(replay: tuple[Replay, str]) -> None:
    r, url = replay
    r.doc("/server_info", (SGLANG / "server_info_plain.json").read_text())
    g = group(host_kind="sim", speculative=True, spec_algorithm="DDTREE")
    assert (await inspect_server(g, url, rehearsal=True)).problems == []
    assert (await inspect_server(g, url)).problems  # the same server, held to the plan


# --- counters over the measured window ------------------------------------------------------


async def test_sglang_counters_give_the_cell_accept_length(replay: tuple[Replay, str]) -> None:
    r, url = replay
    r.doc("/metrics", (SGLANG / "metrics_before.txt").read_text(), "text/plain")
    window = CounterWindow(adapter("sglang"), url, settle_timeout_s=1.0)
    await window.measure()
    async with BenchClient(url + "/incremental", "sglang") as client:
        done = await client.generate("x", max_tokens=10, timeout_s=10)
    r.doc("/metrics", (SGLANG / "metrics_after.txt").read_text(), "text/plain")
    window.expect(done.output_tokens)
    await window.pause()
    result = window.result()
    await window.aclose()
    assert result.settled and result.deltas is not None
    assert result.deltas.generation_tokens == 10 and result.deltas.verify_steps == 5
    acc = cell_acceptance([done], result, engine="sglang", speculative=True)
    assert acc["accept_length_counters"] == pytest.approx(2.0)
    assert acc["accept_length_weighted"] == pytest.approx(2.0)
    assert acc["acceptance_check"] == "agree"
    assert acc["acceptance_rate"] == pytest.approx(4 / 15)
    # Per draft position, from the request's spec_accept_histogram: the share of the 5
    # verify steps that accepted position p (3 took the first draft token, 1 the second).
    assert acc["accept_per_position"] == pytest.approx([0.6, 0.2, 0.0])
    assert sum(acc["accept_per_position"]) * 5 == pytest.approx(acc["spec_accepted_tokens"])


async def test_window_that_never_settles_says_so(replay: tuple[Replay, str]) -> None:
    r, url = replay
    r.doc("/metrics", (SGLANG / "metrics_before.txt").read_text(), "text/plain")
    window = CounterWindow(adapter("sglang"), url, settle_timeout_s=0.3)
    await window.measure()
    window.expect(999)  # tokens the counters never show
    await window.pause()
    result = window.result()
    await window.aclose()
    assert not result.settled and result.problem == "a counter read did not settle in time"


async def test_window_without_metrics_has_a_reason(replay: tuple[Replay, str]) -> None:
    _, url = replay
    window = CounterWindow(adapter("vllm"), url)
    await window.measure()
    await window.pause()
    result = window.result()
    await window.aclose()
    assert result.deltas is None and "cannot read /metrics" in (result.problem or "")

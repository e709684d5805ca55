"""The streaming client and the workloads against a scripted HTTP server in its own process.

The server (``serve()`` below, run as ``python tests/test_bench_client.py PORTFILE``) speaks
SGLang's ``/generate`` and the OpenAI chat API with chunk timings, multi-token chunks, HTTP
errors, hangs and early closes chosen by markers in the prompt, so each failure mode the client
must record is exercised over a real socket.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from specbench_tui.bench.client import BenchClient
from specbench_tui.bench.client_health import LAG_THRESHOLD_S
from specbench_tui.bench.metrics import summarize
from specbench_tui.bench.prompting import DEFAULT_PROMPTING
from specbench_tui.bench.workloads import CellResult, planned_requests, run_cell
from specbench_tui.plan.prompt_sets import PromptLibrary
from specbench_tui.results.cells import Cell, ServiceGroup
from specbench_tui.results.records import RequestRecord

pytestmark = pytest.mark.system

# Tokens per speculative step, cycled: several tokens per chunk, as a speculative server sends.
STEPS = (3, 1, 4, 2, 5)


def serve(port_file: str) -> None:
    """The scripted server; writes its port to ``port_file`` once it listens."""
    import re

    from aiohttp import web

    # "epoch" changes on /reset, so requests left hanging by an earlier test stop counting.
    state: dict[str, Any] = {
        "inflight": 0,
        "max_inflight": 0,
        "texts": [],
        "last": "",
        "epoch": 0,
    }

    def marker(text: str, name: str, default: str | None = None) -> str | None:
        m = re.search(name + r":([A-Za-z0-9.]+)", text)
        return m.group(1) if m else default

    async def sse(resp: web.StreamResponse, obj: Any, slices: int = 0) -> None:
        payload = obj if isinstance(obj, str) else json.dumps(obj)
        data = f"data: {payload}\n\n".encode()
        if not slices:
            await resp.write(data)
            return
        # One event in small writes a moment apart: the client sees it in many reads.
        for i in range(0, len(data), slices):
            await resp.write(data[i : i + slices])
            await asyncio.sleep(0.0005)

    def cached_prefix(text: str) -> int:
        last, n = state["last"], 0
        for a, b in zip(text, last, strict=False):
            if a != b:
                break
            n += 1
        state["last"] = text
        return n // 4

    async def generate(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        text = body["text"]
        max_new = body["sampling_params"]["max_new_tokens"]
        return await stream(request, text, max_new, openai=False)

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        text = "".join(m["content"] for m in body["messages"])
        assert body["stream_options"]["include_usage"] is True
        return await stream(request, text, body["max_tokens"], openai=True)

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        assert body["stream_options"]["include_usage"] is True
        return await stream(request, body["prompt"], body["max_tokens"], openai=True, text_api=True)

    async def stream(
        request: web.Request, text: str, max_new: int, *, openai: bool, text_api: bool = False
    ) -> web.StreamResponse:
        scenario = marker(text, "SCENARIO", "ok")
        if scenario == "503":
            return web.json_response(
                {"error": {"message": "server is overloaded, retry later"}}, status=503
            )
        delay = float(marker(text, "DELAY", "0.005") or 0.005)
        spec = scenario != "nospec"
        state["texts"].append(text)
        cached = cached_prefix(text)
        state["inflight"] += 1
        counted = True
        epoch = state["epoch"]
        state["max_inflight"] = max(state["max_inflight"], state["inflight"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            out, produced, steps = "", 0, 0
            while produced < max_new:
                step = 10_000 if scenario == "fat" else STEPS[steps % len(STEPS)]
                k = min(step if spec else 1, max_new - produced)
                await asyncio.sleep(delay)
                steps += 1
                piece = "".join(f"w{produced + j} " for j in range(k))
                produced += k
                out += piece
                meta: dict[str, Any] = {
                    "id": "r1",
                    "prompt_tokens": len(text) // 4,
                    "completion_tokens": produced,
                    "cached_tokens": cached,
                    "finish_reason": None,
                }
                if spec:
                    meta["spec_verify_ct"] = steps
                if openai and text_api:  # like vLLM: the last content chunk says the finish
                    finish = "length" if produced >= max_new else None
                    await sse(
                        resp, {"choices": [{"index": 0, "text": piece, "finish_reason": finish}]}
                    )
                elif openai:
                    await sse(resp, {"choices": [{"index": 0, "delta": {"content": piece}}]})
                else:
                    slices = 8192 if scenario == "fat" else 0
                    await sse(resp, {"text": out, "meta_info": meta, "index": 0}, slices)
                if scenario == "hang" and steps == 1:
                    await asyncio.sleep(60)
                if scenario == "early" and steps == 2:
                    assert request.transport is not None
                    request.transport.close()
                    return resp
            final_reason: Any = {"type": "length", "length": max_new}
            if scenario == "abort":
                final_reason = {"type": "abort", "message": "prompt too long"}
            if openai:
                if not text_api:
                    done = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
                    await sse(resp, done)
                usage = {
                    "prompt_tokens": len(text) // 4,
                    "completion_tokens": produced,
                    "total_tokens": len(text) // 4 + produced,
                    "prompt_tokens_details": {"cached_tokens": cached},
                }
                await sse(resp, {"choices": [], "usage": usage})
            else:
                # A closing chunk with no new text or tokens: it must not count as content.
                meta = {**meta, "finish_reason": final_reason, "e2e_latency": 0.1}
                await sse(resp, {"text": out, "meta_info": meta, "index": 0})
            # Leave the in-flight count before [DONE]: the client may send its next request
            # the moment it reads it.
            counted = False
            if epoch == state["epoch"]:
                state["inflight"] -= 1
            await sse(resp, "[DONE]")
            await resp.write_eof()
            return resp
        finally:
            if counted and epoch == state["epoch"]:
                state["inflight"] -= 1

    async def stats(request: web.Request) -> web.Response:
        return web.json_response({"max_inflight": state["max_inflight"], "texts": state["texts"]})

    async def reset(request: web.Request) -> web.Response:
        state.update(inflight=0, max_inflight=0, texts=[], last="", epoch=state["epoch"] + 1)
        return web.json_response({})

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/generate", generate)
        app.router.add_post("/v1/chat/completions", chat)
        app.router.add_post("/v1/completions", completions)
        app.router.add_get("/stats", stats)
        app.router.add_post("/stats", stats)
        app.router.add_post("/reset", reset)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        Path(port_file).write_text(str(port))
        await asyncio.Event().wait()

    asyncio.run(main())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port_file = tmp_path_factory.mktemp("srv") / "port"
    proc = subprocess.Popen([sys.executable, __file__, str(port_file)])
    try:
        deadline = time.monotonic() + 15
        while not port_file.exists() or not port_file.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the scripted server did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port_file.read_text()}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def reset(url: str) -> None:
    httpx.post(f"{url}/reset")


def server_stats(url: str) -> dict[str, Any]:
    return httpx.get(f"{url}/stats").json()


# --- client -------------------------------------------------------------------------------


async def test_counts_come_from_meta_info_not_chunks(server: str) -> None:
    async with BenchClient(server, "sglang") as client:
        done = await client.generate("hello", max_tokens=15, timeout_s=10)
    assert done.error is None
    # 15 tokens in steps 3,1,4,2,5: five content chunks carrying fifteen tokens.
    assert done.chunks == 5
    assert done.output_tokens == 15
    assert done.spec_verify_ct == 5
    assert done.accept_length == pytest.approx(3.0)
    assert len(done.itl_s) == done.chunks - 1
    assert all(gap > 0 for gap in done.itl_s)
    assert done.ttft_s is not None and done.e2e_s is not None
    assert done.ttft_s + sum(done.itl_s) <= done.e2e_s + 1e-9
    assert done.tpot_s == pytest.approx((done.e2e_s - done.ttft_s) / 14)
    assert done.output_tok_s == pytest.approx(15 / done.e2e_s)
    assert done.e2e_tok_s == done.output_tok_s
    assert done.decode_tok_s == pytest.approx(14 / (done.e2e_s - done.ttft_s))
    assert done.chunk_tokens == [3, 1, 4, 2, 5]  # from the running completion_tokens
    assert done.finish_reason == "length"
    assert (
        done.prompt_tokens
        == len(DEFAULT_PROMPTING.text([{"role": "user", "content": "hello"}])) // 4
    )
    assert done.text.split() == [f"w{i}" for i in range(15)]
    assert done.output_sha256 is not None and len(done.output_sha256) == 64


async def test_accept_length_is_per_request(server: str) -> None:
    async with BenchClient(server, "sglang") as client:
        short = await client.generate("a", max_tokens=4, timeout_s=10)  # steps 3,1
        plain = await client.generate("SCENARIO:nospec", max_tokens=4, timeout_s=10)
    assert short.accept_length == pytest.approx(2.0)
    assert plain.spec_verify_ct is None and plain.accept_length is None
    assert plain.chunks == 4 and len(plain.itl_s) == 3


@pytest.mark.parametrize("on", ["client", "server"])
async def test_openai_api_uses_usage_chunk(server: str, on: str) -> None:
    """The client renders the template and sends /v1/completions; where the server renders
    it, the messages go to /v1/chat/completions. Either way the usage chunk counts."""
    prompting = replace(DEFAULT_PROMPTING, on=on)
    async with BenchClient(server, "openai", prompting=prompting) as client:
        await client._transport.post("/reset")
        done = await client.generate("hi", max_tokens=10, timeout_s=10)
        _, body = await client._transport.post("/stats")
    assert done.error is None
    assert done.chunks == 4  # steps 3,1,4,2
    assert done.output_tokens == 10
    received = json.loads(body)["texts"][-1]
    # The scripted server counts a token per 4 characters of what it received.
    if on == "client":
        assert received == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    else:
        assert received == "hi"  # the messages' contents, joined
    assert done.prompt_tokens == len(received) // 4
    assert done.cached_tokens is not None
    assert done.finish_reason == "length"
    assert len(done.itl_s) == 3


async def test_timeout_is_recorded_not_raised(server: str) -> None:
    async with BenchClient(server, "sglang") as client:
        t0 = time.perf_counter()
        done = await client.generate("SCENARIO:hang", max_tokens=8, timeout_s=0.5)
    assert time.perf_counter() - t0 < 3
    assert done.error == "timeout after 0.5 s"
    assert done.chunks == 1 and done.ttft_s is not None  # what arrived before is kept
    assert done.output_sha256 is None


async def test_http_error_is_recorded(server: str) -> None:
    async with BenchClient(server, "sglang") as client:
        done = await client.generate("SCENARIO:503", max_tokens=8, timeout_s=5)
    assert done.error == "HTTP 503: server is overloaded, retry later"
    assert done.chunks == 0 and done.ttft_s is None


async def test_early_close_and_abort_are_recorded(server: str) -> None:
    async with BenchClient(server, "sglang") as client:
        early = await client.generate("SCENARIO:early", max_tokens=20, timeout_s=5)
        aborted = await client.generate("SCENARIO:abort", max_tokens=3, timeout_s=5)
    assert early.error == "server closed the stream early"
    assert early.chunks == 2
    assert aborted.error == "server aborted the request: prompt too long"
    assert aborted.finish_reason == "abort"


async def test_fifty_thousand_token_context_streams_whole(server: str) -> None:
    """A 50k-token prompt goes out whole, and cumulative SSE lines of up to 350 KB, each
    arriving in 8 KB pieces, come back whole: no line-length limit, no lost piece."""
    prompt = "lorem ipsum " * 16_700 + "SCENARIO:fat"
    async with BenchClient(server, "sglang") as client:
        done = await client.generate(prompt, max_tokens=50_000, timeout_s=60)
    assert done.error is None, done.error
    assert (
        done.prompt_tokens
        == len(DEFAULT_PROMPTING.text([{"role": "user", "content": prompt}])) // 4
    )
    assert done.prompt_tokens > 50_000
    assert done.output_tokens == 50_000 and done.chunks == 5
    assert done.chunk_tokens == [10_000] * 5
    words = done.text.split()
    assert len(words) == 50_000 and words[-1] == "w49999"


async def test_connection_refused_is_recorded() -> None:
    async with BenchClient(f"http://127.0.0.1:{free_port()}", "sglang") as client:
        done = await client.generate("x", max_tokens=4, timeout_s=5)
    assert done.error == "connection refused"


def test_fallback_rendering_keeps_prefix_stable() -> None:
    turn1 = [{"role": "user", "content": "task"}]
    turn2 = [*turn1, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    a = DEFAULT_PROMPTING.text(turn1)
    b = DEFAULT_PROMPTING.text(turn2)
    assert a == "<|im_start|>user\ntask<|im_end|>\n<|im_start|>assistant\n"
    assert b.startswith(a.rsplit("<|im_start|>assistant", 1)[0])


# --- workloads ----------------------------------------------------------------------------


def make_group(api: str = "sglang") -> ServiceGroup:
    return ServiceGroup(
        id="sim.dflash.tp1",
        host="sim",
        host_kind="sim",
        config="dflash",
        label="DFlash",
        tp=1,
        gpu_ids=(0,),
        port=0,
        command=(),
        env=(),
        api=api,  # type: ignore[arg-type]
        ready_timeout_s=60,
        speculative=True,
    )


def make_cell(kind: str, **kw: Any) -> Cell:
    base: dict[str, Any] = {
        "id": f"c-{kind}",
        "name": f"sim.dflash.tp1/{kind}",
        "group": "sim.dflash.tp1",
        "host": "sim",
        "config": "dflash",
        "tp": 1,
        "workload": kind,
        "kind": kind,
        "prompt_set": None,
        "max_tokens": 6,
        "concurrency": None,
        "prompts": ("mini",),
        "timeout_s": 10,
    }
    base.update(kw)
    return Cell(**base)


@pytest.fixture
def plan_dir(tmp_path: Path) -> Path:
    (tmp_path / "prompts").mkdir()
    lines = [json.dumps({"id": f"p{i}", "prompt": f"prompt number {i}"}) for i in range(5)]
    (tmp_path / "prompts" / "mini.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path


async def run(cell: Cell, url: str, plan_dir: Path, **kw: Any) -> CellResult:
    return await run_cell(
        cell,
        make_group(),
        url,
        campaign="t",
        attempt=2,
        seed=7,
        prompts=PromptLibrary(plan_dir),
        **kw,
    )


async def test_single_excludes_warmup_and_fills_identity(server: str, plan_dir: Path) -> None:
    reset(server)
    cell = make_cell("single", prompt_set="mini", samples=2, repeats=2, warmup=1)
    seen: list[RequestRecord] = []
    result = await run(cell, server, plan_dir, on_request=seen.append)
    assert len(server_stats(server)["texts"]) == 2 * (1 + 2)  # warm-up sent...
    assert len(result.records) == 4 == len(seen)  # ...but not recorded
    assert result.planned == 4 == planned_requests(cell, 5)
    assert result.complete and not result.stopped
    assert result.wall_s > 0
    r = result.records[0]
    assert (r.campaign, r.cell_id, r.attempt, r.group, r.host, r.config, r.tp) == (
        "t",
        "c-single",
        2,
        "sim.dflash.tp1",
        "sim",
        "dflash",
        1,
    )
    assert (r.workload, r.kind, r.prompt_set, r.max_tokens) == ("single", "single", "mini", 6)
    assert [x.repeat for x in result.records] == [0, 1, 0, 1]
    assert len({x.prompt_id for x in result.records}) == 2
    assert set(result.outputs) == {f"{x.prompt_id}#{x.repeat}" for x in result.records}
    # The same seed draws the same prompts: configs stay comparable.
    again = await run(cell, server, plan_dir)
    assert [x.prompt_id for x in again.records] == [x.prompt_id for x in result.records]
    summary = summarize(result.records, result.wall_s)
    assert summary["requests"] == 4 and summary["errors"] == 0
    assert summary["accept_length_mean"] == pytest.approx(6 / 3)  # steps 3,1,2
    assert summary["throughput_tok_s"] == pytest.approx(24 / result.wall_s)


async def test_agentic_context_grows_turn_by_turn(server: str, plan_dir: Path) -> None:
    reset(server)
    cell = make_cell("agentic", sessions=2, turns=3, tool_output_tokens=100, max_tokens=5)
    result = await run(cell, server, plan_dir)
    assert len(result.records) == 6
    assert [(r.session, r.turn) for r in result.records] == [
        (s, t) for s in range(2) for t in range(3)
    ]
    texts = server_stats(server)["texts"]
    for s in range(2):
        sess = texts[s * 3 : s * 3 + 3]
        # Each turn sends the whole conversation so far: the previous request is a prefix
        # (up to the open assistant header) and the tool output adds ~100 tokens.
        for a, b in itertools.pairwise(sess):
            assert b.startswith(a.rsplit("<|im_start|>assistant", 1)[0])
            assert len(b) - len(a) > 300
        rows = result.records[s * 3 : s * 3 + 3]
        prompt_tokens = [r.prompt_tokens or 0 for r in rows]
        assert prompt_tokens == sorted(prompt_tokens) and prompt_tokens[0] < prompt_tokens[-1]
        assert rows[1].cached_tokens and rows[1].cached_tokens > 0  # shared prefix
        assert texts[s * 3 + 1].count("w4 ") == 1  # the previous answer is in the context
    assert all(r.prompt_id for r in result.records)
    assert len(result.outputs) == 6


async def test_concurrency_keeps_n_in_flight(server: str, plan_dir: Path) -> None:
    reset(server)
    cell = make_cell(
        "concurrency",
        concurrency=4,
        requests=12,
        max_tokens=15,
        prompts=("mini",),
    )
    result = await run(cell, server, plan_dir)
    assert len(result.records) == 12
    assert server_stats(server)["max_inflight"] == 4
    assert {r.concurrency for r in result.records} == {4}
    assert all(r.error is None for r in result.records)
    assert {r.repeat for r in result.records} == {0, 1, 2}  # 5 prompts cycled over 12


async def test_should_stop_finishes_in_flight_and_marks_stopped(
    server: str, plan_dir: Path
) -> None:
    cell = make_cell("single", prompt_set="mini", repeats=3)
    seen: list[RequestRecord] = []
    result = await run(
        cell, server, plan_dir, on_request=seen.append, should_stop=lambda: len(seen) >= 2
    )
    assert len(result.records) == 2
    assert result.stopped and not result.complete
    assert all(r.error is None for r in result.records)


async def test_overlapping_cells_collect_only_when_none_measures() -> None:
    """Packed groups' cells overlap in one process: a full collection at one cell's edge
    would stall its neighbour's streams, so only the last cell to end collects."""
    from specbench_tui.bench.client_health import ClientWatch

    generations: list[int] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            generations.append(info["generation"])

    gc.callbacks.append(on_gc)
    first, second = ClientWatch(), ClientWatch()
    try:
        await first.__aenter__()
        generations.clear()
        await second.__aenter__()
        await first.__aexit__(None, None, None)
        assert generations == [] and not gc.isenabled()  # the second cell still measures
        await second.__aexit__(None, None, None)
        assert 2 in generations and gc.isenabled()
    finally:
        gc.callbacks.remove(on_gc)


def gil_hog(stop: threading.Event) -> None:
    """Pure-Python spinning: holds the GIL until the interpreter forces a switch."""
    n = 0
    while not stop.is_set():
        n += 1


async def test_a_starved_client_flags_its_cell(server: str, plan_dir: Path) -> None:
    cell = make_cell("concurrency", concurrency=4, requests=12, max_tokens=15)
    gc_during: list[bool] = []
    calm = await run(cell, server, plan_dir, on_request=lambda r: gc_during.append(gc.isenabled()))
    assert calm.client is not None and calm.client.samples > 0
    assert gc_during and not any(gc_during) and gc.isenabled()  # GC off only during the cell
    stop = threading.Event()
    hog = threading.Thread(target=gil_hog, args=(stop,), daemon=True)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(0.02)  # the hog keeps the GIL 20 ms at a time
    hog.start()
    try:
        starved = await run(cell, server, plan_dir)
    finally:
        stop.set()
        hog.join()
        sys.setswitchinterval(switch)
    health = starved.client
    assert health is not None
    # The hog holds the GIL 20 ms at a time, but on a loaded machine the OS also takes the
    # hog off the CPU, so its holds are fewer: twice the threshold is what it surely gives.
    assert health.lag_p99_s > 2 * LAG_THRESHOLD_S and health.lagged
    figures = health.figures()
    assert figures["client_lagged"] is True
    assert figures["client_lag_p99_s"] == pytest.approx(health.lag_p99_s, abs=1e-6)
    assert "lagged" in health.describe()
    assert all(r.error is None for r in starved.records)  # slow, but measured


async def test_errors_become_rows(plan_dir: Path) -> None:
    cell = make_cell("single", prompt_set="mini", samples=1, timeout_s=2)
    result = await run(cell, f"http://127.0.0.1:{free_port()}", plan_dir)
    assert [r.error for r in result.records] == ["connection refused"]
    assert result.outputs == {}
    assert summarize(result.records, result.wall_s)["errors"] == 1


if __name__ == "__main__":
    serve(sys.argv[1])


async def test_a_server_that_cannot_flush_is_measured_warm_and_said_so(
    server: str, plan_dir: Path
) -> None:
    cell = make_cell("single", prompt_set="mini", samples=1, repeats=2, prefix_cache="cold")
    result = await run(cell, server, plan_dir)
    assert result.prefix_cache.startswith("warm: the server refused a flush (HTTP 404")
    assert all(r.error is None for r in result.records)


async def test_a_cell_cancelled_twice_still_closes_its_connection_pool(
    server: str, plan_dir: Path
) -> None:
    """An abort on a dead server cancels the cell, and cancels it again while its counters
    take their last read: the pool was left open ("Unclosed client session" on stderr)."""
    import asyncio

    import specbench_tui.bench.workloads as workloads

    reset(server)
    closed: list[bool] = []
    real_aclose = workloads.BenchClient.aclose

    async def spy(self: Any) -> None:
        await real_aclose(self)
        closed.append(self._transport._session is None)

    class StuckCounters:
        """Counts as the engine's counters would until their last read, which hangs."""

        def expect(self, tokens: int | None) -> None:
            return None

        async def measure(self) -> None:
            return None

        async def pause(self) -> None:
            await asyncio.sleep(3600)  # a read of a dead server's metrics that hangs

    cell = make_cell("single", prompt_set="mini", samples=2, repeats=50)
    workloads.BenchClient.aclose = spy  # type: ignore[method-assign]
    try:
        task = asyncio.ensure_future(run(cell, server, plan_dir, counters=StuckCounters()))
        await asyncio.sleep(0.5)
        task.cancel()
        await asyncio.sleep(0.2)  # inside the last counters read now
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        workloads.BenchClient.aclose = real_aclose  # type: ignore[method-assign]
    assert closed == [True]

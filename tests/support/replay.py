"""A replay server: sends recorded or synthesized SSE bytes over a real HTTP socket.

SGLang and TensorRT-LLM cannot run on these machines, so the client is tested against the byte
formats of their source (``tests/fixtures/sglang/``, ``tests/fixtures/trtllm/``, each file names
the upstream file it follows). The server sends a stream one SSE event per write, as a real
server flushes each chunk, and serves the GET endpoints (``/server_info``, ``/metrics``,
``/v1/models``, ``/version``) from files, or from a function of the streams served so far (a
counter page that grows as requests finish, as the engine's does).

Routes: ``POST {prefix}/generate``, ``POST {prefix}/v1/chat/completions`` and ``POST
{prefix}/v1/completions`` answer with the stream registered for ``prefix``; ``GET
{prefix}{path}`` with the document registered there.
Run as ``python tests/support/replay.py PORTFILE`` it serves the synthetic streams of
:func:`synthetic_routes` (what ``bench/client_cpu_bench.py`` measures) in a process of its own;
``--vllm-nospec`` and ``--trtllm`` make it a stand-in server (see :func:`main`).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def events(body: bytes) -> list[bytes]:
    """The SSE events of a body, each with its blank-line terminator."""
    parts = body.replace(b"\r\n", b"\n").split(b"\n\n")
    return [p + b"\n\n" for p in parts if p.strip()]


class Replay:
    """Streams and documents by route prefix; ``app()`` is the aiohttp application."""

    def __init__(self) -> None:
        self.streams: dict[str, bytes] = {}
        self.docs: dict[str, tuple[bytes | Callable[[], bytes], str]] = {}
        self.requests: list[dict[str, Any]] = []  # request bodies, for assertions
        self.served = 0  # streams sent to their end

    def stream(self, prefix: str, body: bytes) -> None:
        self.streams[prefix.rstrip("/")] = body

    def doc(
        self,
        path: str,
        body: bytes | str | Callable[[], bytes],
        content_type: str = "application/json",
    ) -> None:
        """``body``: the document, or a function that makes it at each GET."""
        data = body.encode() if isinstance(body, str) else body
        self.docs[path] = (data, content_type)

    async def _post(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        for suffix in ("/generate", "/v1/chat/completions", "/v1/completions"):
            if path.endswith(suffix):
                prefix = path[: -len(suffix)]
                break
        else:
            raise web.HTTPNotFound()
        self.requests.append(await request.json())
        body = self.streams.get(prefix)
        if body is None:
            raise web.HTTPNotFound()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        for ev in events(body):
            await resp.write(ev)
        self.served += 1  # the engine counts a request as it finishes, before the body ends
        await resp.write_eof()
        return resp

    async def _get(self, request: web.Request) -> web.Response:
        doc = self.docs.get(request.path)
        if doc is None:
            raise web.HTTPNotFound()
        body = doc[0]() if callable(doc[0]) else doc[0]
        return web.Response(body=body, content_type=doc[1].split(";")[0])

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("POST", "/{tail:.*}", self._post)
        app.router.add_route("GET", "/{tail:.*}", self._get)
        return app


async def serve(replay: Replay) -> tuple[web.AppRunner, str]:
    """Start ``replay`` on a free loopback port in this event loop; returns (runner, url)."""
    runner = web.AppRunner(replay.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


# --- synthetic streams in the fixtures' formats -----------------------------------------------

_WORDS = ("the", " cache", " of", " a", " server", "\n", " 1.", " tree", " draft", " token")


def _piece(i: int) -> str:
    return _WORDS[i % len(_WORDS)]


def _chunks(n_tokens: int, per_chunk: int) -> list[int]:
    sizes, left = [1], n_tokens - 1  # the first token comes alone, from prefill
    while left > 0:
        k = min(per_chunk, left)
        sizes.append(k)
        left -= k
    return sizes


def sglang_stream(n_tokens: int, mode: str, per_chunk: int = 1) -> bytes:
    """A ``/generate`` body of ``n_tokens`` tokens, ``per_chunk`` tokens a chunk after the
    first, laid out as ``tests/fixtures/sglang/generate_*.sse`` (orjson-compact JSON)."""
    out: list[bytes] = []
    text, ids, ct = "", [], 0
    sizes = _chunks(n_tokens, per_chunk)
    for c, size in enumerate(sizes):
        new_ids = [100 + (ct + j) % 1000 for j in range(size)]
        piece = "".join(_piece(ct + j) for j in range(size))
        ct += size
        text += piece
        ids.extend(new_ids)
        last = c == len(sizes) - 1
        meta: dict[str, Any] = {
            "id": "2dd4e02463c34096adc4ae6973e267e2",
            "finish_reason": {"type": "length", "length": n_tokens} if last else None,
            "prompt_tokens": 27,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": ct,
            "cached_tokens": 0,
        }
        if last:
            meta["e2e_latency"] = 1.0
            meta["spec_verify_ct"] = len(sizes) - 1
        if mode == "incremental":
            obj = {"text": piece, "output_ids": new_ids, "meta_info": meta}
        else:
            obj = {"text": text, "output_ids": ids, "meta_info": meta}
        out.append(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def openai_stream(n_tokens: int, per_chunk: int = 1) -> bytes:
    """A ``/v1/chat/completions`` body laid out as ``tests/fixtures/sglang/openai_chat.sse``."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        obj = {
            "id": "2dd4e02463c34096adc4ae6973e267e2",
            "object": "chat.completion.chunk",
            "created": 1777805183,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "delta": delta,
                    "logprobs": None,
                    "finish_reason": finish,
                    "matched_stop": None,
                }
            ],
        }
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    out = [chunk({"role": "assistant", "content": ""})]
    ct = 0
    for size in _chunks(n_tokens, per_chunk):
        out.append(chunk({"content": "".join(_piece(ct + j) for j in range(size))}))
        ct += size
    out.append(chunk({}, "length"))
    usage = {
        "id": "2dd4e02463c34096adc4ae6973e267e2",
        "object": "chat.completion.chunk",
        "created": 1777805183,
        "model": "m",
        "choices": [],
        "usage": {"prompt_tokens": 27, "total_tokens": 27 + n_tokens, "completion_tokens": ct},
    }
    out.append(b"data: " + json.dumps(usage, separators=(",", ":")).encode() + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


SIZES = (256, 1024, 4096, 8192)
KINDS = ("cumulative", "incremental", "openai")


def synthetic_routes(replay: Replay, per_chunk: int = 1) -> None:
    """``/{kind}/{n}`` for every kind of :data:`KINDS` and size of :data:`SIZES`."""
    for n in SIZES:
        for kind in KINDS:
            body = (
                openai_stream(n, per_chunk)
                if kind == "openai"
                else sglang_stream(n, kind, per_chunk)
            )
            replay.stream(f"/{kind}/{n}", body)


def vllm_without_speculation(replay: Replay) -> None:
    """What a real vLLM 0.32 without speculative decoding answers (``tests/fixtures/vllm``)."""
    vllm = FIXTURES / "vllm"
    replay.doc("/health", b"", "text/plain")
    replay.doc("/v1/models", (vllm / "models.json").read_bytes())
    replay.doc("/version", (vllm / "version.json").read_bytes())
    replay.doc("/metrics", (vllm / "metrics_nospec_idle.txt").read_bytes(), "text/plain")
    replay.stream("", (vllm / "chat_stream_64_nospec.sse").read_bytes())


_COUNTER = re.compile(r"^(\w+_total)(\{[^}]*\})? (\S+)$")


def counters_after(page: str, requests: int) -> bytes:
    """A Prometheus page recorded after one request, as it reads after ``requests`` of them:
    every counter times ``requests``; before the first, a labelled counter has no sample at all
    (prometheus_client writes one only once it is incremented), so only the gauges remain."""
    out = []
    for line in page.splitlines():
        m = _COUNTER.match(line)
        if m is None:
            out.append(line)
        elif requests:
            out.append(f"{m.group(1)}{m.group(2) or ''} {float(m.group(3)) * requests}")
    return ("\n".join(out) + "\n").encode()


def trtllm_serve(replay: Replay, stream: str = "chat_stream_spec.sse") -> None:
    """What a TensorRT-LLM ``trtllm-serve`` with EAGLE and ``return_perf_metrics`` answers
    (``tests/fixtures/trtllm``): its counters grow by the recorded request's as each finishes."""
    trt = FIXTURES / "trtllm"
    page = (trt / "prometheus_one_request.txt").read_text()
    replay.doc("/health", b"", "text/plain")
    replay.doc("/v1/models", (trt / "models.json").read_bytes())
    replay.doc("/version", (trt / "version.json").read_bytes())
    replay.doc("/prometheus/metrics", lambda: counters_after(page, replay.served), "text/plain")
    replay.stream("", (trt / stream).read_bytes())


def main(argv: list[str]) -> None:
    """``PORTFILE [PER_CHUNK]``: the benchmark's synthetic streams on a free port.
    ``--vllm-nospec --port P [any server flags]``: a stand-in for a vLLM server that runs
    without speculation whatever its flags say, logging the real server's start-up lines.
    ``--trtllm --port P [any server flags]``: a stand-in for ``trtllm-serve`` with EAGLE
    (:func:`trtllm_serve`), logging its start-up lines."""
    if argv and argv[0] in ("--vllm-nospec", "--trtllm"):
        port = int(argv[argv.index("--port") + 1])
        vllm = argv[0] == "--vllm-nospec"
        log = FIXTURES / ("vllm/startup_nospec.log" if vllm else "trtllm/startup.log")
        for line in log.read_text().splitlines():
            print(line, flush=True)
        fill = vllm_without_speculation if vllm else trtllm_serve
        web.run_app(_app(fill), host="127.0.0.1", port=port, print=None)
        return
    port_file = Path(argv[0])
    per_chunk = int(argv[1]) if len(argv) > 1 else 1

    async def run() -> None:
        replay = Replay()
        synthetic_routes(replay, per_chunk)
        _, url = await serve(replay)
        port_file.write_text(url.rsplit(":", 1)[1])
        await asyncio.Event().wait()

    asyncio.run(run())


def _app(fill: Any) -> web.Application:
    replay = Replay()
    fill(replay)
    return replay.app()


if __name__ == "__main__":
    main(sys.argv[1:])


def payloads(body: bytes) -> list[str]:
    """The ``data:`` payloads of an SSE body, as a transport hands them to a parser."""
    out = []
    for ev in events(body):
        for line in ev.decode("utf-8").split("\n"):
            if line.startswith("data:"):
                out.append(line[5:])
    return out

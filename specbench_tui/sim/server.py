"""The HTTP face of the simulator: the simulated engine's native and OpenAI-compatible
endpoints on aiohttp.

Responses follow the engine's shapes (native ``/generate`` with cumulative ``text`` and
``meta_info`` per SSE chunk, OpenAI ``chat.completion.chunk`` deltas), so the benchmark client
runs unchanged against a real or simulated server. One addition, ``/sim/requests/{rid}``,
reports when each chunk actually left, so tests can hold the client's timing to account.

Chunk times are taken right before each write, on the same ``perf_counter`` clock the client
uses on the same host; with Nagle disabled (aiohttp's default) and one write per chunk, what
the client measures differs from this by loopback latency only.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import json
import signal
import sys
import textwrap
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from specbench_tui.engines.registry import SIMULATED_ENGINE, adapter, adapters
from specbench_tui.sim.config import SimArgsError, SimConfig, parse_args
from specbench_tui.sim.gpus import MemoryPlan, SimGpus, memory_plan
from specbench_tui.sim.lifecycle import Lifecycle
from specbench_tui.sim.logfmt import ServerLog
from specbench_tui.sim.model import PerfModel
from specbench_tui.sim.scheduler import Scheduler, SimRequest

_RECORDS_KEPT = 10_000
_DEFAULT_MAX_NEW_TOKENS = 128  # the native route's default
_DEFAULT_CHAT_MAX_TOKENS = 4096
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_DONE = b"data: [DONE]\n\n"
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


@dataclass(slots=True)
class RequestRecord:
    """What was scheduled and sent for one finished request, kept compact (arrays, no text)."""

    rid: str
    api: str
    stream: bool
    received_perf: float
    received_unix: float
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    verify_ct: int
    finish_reason: dict[str, Any] | None
    chunk_t: array.array
    chunk_n: array.array
    step_t: array.array
    step_n: array.array

    def as_json(self) -> dict[str, Any]:
        r0 = self.received_perf
        chunk_offsets = [round(t - r0, 7) for t in self.chunk_t]
        return {
            "rid": self.rid,
            "api": self.api,
            "stream": self.stream,
            "received_unix": self.received_unix,
            "received_perf": r0,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens,
            "spec_verify_ct": self.verify_ct,
            "finish_reason": self.finish_reason,
            "first_chunk_s": chunk_offsets[0] if chunk_offsets else None,
            "last_chunk_s": chunk_offsets[-1] if chunk_offsets else None,
            "chunk_offsets_s": chunk_offsets,
            "chunk_tokens": list(self.chunk_n),
            "step_offsets_s": [round(t - r0, 7) for t in self.step_t],
            "step_tokens": list(self.step_n),
        }


class _Emitter:
    """Sends a request's progress as SSE chunks and notes when each one left."""

    def __init__(self, resp: web.StreamResponse) -> None:
        self.resp = resp
        self.times = array.array("d")
        self.tokens = array.array("l")

    async def send(self, payload: dict[str, Any] | bytes, new_tokens: int) -> None:
        body = payload if isinstance(payload, bytes) else _dumps(payload).encode()
        data = b"data: " + body + b"\n\n"
        self.times.append(time.perf_counter())
        self.tokens.append(new_tokens)
        await self.resp.write(data)


class _CumulativeChunk:
    """The native default stream: every chunk carries the whole text and all ids so far. Encoding
    them again for each chunk made the simulator's cost per token grow with the output (half
    its CPU at 2048 tokens, and packed rehearsals run eight of them on two cores); this keeps
    both encoded and appends only what is new. The bytes are the ones ``_dumps`` writes."""

    def __init__(self) -> None:
        self._text = ""
        self._text_json = b""
        self._ids = 0
        self._ids_json = b""

    def encode(self, text: str, ids: list[int], meta: dict[str, Any]) -> bytes:
        if text.startswith(self._text):
            self._text_json += _dumps(text[len(self._text) :]).encode()[1:-1]
        else:  # a stop string trimmed off the end: encode it all again
            self._text_json = _dumps(text).encode()[1:-1]
        self._text = text
        if len(ids) < self._ids:
            self._ids, self._ids_json = 0, b""
        new = ",".join(map(str, ids[self._ids :])).encode()
        self._ids_json += (b"," + new) if self._ids and new else new
        self._ids = len(ids)
        return (
            b'{"text":"'
            + self._text_json
            + b'","output_ids":['
            + self._ids_json
            + b'],"meta_info":'
            + _dumps(meta).encode()
            + b"}"
        )


class SimServer(Lifecycle):
    """One simulated server: lifecycle, endpoints, request records."""

    def __init__(self, cfg: SimConfig, log: ServerLog) -> None:
        self.cfg = cfg
        self.log = log
        self.model = PerfModel(cfg)
        self.plan: MemoryPlan = memory_plan(cfg)
        self.scheduler = Scheduler(cfg, self.model, log, self.plan.max_total_tokens)
        self.gpus = SimGpus(cfg, self._load, self._busy_at)
        self.model.crowded = self.gpus.neighbours
        self.ready = False
        self.draining = False
        self.crashed = False  # a fatal error happened; the process is about to vanish
        self.served = 0
        self.records: OrderedDict[str, RequestRecord] = OrderedDict()
        self.stop_event = asyncio.Event()
        self.exit_code = 0
        self._created = int(time.time())
        crash = cfg.fault("crash-after")
        self._crash_after = int(crash.value) if crash else None
        # crash-once-after: the same, in the first life of the server on its port only (the
        # GPU state directory remembers it), so a restarted server serves on.
        once = cfg.fault("crash-once-after")
        self._crash_mark = None
        if once is not None and cfg.gpu_state_dir:
            self._crash_mark = Path(cfg.gpu_state_dir) / f"crashed-once-{cfg.port}"
            if not self._crash_mark.exists():
                self._crash_after = int(once.value)

    def _load(self) -> float:
        """How busy the GPUs are, for the telemetry files: 0 idle, up to 1 at a full batch."""
        sched = self.scheduler
        if not sched.busy and time.perf_counter() - sched.last_step_end > 0.3:
            return 0.0
        return min(1.0, 0.3 + 0.7 * len(sched.running) / max(sched.cap, 1) * 4)

    def _busy_at(self) -> float:
        """The wall time of the last decode step (0 before the first), for the neighbours."""
        sched = self.scheduler
        if sched.busy:
            return time.time()
        if not sched.last_step_end:
            return 0.0
        return time.time() - (time.perf_counter() - sched.last_step_end)

    def _s(self, simulated_s: float) -> float:
        return simulated_s / self.cfg.speed

    # -- application ---------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._access_log], client_max_size=64 * 1024 * 1024)
        app.add_routes(
            [
                web.get("/health", self.health),
                web.get("/health_generate", self.health),
                web.get("/get_server_info", self.server_info),
                web.get("/server_info", self.server_info),
                web.get("/get_model_info", self.model_info),
                web.get("/model_info", self.model_info),
                web.get("/v1/models", self.models),
                web.post("/generate", self.generate),
                web.post("/v1/chat/completions", self.chat),
                web.post("/v1/completions", self.completions),
                web.post("/flush_cache", self.flush_cache),
                web.get("/flush_cache", self.flush_cache),
                web.get("/sim/requests/{rid}", self.request_record),
            ]
        )
        return app

    @web.middleware
    async def _access_log(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            resp = await handler(request)
        except web.HTTPException as exc:
            self._log_access(request, exc.status)
            raise
        self._log_access(request, resp.status)
        return resp

    def _log_access(self, request: web.Request, status: int) -> None:
        if request.path.startswith("/sim/"):
            return
        peer = request.transport.get_extra_info("peername") if request.transport else None
        where = f"{peer[0]}:{peer[1]}" if peer else "127.0.0.1:0"
        self.log.access(where, request.method, request.path_qs, status)

    # -- simple endpoints ----------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        if self.ready and not self.draining:
            return web.Response(status=200)
        return web.Response(status=503, text="Server is not ready")

    async def server_info(self, request: web.Request) -> web.Response:
        info = self.cfg.server_info()
        state: dict[str, Any] = {"last_gen_throughput": self.scheduler.stats.last_gen_throughput}
        if self.cfg.speculative:
            state["avg_spec_accept_length"] = self.scheduler.stats.avg_accept_length
        info["internal_states"] = [state]
        info["max_total_num_tokens"] = self.plan.max_total_tokens
        return web.json_response(info)

    async def model_info(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "model_path": self.cfg.model_path,
                "tokenizer_path": self.cfg.model_path,
                "is_generation": True,
            }
        )

    async def models(self, request: web.Request) -> web.Response:
        model = {
            "id": self.cfg.model_name,
            "object": "model",
            "created": self._created,
            "owned_by": adapter(self.cfg.engine).owned_by,
            "root": self.cfg.model_path,
            "max_model_len": self.cfg.context_length,
        }
        return web.json_response({"object": "list", "data": [model]})

    async def flush_cache(self, request: web.Request) -> web.Response:
        if self.scheduler.busy:
            return web.Response(status=400, text="Cache not flushed: requests are running.")
        self.scheduler.cache = type(self.scheduler.cache)()
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details.")

    async def request_record(self, request: web.Request) -> web.Response:
        record = self.records.get(request.match_info["rid"])
        if record is None:
            return web.json_response({"error": "unknown or unfinished request"}, status=404)
        return web.json_response(record.as_json())

    # -- generation ----------------------------------------------------------------------------

    async def _refuse(self) -> web.Response | None:
        """Why a generation request is not taken, or None. After a fatal error there is no
        answer at all: the client sees the connection drop when the process exits."""
        if self.crashed:
            await asyncio.sleep(3600)
        if self.draining:
            return web.json_response({"error": "server is shutting down"}, status=503)
        if not self.ready:
            return web.json_response({"error": "server is not ready"}, status=503)
        return None

    @staticmethod
    async def _body(request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise web.HTTPBadRequest(text="request body is not JSON") from None
        if not isinstance(body, dict):
            raise web.HTTPBadRequest(text="request body must be a JSON object")
        return body

    def _meta(self, req: SimRequest, now: float) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": req.finish,
            "prompt_tokens": req.prompt_tokens,
            "completion_tokens": req.completion_tokens,
            "cached_tokens": req.cached_tokens,
            "e2e_latency": now - req.received,
        }
        if self.cfg.speculative:
            meta["spec_verify_ct"] = req.verify_ct
            meta["spec_accept_length"] = (
                req.completion_tokens / req.verify_ct if req.verify_ct else 0.0
            )
        return meta

    async def generate(self, request: web.Request) -> web.StreamResponse:
        received = time.perf_counter()
        refused = await self._refuse()
        if refused is not None:
            return refused
        body = await self._body(request)
        text = body.get("text")
        if text is None and isinstance(body.get("input_ids"), list):
            text = " ".join(str(t) for t in body["input_ids"])
        if not isinstance(text, str):
            raise web.HTTPBadRequest(text="the simulator takes one prompt per request in 'text'")
        params = body.get("sampling_params") or {}
        self._record_prompt("generate", {"text": text, "sampling_params": params})
        req = self._new_request(
            rid=body.get("rid"),
            prompt=text,
            max_new_tokens=params.get("max_new_tokens", _DEFAULT_MAX_NEW_TOKENS),
            params=params,
            stream=bool(body.get("stream", False)),
            received=received,
        )
        if not req.stream:
            await self._wait_done(request, req)
            now = time.perf_counter()
            payload = {
                "text": req.text,
                "output_ids": _ids(req),
                "meta_info": self._meta(req, now),
            }
            self._record(req, "generate", [now], [req.completion_tokens])
            return web.json_response(payload, dumps=lambda o: _dumps(o))
        resp = web.StreamResponse(headers=_SSE_HEADERS)
        await resp.prepare(request)
        emitter = _Emitter(resp)
        cumulative = _CumulativeChunk()
        sent = 0
        try:
            while True:
                await req.wake.wait()
                req.wake.clear()
                done = req.done
                if req.completion_tokens - sent >= self.cfg.burst or done:
                    now = time.perf_counter()
                    # Like the native default stream: the whole text and all ids so far.
                    chunk = cumulative.encode(req.text, _ids(req), self._meta(req, now))
                    await emitter.send(chunk, req.completion_tokens - sent)
                    sent = req.completion_tokens
                if done:
                    break
            await resp.write(_DONE)
            await resp.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            self.scheduler.cancel(req, "client disconnected")
            raise
        self._record(req, "generate", emitter.times, emitter.tokens)
        return resp

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=False)

    async def _openai(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        """``/v1/chat/completions`` (messages, rendered here as ChatML) and
        ``/v1/completions`` (a prompt text, continued as it is)."""
        received = time.perf_counter()
        refused = await self._refuse()
        if refused is not None:
            return refused
        body = await self._body(request)
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise web.HTTPBadRequest(text="'messages' must be a non-empty list")
            prompt = _chat_prompt(messages)
            self._record_prompt(
                "chat",
                {"messages": messages, "chat_template_kwargs": body.get("chat_template_kwargs")},
            )
        else:
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                raise web.HTTPBadRequest(text="the simulator takes one prompt text in 'prompt'")
            self._record_prompt("completions", {"prompt": prompt})
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        req = self._new_request(
            rid=body.get("rid"),
            prompt=prompt,
            max_new_tokens=max_tokens or _DEFAULT_CHAT_MAX_TOKENS,
            params=body,
            stream=bool(body.get("stream", False)),
            received=received,
        )
        model = body.get("model") or self.cfg.model_name
        created = int(time.time())
        if not req.stream:
            await self._wait_done(request, req)
            now = time.perf_counter()
            self._record(req, "chat" if chat else "completions", [now], [req.completion_tokens])
            choice: dict[str, Any] = {"index": 0}
            if chat:
                choice["message"] = {
                    "role": "assistant",
                    "content": req.text,
                    "reasoning_content": None,
                    "tool_calls": None,
                }
            else:
                choice["text"] = req.text
            choice |= {
                "logprobs": None,
                "finish_reason": _openai_finish(req.finish),
                "matched_stop": (req.finish or {}).get("matched"),
            }
            return web.json_response(
                {
                    "id": req.rid,
                    "object": "chat.completion" if chat else "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [choice],
                    "usage": _usage(req),
                },
                dumps=lambda o: _dumps(o),
            )
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        resp = web.StreamResponse(headers=_SSE_HEADERS)
        await resp.prepare(request)
        emitter = _Emitter(resp)
        sent_tokens = sent_chars = 0
        base = {
            "id": req.rid,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created,
            "model": model,
        }
        try:
            while True:
                await req.wake.wait()
                req.wake.clear()
                done = req.done
                if req.completion_tokens - sent_tokens >= self.cfg.burst or done:
                    piece: dict[str, Any]
                    if chat:
                        delta: dict[str, Any] = {"content": req.text[sent_chars:]}
                        if sent_tokens == 0:
                            delta = {"role": "assistant", **delta}
                        piece = {"delta": delta}
                    else:
                        piece = {"text": req.text[sent_chars:]}
                    choice = {
                        "index": 0,
                        **piece,
                        "logprobs": None,
                        "finish_reason": _openai_finish(req.finish) if done else None,
                    }
                    if done:
                        choice["matched_stop"] = (req.finish or {}).get("matched")
                        if self.cfg.speculative:
                            # As the engine's builds that attach it: the request's verify steps,
                            # so an OpenAI-route rehearsal has its accept length too.
                            choice["meta_info"] = self._meta(req, time.perf_counter())
                    await emitter.send(
                        {**base, "choices": [choice]}, req.completion_tokens - sent_tokens
                    )
                    sent_tokens, sent_chars = req.completion_tokens, len(req.text)
                if done:
                    break
            if include_usage:
                await resp.write(
                    b"data: "
                    + _dumps({**base, "choices": [], "usage": _usage(req)}).encode()
                    + b"\n\n"
                )
            await resp.write(_DONE)
            await resp.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            self.scheduler.cancel(req, "client disconnected")
            raise
        self._record(req, "chat" if chat else "completions", emitter.times, emitter.tokens)
        return resp

    def _record_prompt(self, api: str, what: dict[str, Any]) -> None:
        """Append what a request carried to ``--sim-record-prompts``' file, if one is set."""
        if self.cfg.record_prompts is None:
            return
        with open(self.cfg.record_prompts, "a", encoding="utf-8") as f:
            f.write(json.dumps({"api": api, **what}, ensure_ascii=False) + "\n")

    def _new_request(
        self,
        *,
        rid: Any,
        prompt: str,
        max_new_tokens: Any,
        params: dict[str, Any],
        stream: bool,
        received: float,
    ) -> SimRequest:
        try:
            max_new = int(max_new_tokens)
            temperature = float(params.get("temperature", 1.0))
        except (TypeError, ValueError):
            raise web.HTTPBadRequest(text="max tokens and temperature must be numbers") from None
        if max_new < 0:
            raise web.HTTPBadRequest(text="max_new_tokens must be >= 0")
        stop = params.get("stop") or ()
        stops = (stop,) if isinstance(stop, str) else tuple(s for s in stop if isinstance(s, str))
        req = SimRequest(
            rid=str(rid) if rid else uuid.uuid4().hex,
            prompt=prompt,
            max_new_tokens=max(max_new, 1),
            temperature=temperature,
            stream=stream,
            received=received,
            stops=stops,
            ignore_eos=bool(params.get("ignore_eos", False)),
        )
        self.scheduler.submit(req)
        return req

    async def _wait_done(self, request: web.Request, req: SimRequest) -> None:
        try:
            while not req.done:
                await req.wake.wait()
                req.wake.clear()
        except asyncio.CancelledError:
            self.scheduler.cancel(req, "client disconnected")
            raise

    def _record(self, req: SimRequest, api: str, chunk_t: Any, chunk_n: Any) -> None:
        record = RequestRecord(
            rid=req.rid,
            api=api,
            stream=req.stream,
            received_perf=req.received,
            received_unix=time.time() - (time.perf_counter() - req.received),
            prompt_tokens=req.prompt_tokens,
            cached_tokens=req.cached_tokens,
            completion_tokens=req.completion_tokens,
            verify_ct=req.verify_ct,
            finish_reason=req.finish,
            chunk_t=array.array("d", chunk_t),
            chunk_n=array.array("l", chunk_n),
            step_t=array.array("d", req.step_times),
            step_n=array.array("l", req.step_tokens),
        )
        self.records[req.rid] = record
        self.records.move_to_end(req.rid)
        if self.cfg.record_path:
            with open(self.cfg.record_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record.as_json()) + "\n")
        while len(self.records) > _RECORDS_KEPT:
            self.records.popitem(last=False)
        self.served += 1
        if self._crash_after is not None and self.served >= self._crash_after:
            self._crash()


def _chat_prompt(messages: list[Any]) -> str:
    """Render messages with a ChatML template, so prompt length and prefix caching behave as
    they would behind a real chat template (earlier turns are a prefix of later ones)."""
    parts = []
    for msg in messages:
        if not isinstance(msg, dict):
            raise web.HTTPBadRequest(text="each message must be an object")
        content = msg.get("content") or ""
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"<|im_start|>{msg.get('role', 'user')}\n{content}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def _openai_finish(finish: dict[str, Any] | None) -> str | None:
    return None if finish is None else str(finish.get("type"))


def _usage(req: SimRequest) -> dict[str, Any]:
    return {
        "prompt_tokens": req.prompt_tokens,
        "completion_tokens": req.completion_tokens,
        "total_tokens": req.prompt_tokens + req.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": req.cached_tokens},
    }


async def serve(cfg: SimConfig, log: ServerLog) -> int:
    """Run one server until SIGTERM/SIGINT or a start-up failure; returns the exit status."""
    server = SimServer(cfg, log)
    runner = web.AppRunner(server.app(), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, cfg.host, cfg.port, reuse_address=True, shutdown_timeout=0.5)
    try:
        await site.start()
    except OSError as exc:
        log.line(
            f"Exception in run_server: OSError: [Errno {exc.errno}] error while attempting "
            f"to bind on address ({cfg.host!r}, {cfg.port}): {exc.strerror}",
            rank=None,
        )
        await runner.cleanup()
        return 1
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.stop_event.set)
    tasks = [
        asyncio.create_task(server.scheduler.run(), name="scheduler"),
        asyncio.create_task(server.gpus.run(), name="gpus"),
        asyncio.create_task(server.start_up(), name="startup"),
    ]
    await server.stop_event.wait()
    if server.exit_code == 0:
        log.line("Received SIGTERM. Shutting down gracefully.", rank=None)
        slow_stop = cfg.fault("slow-stop")
        if slow_stop is not None:  # a server that takes its time to stop (real seconds)
            await asyncio.sleep(slow_stop.value)
    await site.stop()
    await server.shut_down()
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await runner.cleanup()
    server.gpus.remove_all()
    return server.exit_code


def usage(engine: str = SIMULATED_ENGINE) -> str:
    """The help text, naming the engine the server stands in for and the speculation flags
    each engine's adapter reads (``EngineAdapter.speculation_flags``)."""
    face = adapter(engine)
    others = "; ".join(
        f"{', '.join(a.speculation_flags)} ({a.label})"
        for a in adapters()
        if a is not face and a.speculation_flags
    )
    about = (
        f"A simulated {face.label} server: same HTTP API and log lines, simulated GPUs. "
        f"Understood {face.label} arguments: --model-path, --tp-size, --host, --port, "
        f"{', '.join(face.speculation_flags)}, --max-running-requests, --served-model-name; "
        f"the speculation flags of other engines: {others or 'none'}; others are accepted "
        "and ignored, as a real config passes many. --speed compresses simulated time; "
        "--sim-require-model fails start-up when --model-path does not exist, as "
        f"{face.label} would. --sim-engine names the engine whose log lines the server "
        f"prints (default {SIMULATED_ENGINE})."
    )
    return f"""\
usage: python -m specbench_tui.sim [{face.label} launch arguments] [--speed F] [--seed N]
       [--sim-fault diverge|diverge-tp:N|crash-at-start|never-ready|crash-after:N|
                    crash-once-after:N|slow:X|slow-stop:S|neighbours:X]
       [--sim-gpu-state DIR] [--sim-engine NAME]
       [--sim-require-model] [--sim-burst N] [--sim-record FILE]

{textwrap.fill(about, width=95, break_on_hyphens=False)}"""


def main(argv: list[str] | None = None) -> int:
    """``python -m specbench_tui.sim``: parse the launch arguments and serve until told to
    stop."""
    with contextlib.suppress(AttributeError, ValueError):
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    argv = sys.argv[1:] if argv is None else argv
    if "-h" in argv or "--help" in argv:  # unknown flags are accepted, so say it before serving
        print(usage())
        return 0
    try:
        cfg = parse_args(argv)
    except SimArgsError as exc:
        print(f"launch_server: error: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(serve(cfg, ServerLog(engine=cfg.engine)))


def _ids(req: SimRequest) -> list[int]:
    return req.tokens.ids if req.tokens is not None else []

"""Streaming HTTP client for SGLang's native ``/generate`` and the OpenAI chat API.

One :class:`BenchClient` (one :class:`~specbench_tui.bench.transport.SseTransport`, pooled
connections sized for the cell's concurrency) sends every request of a cell. Each request is
timed with ``time.perf_counter_ns`` from the moment its headers go to the socket (connection
set-up is the client's time, not the server's); each read of the stream is stamped once, and
per event the only work is one ``json.loads`` and a few dictionary lookups, so the client does
not slow down what it measures.

Failures never raise: a timeout, an HTTP error, a refused connection or a stream that stops
early come back as :attr:`Completion.error`, a short sentence the operator can act on, because
one bad request must not end a cell that has already measured a hundred good ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import socket
import time
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from specbench_tui.bench.figures import fill_rates
from specbench_tui.bench.transport import SseTransport
from specbench_tui.results.cells import Api
from specbench_tui.results.records import Measurement

PromptFormat = Literal["chatml", "plain"]
Message = dict[str, str]

_ERROR_BODY_CHARS = 200

# Field names seen across SGLang builds; the first one present wins. Older builds and forks
# rename these, and a renamed field must degrade to "unknown", not to a crash.
_COMPLETION_KEYS = ("completion_tokens", "output_tokens", "num_output_tokens")
_PROMPT_KEYS = ("prompt_tokens", "input_tokens", "num_prompt_tokens")
_CACHED_KEYS = ("cached_tokens", "cached_prompt_tokens", "num_cached_tokens")
_VERIFY_KEYS = ("spec_verify_ct", "spec_verify_count", "verify_ct")


@dataclass
class Completion(Measurement):
    """What one request measured, plus its output text.

    ``text`` is returned (not only hashed) because the agentic workload builds the next turn
    from it. ``itl_s`` holds every gap between content-bearing chunks, so its length is
    ``chunks - 1`` for a request that streamed at least one chunk.
    """

    text: str = ""
    request_id: str | None = None  # the server's id (meta_info id / chunk id), for tracing


class _StreamError(Exception):
    """A failure found while reading the stream; its message is the row's ``error``."""


def render_prompt(messages: list[Message], fmt: PromptFormat = "chatml") -> str:
    """Turn a conversation into the raw text ``/generate`` takes.

    The native API has no chat template of its own, so the client applies one. ChatML (the
    Qwen family's format) makes a chat model answer as it would behind a chat API, which is what
    decides a drafter's acceptance; ``plain`` sends a single user prompt verbatim and joins a
    longer conversation with role headers. Either way the rendering of a prefix never changes
    when turns are appended, so the server's prefix cache sees a growing shared prefix.
    """
    if fmt == "chatml":
        parts = [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
        parts.append("<|im_start|>assistant\n")
        return "".join(parts)
    if len(messages) == 1 and messages[0]["role"] == "user":
        return messages[0]["content"]
    parts = [f"{m['role'].capitalize()}: {m['content']}\n\n" for m in messages]
    parts.append("Assistant:")
    return "".join(parts)


def _first_int(d: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    for k in keys:
        v = d.get(k)
        if isinstance(v, bool):
            continue
        if isinstance(v, int | float):
            return int(v)
    return None


def _finish_reason(raw: Any) -> str | None:
    """SGLang sends ``{"type": "length", "length": 256}``; OpenAI sends ``"length"``."""
    if raw is None:
        return None
    if isinstance(raw, dict):
        kind = raw.get("type")
        return str(kind) if kind is not None else json.dumps(raw, separators=(",", ":"))[:60]
    return str(raw)


def _abort_message(raw: Any) -> str:
    if isinstance(raw, dict) and raw.get("message"):
        return f"server aborted the request: {raw['message']}"[:240]
    return "server aborted the request"


def _error_text(body: Any) -> str:
    """Pull the message out of the usual JSON error shapes; fall back to the raw text."""
    if isinstance(body, dict):
        err = body.get("error", body.get("detail", body.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            return str(err)
    return str(body)


def _describe_http_error(status: int, body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    with contextlib.suppress(ValueError):
        text = _error_text(json.loads(text))
    text = " ".join(text.split())[:_ERROR_BODY_CHARS]
    return f"HTTP {status}: {text}" if text else f"HTTP {status}"


def _describe_exception(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, TimeoutError):  # asyncio.timeout and aiohttp's own timeouts
        return f"timeout after {timeout_s:g} s"
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return f"unknown host: {exc.host}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        root = exc.os_error
        if isinstance(root, ConnectionRefusedError) or "refused" in str(root).lower():
            return "connection refused"
        if isinstance(root, socket.gaierror):
            return f"unknown host: {root.strerror or root}"
        msg = getattr(root, "strerror", None) or str(root)
        return f"cannot connect: {msg}"[:240] if msg else "cannot connect"
    if isinstance(
        exc,
        aiohttp.ServerDisconnectedError
        | aiohttp.ClientPayloadError
        | aiohttp.ClientOSError
        | ConnectionError,
    ):
        return "server closed the stream early"
    if isinstance(exc, _StreamError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"[:240]


class BenchClient:
    """A streaming client bound to one server.

    ``concurrency`` sizes the connection pool so that a concurrency cell never waits on the
    pool (which would show up as false queueing delay in TTFT).
    """

    def __init__(
        self,
        base_url: str,
        api: Api = "sglang",
        *,
        concurrency: int = 1,
        model: str = "default",
        prompt_format: PromptFormat = "chatml",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api: Api = api
        self.model = model
        self.prompt_format: PromptFormat = prompt_format
        self._transport = SseTransport(self.base_url, connections=max(1, concurrency) + 2)

    async def __aenter__(self) -> BenchClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def generate(
        self,
        messages: list[Message] | str,
        *,
        max_tokens: int,
        temperature: float = 0.0,
        timeout_s: float = 600.0,
    ) -> Completion:
        """Send one request, stream it to the end and return what it measured.

        Never raises for a server or network failure: the result carries ``error`` and
        whatever was measured before the failure. Cancellation still propagates, so the
        engine can abort a cell.
        """
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        if self.api == "sglang":
            path = "/generate"
            body: dict[str, Any] = {
                "text": render_prompt(messages, self.prompt_format),
                "sampling_params": {"max_new_tokens": max_tokens, "temperature": temperature},
                "stream": True,
            }
        else:
            path = "/v1/chat/completions"
            body = {
                "model": self.model,
                "messages": messages,
                "max_tokens": max_tokens,
                "temperature": temperature,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        payload = json.dumps(body, separators=(",", ":")).encode()
        out = Completion(started_at=time.time())
        state = _StreamState()
        # The clock restarts when the request's headers go out (after a connection was taken
        # or opened); until then it counts from here, so a failed connect still has an e2e.
        clock = [time.perf_counter_ns()]
        try:
            async with asyncio.timeout(timeout_s):
                await self._stream(path, payload, out, state, clock)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A server that sent [DONE] but then held the body open delivered everything.
            if not state.done:
                out.error = _describe_exception(exc, timeout_s)
        end = state.end_t
        if end is None:
            end = (time.perf_counter_ns() - clock[0]) * 1e-9
        state.finish(out, end)
        fill_rates(out, state.content_tokens)
        return out

    async def _stream(
        self,
        path: str,
        body: bytes,
        out: Completion,
        state: _StreamState,
        clock: list[int],
    ) -> None:
        on_data = state.on_sglang if self.api == "sglang" else state.on_openai
        loads = json.loads

        def on_sent(t_ns: int) -> None:
            clock[0] = t_ns

        def on_payload(payload: bytes, t_ns: int) -> None:
            if state.done:
                return  # the server closes the body right after [DONE]; nothing counts
            t = (t_ns - clock[0]) * 1e-9
            if payload.startswith(b"[DONE]"):
                # Reading goes on to the end of the body, so the connection goes back to the
                # pool instead of being torn down.
                state.done = True
                state.end_t = t
                return
            try:
                data = loads(payload)
            except ValueError as exc:
                shown = payload[:80].decode("utf-8", "replace")
                raise _StreamError(f"bad stream data: {shown!r}") from exc
            if isinstance(data, dict):
                on_data(data, t)

        end = await self._transport.post_sse(path, body, on_payload, on_sent)
        if end.status >= 400:
            out.error = _describe_http_error(end.status, end.error_body)
            return
        if state.end_t is None:
            state.end_t = (end.end_ns - clock[0]) * 1e-9
        if not state.done and state.finish_raw is None:
            raise _StreamError("server closed the stream early")


class _StreamState:
    """Running state of one stream; kept apart from :class:`Completion` so the hot path
    touches only plain attributes."""

    __slots__ = (
        "content_times",
        "content_tokens",
        "done",
        "end_t",
        "finish_raw",
        "meta",
        "reasoning",
        "text",
        "tokens",
        "usage",
    )

    def __init__(self) -> None:
        self.text = ""
        self.reasoning = ""
        self.tokens = -1  # completion_tokens of the last chunk, to spot token-only chunks
        self.content_times: list[float] = []
        self.content_tokens: list[int] = []  # the server's running count at each; -1 unknown
        self.meta: dict[str, Any] = {}
        self.usage: dict[str, Any] = {}
        self.finish_raw: Any = None
        self.done = False
        self.end_t: float | None = None

    def on_sglang(self, data: dict[str, Any], t: float) -> None:
        if "error" in data and "text" not in data:
            raise _StreamError(f"server error: {_error_text(data)}"[:240])
        meta = data.get("meta_info")
        grew = False
        if isinstance(meta, dict):
            self.meta = meta
            ct = _first_int(meta, _COMPLETION_KEYS)
            if ct is not None and ct > self.tokens:
                grew = self.tokens >= 0 or ct > 0
                self.tokens = ct
            fr = meta.get("finish_reason")
            if fr is not None:
                self.finish_raw = fr
        text = data.get("text")
        if isinstance(text, str) and text:
            prev = self.text
            # SGLang streams the cumulative text by default; builds run with incremental
            # streaming send only the new piece. Accept both.
            if len(text) >= len(prev) and text.startswith(prev):
                if len(text) > len(prev):
                    grew = True
                    self.text = text
            else:
                grew = True
                self.text = prev + text
        if grew:
            self.content_times.append(t)
            self.content_tokens.append(self.tokens)

    def on_openai(self, data: dict[str, Any], t: float) -> None:
        if "error" in data and "choices" not in data:
            raise _StreamError(f"server error: {_error_text(data)}"[:240])
        usage = data.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
            # Servers asked for continuous usage stats send a running count in every chunk.
            ct = usage.get("completion_tokens")
            if isinstance(ct, int) and not isinstance(ct, bool):
                self.tokens = ct
        choices = data.get("choices")
        if not choices:
            return
        choice = choices[0]
        delta = choice.get("delta") or {}
        content = delta.get("content")
        reasoning = delta.get("reasoning_content")
        grew = False
        if content:
            self.text += content
            grew = True
        if reasoning:
            self.reasoning += reasoning
            grew = True
        if grew:
            self.content_times.append(t)
            self.content_tokens.append(self.tokens)
        fr = choice.get("finish_reason")
        if fr is not None:
            self.finish_raw = fr
        # Some servers (SGLang among them) attach meta_info-like fields to chunks.
        meta = choice.get("meta_info") or data.get("meta_info")
        if isinstance(meta, dict):
            self.meta = meta

    def finish(self, out: Completion, e2e: float) -> None:
        """Turn the stream's state into the row's measured fields."""
        times = self.content_times
        out.chunks = len(times)
        if times:
            out.ttft_s = times[0]
            out.itl_s = [b - a for a, b in itertools.pairwise(times)]
        out.e2e_s = e2e
        counts: dict[str, Any] = {**self.meta, **self.usage}
        out.output_tokens = _first_int(counts, _COMPLETION_KEYS)
        out.prompt_tokens = _first_int(counts, _PROMPT_KEYS)
        out.cached_tokens = _first_int(counts, _CACHED_KEYS)
        if out.cached_tokens is None:
            details = self.usage.get("prompt_tokens_details")
            if isinstance(details, dict):
                out.cached_tokens = _first_int(details, _CACHED_KEYS)
        verify = _first_int(self.meta, _VERIFY_KEYS)
        out.spec_verify_ct = verify
        if verify and out.output_tokens is not None:
            out.accept_length = out.output_tokens / verify
        else:
            direct = self.meta.get("spec_accept_length")
            if isinstance(direct, int | float) and not isinstance(direct, bool) and direct > 0:
                out.accept_length = float(direct)
        out.finish_reason = _finish_reason(self.finish_raw)
        if out.finish_reason == "abort" and out.error is None:
            out.error = _abort_message(self.finish_raw)
        n = out.output_tokens
        if n is not None and out.error is None:
            if e2e > 0:
                out.output_tok_s = n / e2e
            if n > 1 and out.ttft_s is not None:
                out.tpot_s = (e2e - out.ttft_s) / (n - 1)
        out.text = self.text
        rid = self.meta.get("id")
        out.request_id = str(rid) if rid is not None else None
        if out.error is None:
            # Reasoning is part of what the model generated, so a greedy check covers it too.
            full = self.reasoning + self.text if self.reasoning else self.text
            out.output_sha256 = hashlib.sha256(full.encode("utf-8")).hexdigest()

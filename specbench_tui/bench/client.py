"""Streaming HTTP client for SGLang's native ``/generate`` and the OpenAI chat API.

One :class:`BenchClient` (one :class:`~specbench_tui.bench.transport.SseTransport`, pooled
connections sized for the cell's concurrency) sends every request of a cell. Each request is
timed with ``time.perf_counter_ns`` from the moment its headers go to the socket (connection
set-up is the client's time, not the server's); every SSE ``data:`` payload is stamped as it
is cut out of the stream and goes, with that stamp and the number of the read that brought
it, to a stream parser from ``engines/streams.py``, which decodes only what is new in it, so
the client does not slow down what it measures.

Failures never raise: a timeout, an HTTP error, a refused connection or a stream that stops
early come back as :attr:`Completion.error`, a short sentence the operator can act on, because
one bad request must not end a cell that has already measured a hundred good ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from specbench_tui.bench.figures import Span, fill_rates
from specbench_tui.bench.prompting import DEFAULT_PROMPTING, Prompting
from specbench_tui.bench.transport import SseTransport
from specbench_tui.engines.streams import (
    StreamError,
    StreamMode,
    StreamParser,
    error_text,
    stream_parser,
)
from specbench_tui.results.cells import Api
from specbench_tui.results.records import Measurement

Message = dict[str, str]

_ERROR_BODY_CHARS = 200
FLUSH_PATH = "/flush_cache"


@dataclass(frozen=True)
class Sampling:
    """A request's sampling parameters; None leaves one to the server's default.

    SGLang's native API takes them in ``sampling_params`` (the seed as ``sampling_seed``), the
    OpenAI routes at the top level of the body (vLLM reads ``top_k`` and ``seed`` there too).
    """

    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None

    def _set(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in (("top_p", self.top_p), ("top_k", self.top_k), ("seed", self.seed))
            if v is not None
        }

    def sglang(self) -> dict[str, Any]:
        out: dict[str, Any] = {"temperature": self.temperature, **self._set()}
        if "seed" in out:
            out["sampling_seed"] = out.pop("seed")
        return out

    def openai(self) -> dict[str, Any]:
        return {"temperature": self.temperature, **self._set()}


@dataclass
class Completion(Measurement):
    """What one request measured, plus its output text.

    ``text`` is returned (not only hashed) because the agentic workload builds the next turn
    from it. ``itl_s`` holds every gap between content-bearing chunks, so its length is
    ``chunks - 1`` for a request that streamed at least one chunk.
    """

    text: str = ""
    request_id: str | None = None  # the server's id (meta_info id / chunk id), for tracing
    output_ids: list[int] | None = None  # the generated token ids, where the server sent them
    # Where the request sat on the client's clock: sent (its headers on the socket) to the
    # end of its stream; a cell's measured window is built from these (bench/figures.py).
    span: Span | None = None


def _describe_http_error(status: int, body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    with contextlib.suppress(ValueError):
        text = error_text(json.loads(text))
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
    if isinstance(exc, StreamError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"[:240]


class BenchClient:
    """A streaming client bound to one server.

    ``concurrency`` sizes the connection pool so that a concurrency cell never waits on the
    pool (which would show up as false queueing delay in TTFT). ``model`` is the served model
    name an OpenAI request carries (vLLM refuses any other); ``stream_mode`` is SGLang's
    ``/generate`` stream mode when the server said which (``auto`` tells from the stream).
    """

    def __init__(
        self,
        base_url: str,
        api: Api = "sglang",
        *,
        concurrency: int = 1,
        model: str | None = None,
        prompting: Prompting = DEFAULT_PROMPTING,
        stream_mode: StreamMode = "auto",
        token_ids: bool = False,
        cache_salt: bool = False,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token_ids = token_ids  # ask an OpenAI route for token ids (vLLM return_token_ids)
        # A salt of its own per request (vLLM's cache_salt): no request reuses another's
        # cached prefix, so TTFT includes the prompt's prefill.
        self.cache_salt = cache_salt
        self.api: Api = api
        self.model = model
        self.stream_mode: StreamMode = stream_mode
        self.prompting = prompting
        # aiohttp reads no proxy variables (trust_env off): HTTP_PROXY must not swallow the
        # loopback or forwarded server.
        self._transport = SseTransport(self.base_url, connections=max(1, concurrency) + 2)

    async def __aenter__(self) -> BenchClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def flush_cache(self) -> str | None:
        """Empty the server's prefix cache (SGLang ``POST /flush_cache``, which refuses while
        requests run); None when it did, else why not, in one line."""
        try:
            status, body = await self._transport.post(FLUSH_PATH)
        except Exception as exc:
            return _describe_exception(exc, 30.0)
        if status == 200:
            return None
        return _describe_http_error(status, body)

    async def generate(
        self,
        messages: list[Message] | str,
        *,
        max_tokens: int,
        sampling: Sampling | None = None,
        timeout_s: float = 600.0,
    ) -> Completion:
        """Send one request, stream it to the end and return what it measured.

        Never raises for a server or network failure: the result carries ``error`` and
        whatever was measured before the failure. Cancellation still propagates, so the
        engine can abort a cell.
        """
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        path, body = self._body(messages, max_tokens, sampling or Sampling())
        payload = json.dumps(body, separators=(",", ":")).encode()
        out = Completion(
            started_at=time.time(),
            chat_template_sha256=self.prompting.template_sha256,
            chat_template_kwargs=self.prompting.kwargs_json,
        )
        parser = stream_parser(self.api, self.stream_mode)
        # The clock restarts when the request's headers go out (after a connection was taken
        # or opened); until then it counts from here, so a failed connect still has an e2e.
        clock = [time.perf_counter_ns()]
        try:
            async with asyncio.timeout(timeout_s):
                await self._stream(path, payload, out, parser, clock)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A server that sent [DONE] but then held the body open delivered everything.
            if not parser.done:
                out.error = _describe_exception(exc, timeout_s)
        end = parser.end_t
        if end is None:
            end = (time.perf_counter_ns() - clock[0]) * 1e-9
        out.span = Span(clock[0] * 1e-9, clock[0] * 1e-9 + end)
        try:
            parser.finish(out, end)
        except StreamError as exc:  # a count that cannot be one, or a last chunk that broke
            out.error = out.error or str(exc)
        except Exception as exc:  # whatever else the server's bytes do: this request only
            out.error = out.error or f"bad server data: {type(exc).__name__}: {exc}"[:240]
        fill_rates(out, parser.content_tokens, one_read=parser.one_read)
        out.text = parser.text
        out.request_id = parser.request_id
        out.output_ids = parser.ids
        return out

    def _body(
        self, messages: list[Message], max_tokens: int, sampling: Sampling
    ) -> tuple[str, dict[str, Any]]:
        """The route and body of one request: the rendered text for the native API and the
        OpenAI completions route, the messages for a chat route the server renders."""
        prompting = self.prompting
        if self.api == "sglang":
            params: dict[str, Any] = {"max_new_tokens": max_tokens, **sampling.sglang()}
            text = prompting.text(messages)
            return "/generate", {"text": text, "sampling_params": params, "stream": True}
        body: dict[str, Any] = {"max_tokens": max_tokens, **sampling.openai()}
        if prompting.on == "server":
            path = "/v1/chat/completions"
            body["messages"] = messages
            if prompting.kwargs:
                body["chat_template_kwargs"] = prompting.kwargs_dict
        else:
            path = "/v1/completions"
            body["prompt"] = prompting.text(messages)
            if prompting.text_prompt == "verbatim":
                body["add_special_tokens"] = False  # the template wrote them already
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        if self.model is not None:  # without it a server uses its one model (vLLM does)
            body["model"] = self.model
        if self.token_ids:
            body["return_token_ids"] = True
        if self.cache_salt:
            body["cache_salt"] = secrets.token_hex(8)
        return path, body

    async def _stream(
        self,
        path: str,
        body: bytes,
        out: Completion,
        parser: StreamParser,
        clock: list[int],
    ) -> None:
        def on_sent(t_ns: int) -> None:
            clock[0] = t_ns

        def on_payload(payload: bytes, t_ns: int, read: int) -> None:
            # Reading goes on after [DONE] to the end of the body (the server closes it right
            # away), so the connection goes back to the pool instead of being torn down.
            parser.feed(payload, (t_ns - clock[0]) * 1e-9, read)

        end = await self._transport.post_sse(path, body, on_payload, on_sent)
        if end.status >= 400:
            out.error = _describe_http_error(end.status, end.error_body)
            return
        if parser.end_t is None:
            parser.end_t = (end.end_ns - clock[0]) * 1e-9
        if not parser.done and not parser.finished:
            raise StreamError("server closed the stream early")

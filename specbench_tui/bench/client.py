"""Streaming HTTP client for any engine's API: the engine's adapter (``engines/``) builds each
request and parses its stream; this sends it and times it.

One :class:`BenchClient` (one :class:`~specbench_tui.bench.transport.SseTransport`, pooled
connections sized for the cell's concurrency) sends every request of a cell. Each request is
timed with ``time.perf_counter_ns`` from the moment its headers go to the socket (connection
set-up is the client's time, not the server's); every SSE ``data:`` payload is stamped as it
is cut out of the stream and goes, with that stamp and the number of the read that brought
it, to the engine adapter's stream parser, which decodes only what is new in it, so the
client does not slow down what it measures.

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
from specbench_tui.engines.adapter import Message, RequestSpec
from specbench_tui.engines.registry import DEFAULT_ENGINE, adapter
from specbench_tui.engines.streams import StreamError, StreamMode, StreamParser, error_text
from specbench_tui.results.cells import Api
from specbench_tui.results.records import Measurement

_ERROR_BODY_CHARS = 200
FLUSH_PATH = "/flush_cache"


@dataclass(frozen=True)
class Sampling:
    """A request's sampling parameters; None leaves one to the server's default (the
    engine's adapter puts them where its API takes them)."""

    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None


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


CONNECTION_REFUSED = "connection refused"
CLOSED_EARLY = "server closed the stream early"
_CANNOT_CONNECT = "cannot connect"


def went_away(error: str) -> bool:
    """Whether a request's error says the server went away (nothing listens, or the
    connection was cut before the answer ended), as opposed to an answer it gave (an HTTP
    error, bad data) or one it was too slow to give (a timeout)."""
    return error in (CONNECTION_REFUSED, CLOSED_EARLY) or error.startswith(_CANNOT_CONNECT)


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
            return CONNECTION_REFUSED
        if isinstance(root, socket.gaierror):
            return f"unknown host: {root.strerror or root}"
        msg = getattr(root, "strerror", None) or str(root)
        return f"{_CANNOT_CONNECT}: {msg}"[:240] if msg else _CANNOT_CONNECT
    if isinstance(
        exc,
        aiohttp.ServerDisconnectedError
        | aiohttp.ClientPayloadError
        | aiohttp.ClientOSError
        | ConnectionError,
    ):
        return CLOSED_EARLY
    if isinstance(exc, StreamError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"[:240]


class BenchClient:
    """A streaming client bound to one server.

    ``concurrency`` sizes the connection pool so that a concurrency cell never waits on the
    pool (which would show up as false queueing delay in TTFT). ``engine`` names the adapter
    that builds requests and reads streams (the plan's ``engine``); ``api`` is one of its
    APIs, by default its first. ``model`` is the served model name a chat request carries
    (some engines refuse any other); ``stream_mode`` is the stream mode of an API that has
    several, when the server said which (``auto`` tells from the stream). ``prompting``
    turns a conversation into the request's prompt (bench/prompting.py): the model's chat
    template rendered here for the text routes, or the messages for a chat route the server
    renders. ``speculative``:
    whether the server runs speculative decoding; without it a request's speculative fields
    stay null whatever its stream says (an engine may count one token per iteration for every
    request, which is no acceptance to report).
    """

    def __init__(
        self,
        base_url: str,
        api: Api | None = None,
        *,
        engine: str = DEFAULT_ENGINE,
        concurrency: int = 1,
        model: str | None = None,
        prompting: Prompting = DEFAULT_PROMPTING,
        stream_mode: StreamMode = "auto",
        cache_salt: bool = False,
        speculative: bool = True,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.engine = adapter(engine)
        # A salt of its own per request: no request reuses another's cached prefix, so TTFT
        # includes the prompt's prefill (engines whose cold cache is a salt).
        self.cache_salt = cache_salt
        self.speculative = speculative
        self.api: Api = api or self.engine.default_api
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
        """Empty the server's prefix cache (``POST /flush_cache``, on engines whose cold cache
        is a flush; an engine may refuse it while requests run); None when it did, else why not."""
        try:
            status, body = await self._transport.post(FLUSH_PATH)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
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
        path, body = self.request_body(messages, max_tokens, sampling or Sampling())
        payload = json.dumps(body, separators=(",", ":")).encode()
        out = Completion(
            started_at=time.time(),
            chat_template_sha256=self.prompting.template_sha256,
            chat_template_kwargs=self.prompting.kwargs_json,
        )
        parser = self.engine.stream_parser(self.api, self.stream_mode)
        # The clock restarts when the request's headers go out (after a connection was taken
        # or opened); until then it counts from here, so a failed connect still has an e2e.
        clock = [time.perf_counter_ns()]
        try:
            async with asyncio.timeout(timeout_s):
                await self._stream(path, payload, out, parser, clock)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a request's failure, whatever it is, is its row's error
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
        if not self.speculative:
            out.spec_verify_ct = out.spec_accepted_tokens = out.spec_draft_tokens = None
            out.spec_accept_histogram = None
            out.accept_length = None
        fill_rates(out, parser.content_tokens, one_read=parser.one_read)
        out.text = parser.text
        out.request_id = parser.request_id
        out.output_ids = parser.ids
        return out

    def request_body(
        self, messages: list[Message], max_tokens: int, sampling: Sampling
    ) -> tuple[str, dict[str, Any]]:
        """The route and body of one request, as the engine's adapter builds them: the
        rendered text for the text routes, the messages where the server renders them."""
        prompting = self.prompting
        server_renders = prompting.on == "server"
        spec = RequestSpec(
            max_tokens=max_tokens,
            prompt=None
            if server_renders
            else prompting.text(messages, bos_added=self.engine.text_prompt == "adds_bos"),
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            seed=sampling.seed,
            chat_template_kwargs=prompting.kwargs_dict if server_renders else None,
            model=self.model,
            cache_salt=secrets.token_hex(8) if self.cache_salt else None,
        )
        return self.engine.request(self.api, messages, spec)

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
            raise StreamError(CLOSED_EARLY)

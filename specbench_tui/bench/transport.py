"""The load generator's HTTP transport: POST a request, hand back each SSE ``data:`` payload
with the time it arrived.

Why aiohttp and not httpx here: on two cores, 64 streams from the AIPerf mock server, httpx's
streaming path (pure-Python h11 and line iterator) cost 46 us of CPU per token and carried 16k
tok/s; aiohttp (C HTTP parser) with the SSE framing below cost 11 us and carried 38k
(``bench/client_capacity.py`` measures it; the README has the figures). httpx stays where one
call a second does not matter: health checks.

What the transport does per event, not per token: ``bytes.find`` to cut it and one
``perf_counter_ns()`` when it is complete, handed on with the number of the read that completed
it, so that a reader can tell events that came in one read (their gaps were never on the wire)
from events that came apart. A read may end in the middle of an event; the pieces are kept in a
list and joined once the event is complete, so a 50k-token cumulative SSE line (a stream that
resends the whole text) costs one join, never a quadratic rebuild, and never meets a
line-length limit. The read buffer (``read_bufsize``) is large enough that such a line does not
pause the socket either.

SSE framing follows the spec's essentials: lines end in LF (CR LF tolerated), an event ends at
a blank line, several ``data:`` lines of one event are joined with LF, other fields
(``event:``, ``id:``, comments) are ignored. A stream that ends without the final blank line
still delivers its last event.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

OnData = Callable[[bytes, int, int], None]
"""Called with one event's ``data`` payload (bytes, without the ``data:`` prefix or the
optional space after it), the ``perf_counter_ns()`` taken as it was cut out, and the number of
the read that completed it (1, 2, ...; events of one read share it)."""
Clock = Callable[[], int]
OnSent = Callable[[int], None]
"""Called with the ``perf_counter_ns()`` at which the request's headers went to the socket:
after the connection was taken from the pool (or opened), right before the body follows."""

ERROR_BODY_BYTES = 4096
READ_BUFSIZE = 1 << 20
"""aiohttp's per-connection buffer mark (it stops reading the socket past twice this): above
the longest SSE line a 50k-token cumulative stream sends (one that resends the whole text
and every token id so far in each event: some 600 KiB), and small enough that one
connection's backlog is a few milliseconds of parsing, not a stall of every other stream's
timestamps."""


@dataclass
class StreamEnd:
    """How one streamed response ended.

    ``status`` is the HTTP status; for 400 and above ``error_body`` holds its first
    :data:`ERROR_BODY_BYTES` and no payload was handed on. ``sent_ns`` is the
    ``perf_counter_ns()`` taken just before the request was handed to aiohttp, ``end_ns`` the
    one when the body ended.
    """

    status: int
    sent_ns: int
    end_ns: int
    error_body: bytes = b""
    reads: int = 0  # reads of the body


async def _headers_sent(
    _session: aiohttp.ClientSession,
    ctx: Any,
    _params: aiohttp.TraceRequestHeadersSentParams,
) -> None:
    sent = time.perf_counter_ns()
    holder = ctx.trace_request_ctx
    holder["sent_ns"] = sent
    on_sent = holder.get("on_sent")
    if on_sent is not None:
        on_sent(sent)


class SseSplitter:
    """Cuts a byte stream into SSE events and hands each event's data to ``on_data``."""

    __slots__ = ("_clock", "_data", "_on_data", "_pending", "reads")

    def __init__(self, on_data: OnData, clock: Clock = time.perf_counter_ns) -> None:
        self._on_data = on_data
        self._clock = clock
        self._pending: list[bytes] = []  # pieces of a line that has not ended yet
        self._data: list[bytes] = []  # data lines of the event being read
        self.reads = 0

    def feed(self, chunk: bytes) -> None:
        """One read of the body."""
        self.reads += 1
        start = 0
        find = chunk.find
        while True:
            nl = find(b"\n", start)
            if nl < 0:
                if start < len(chunk):
                    self._pending.append(chunk[start:])
                return
            if self._pending:
                self._pending.append(chunk[start:nl])
                line = b"".join(self._pending)
                self._pending.clear()
            else:
                line = chunk[start:nl]
            start = nl + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                self._dispatch()
            elif line.startswith(b"data:"):
                self._data.append(line[6:] if line[5:6] == b" " else line[5:])

    def close(self) -> None:
        """End of the body: a last line without LF and an event without its blank line (it
        came in the last read)."""
        if self._pending:
            line = b"".join(self._pending).rstrip(b"\r")
            self._pending.clear()
            if line.startswith(b"data:"):
                self._data.append(line[6:] if line[5:6] == b" " else line[5:])
        self._dispatch()

    def _dispatch(self) -> None:
        data = self._data
        if not data:
            return
        payload = data[0] if len(data) == 1 else b"\n".join(data)
        data.clear()
        self._on_data(payload, self._clock(), self.reads)


class SseTransport:
    """Pooled HTTP/1.1 connections to one server, sized so a cell never waits on the pool
    (which would show up as false queueing delay in TTFT)."""

    def __init__(self, base_url: str, *, connections: int) -> None:
        self.base_url = base_url.rstrip("/")
        self._connections = max(1, connections)
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        # Opened on first use: aiohttp wants a running event loop.
        if self._session is None:
            # The request's clock starts when its headers go out, not before the connection
            # is taken: a cell's first wave opens its connections, and that set-up is the
            # client's, not the server's time to first token.
            trace = aiohttp.TraceConfig()
            trace.on_request_headers_sent.append(_headers_sent)
            self._session = aiohttp.ClientSession(
                trace_configs=[trace],
                connector=aiohttp.TCPConnector(limit=self._connections, use_dns_cache=True),
                # The caller's asyncio.timeout bounds the whole request; no per-phase timeouts.
                timeout=aiohttp.ClientTimeout(total=None),
                auto_decompress=False,
                read_bufsize=READ_BUFSIZE,
                headers={"Accept": "text/event-stream", "Accept-Encoding": "identity"},
            )
        return self._session

    async def aclose(self) -> None:
        # Taken before the await: a cancellation inside close() leaves no half-closed
        # session behind for a later use (aiohttp warns "Unclosed client session" of one).
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def post(self, path: str, body: bytes = b"") -> tuple[int, bytes]:
        """A small POST outside any measurement (a cache flush): status and body start."""
        session = self._open()
        holder: dict[str, Any] = {"sent_ns": 0, "on_sent": None}  # the trace hook's slot
        async with session.post(self.base_url + path, data=body, trace_request_ctx=holder) as resp:
            return resp.status, (await resp.content.read(ERROR_BODY_BYTES))

    async def post_sse(
        self, path: str, body: bytes, on_data: OnData, on_sent: OnSent | None = None
    ) -> StreamEnd:
        """POST a JSON body and stream the response to its end.

        ``on_sent`` hears when the request went out, before any ``on_data``. Raises what
        aiohttp raises for a connection that cannot be made or breaks
        (:class:`aiohttp.ClientError` and its kin), and whatever ``on_data`` raises; the
        connection is then dropped, never returned to the pool half-read.
        """
        session = self._open()
        perf = time.perf_counter_ns
        holder: dict[str, Any] = {"sent_ns": perf(), "on_sent": on_sent}
        async with session.post(
            self.base_url + path,  # a base URL may carry a path prefix (a server behind a proxy)
            data=body,
            headers={"Content-Type": "application/json"},
            trace_request_ctx=holder,
        ) as resp:
            if resp.status >= 400:
                raw = b""
                async for part in resp.content.iter_any():
                    raw += part
                    if len(raw) >= ERROR_BODY_BYTES:
                        break
                return StreamEnd(resp.status, holder["sent_ns"], perf(), raw[:ERROR_BODY_BYTES])
            splitter = SseSplitter(on_data, perf)
            feed = splitter.feed
            async for part in resp.content.iter_any():
                feed(part)
            end = perf()
            splitter.close()
            return StreamEnd(resp.status, holder["sent_ns"], end, reads=splitter.reads)

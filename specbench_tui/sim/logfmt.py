"""Server log lines in SGLang's format, written straight to stdout.

The campaign tails these lines (journald or a pipe) and parses them with the same regexes it
uses on a real server, so the wording, the ``[YYYY-MM-DD HH:MM:SS TPn] `` prefix and the
trailing commas matter. Every line is flushed at once: a tailing reader must see a line when
the event happens, not when a buffer fills.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ServerLog:
    """A line printer with SGLang's prefix; the stream is injectable for tests."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream or sys.stdout

    def line(self, text: str, rank: int | None = 0) -> None:
        """One timestamped line, as a scheduler rank prints it (``rank=None``: no rank tag)."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        tag = f"{stamp} TP{rank}" if rank is not None else stamp
        self.raw(f"[{tag}] {text}")

    def raw(self, text: str) -> None:
        """A line without a prefix, as uvicorn prints its own."""
        try:
            self._stream.write(text + "\n")
            self._stream.flush()
        except (BrokenPipeError, ValueError):
            # Nobody reads our log any more; the server must keep serving regardless.
            pass

    def access(self, peer: str, method: str, path: str, status: int) -> None:
        """Uvicorn's access line for one HTTP request."""
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 503: "Service Unavailable"}
        self.raw(f'INFO:     {peer} - "{method} {path} HTTP/1.1" {status} {reason.get(status, "")}')


def prefill_line(
    new_seq: int, new_token: int, cached: int, usage: float, running: int, queued: int
) -> str:
    return (
        f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_token}, "
        f"#cached-token: {cached}, token usage: {usage:.2f}, "
        f"#running-req: {running}, #queue-req: {queued}, "
    )


def decode_line(
    running: int,
    tokens: int,
    usage: float,
    accept_len: float | None,
    accept_rate: float | None,
    throughput: float,
    queued: int,
) -> str:
    spec = ""
    if accept_len is not None and accept_rate is not None:
        spec = f"accept len: {accept_len:.2f}, accept rate: {accept_rate:.2f}, "
    return (
        f"Decode batch, #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, "
        f"{spec}cuda graph: True, gen throughput (token/s): {throughput:.2f}, "
        f"#queue-req: {queued}, "
    )


def ddtree_line(
    budget: int, nodes: int, accept_len: float, draft_ms: float, verify_ms: float
) -> str:
    return (
        f"DDTree stats: budget={budget}, tree nodes={nodes}, accept_len={accept_len:.2f}, "
        f"draft_ms={draft_ms:.2f}, verify_ms={verify_ms:.2f}"
    )

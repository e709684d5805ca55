"""A server's output split into lines, in time linear in its bytes, each line at most 1 MiB.

A server can print a line of hundreds of megabytes without a newline (a tensor dumped by
mistake, a progress bar with no end of line). Joining every chunk read onto what is pending
and splitting it again costs the square of that line on the event loop that times requests
(a 50 MB line took 36 s over SSH); keeping it whole costs its size in memory. Here each byte
is looked at once: a line is kept up to ``MAX_LINE`` bytes and given out with a mark once it
passes that, and the rest of it is dropped until its end of line.
"""

from __future__ import annotations

#: Longest line kept; longer ones are cut here, on every path a server's output takes.
MAX_LINE = 1 << 20
CUT_MARK = b" [line cut at 1 MiB]"


class LineSplitter:
    """Bytes in (``feed``), whole lines out, without their end of line."""

    def __init__(self, limit: int = MAX_LINE) -> None:
        self.limit = limit
        self._parts: list[bytes] = []
        self._size = 0
        self._cut = False  # the line in progress passed the limit: it was given out already

    def feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            self._add(data[start:end], out)
            if not self._cut:
                out.append(b"".join(self._parts))
            self._parts, self._size, self._cut = [], 0, False
            start = end + 1
        self._add(data[start:], out)
        return out

    def end(self) -> bytes | None:
        """What is left after the last end of line (the stream ended), or None."""
        rest = None if self._cut or not self._size else b"".join(self._parts)
        self._parts, self._size, self._cut = [], 0, False
        return rest

    def _add(self, piece: bytes, out: list[bytes]) -> None:
        if self._cut or not piece:
            return
        room = self.limit - self._size
        if len(piece) <= room:
            self._parts.append(piece)
            self._size += len(piece)
            return
        self._parts.append(piece[:room])
        out.append(b"".join(self._parts) + CUT_MARK)
        self._parts, self._size, self._cut = [], 0, True

"""Server log lines in the simulated engine's format, written straight to stdout.

The campaign tails these lines (journald or a pipe) and parses them with the same code it
uses on a real server, so their wording (the engine adapter's ``log_format``, kept beside its
parser in ``engines/``) matters. Every line is flushed at once: a tailing reader must see a
line when the event happens, not when a buffer fills.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from specbench_tui.engines.adapter import ServerLogFormat
from specbench_tui.engines.registry import SIMULATED_ENGINE, adapter


def log_format(engine: str = SIMULATED_ENGINE) -> ServerLogFormat:
    """The log lines of ``engine``'s server (the simulator checks it has them at start)."""
    fmt = adapter(engine).log_format
    if fmt is None:
        raise ValueError(f"{adapter(engine).label} has no simulated log lines")
    return fmt


class ServerLog:
    """A line printer with the engine's prefix; the stream is injectable for tests."""

    def __init__(self, stream: TextIO | None = None, engine: str = SIMULATED_ENGINE) -> None:
        self._stream = stream or sys.stdout
        self.fmt = log_format(engine)

    def line(self, text: str, rank: int | None = 0) -> None:
        """One timestamped line, as a scheduler rank prints it (``rank=None``: no rank tag)."""
        self.raw(self.fmt.prefix(time.strftime("%Y-%m-%d %H:%M:%S"), rank) + text)

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

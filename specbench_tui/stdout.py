"""The reader at the other end of stdout: a closed pipe (``specbench-tui ... | head``) is the
reader going away, not a bug, and ends a command as it ends any Unix tool: quietly, with
status 141 (128 + SIGPIPE), no traceback and no internal-error file.

Python ignores SIGPIPE, so a write to a pipe whose reader left raises ``BrokenPipeError``. A
socket to a server that went away raises it too; that one is a real error, so the pipe is
asked whether its reader is gone (poll says POLLERR on a pipe with no reader) before an
error is read as "the reader left".
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
from typing import TextIO


def reader_gone(stream: TextIO | None = None) -> bool:
    """Whether stdout (or ``stream``) is a pipe or socket whose reader has gone away."""
    stream = sys.stdout if stream is None else stream
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    try:
        events = poller.poll(0)
    except OSError:
        return False
    return any(ev & select.POLLERR for _, ev in events)


def is_closed_pipe(exc: BaseException) -> bool:
    """``exc`` (or the one error inside a task group) is a broken pipe on stdout or stderr."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return isinstance(exc, BrokenPipeError) and (reader_gone(sys.stdout) or reader_gone(sys.stderr))


def silence() -> None:
    """Point stdout (and stderr, where its reader left too) at /dev/null, so nothing later,
    not even the interpreter's last flush, writes to a pipe nobody reads."""
    for stream in (sys.stdout, sys.stderr):
        if stream is sys.stdout or reader_gone(stream):
            with contextlib.suppress(AttributeError, OSError, ValueError):
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, stream.fileno())
                os.close(null)

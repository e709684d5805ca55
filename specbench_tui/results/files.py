"""Writing results files so that a crash never leaves a torn one, and reading the event log
so that a torn last line (a crash mid-write) is simply not there."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import signal
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from specbench_tui.results.events import Event, InvalidEvent

TMP_PREFIX = "."
TMP_SUFFIX = ".tmp"


#: Test hook: ``SPECBENCH_CRASH_AT=NAME[@K]`` kills this process with SIGKILL right after the
#: K-th (default: first) write named NAME became durable, so tests can enumerate every
#: boundary a crash can fall on (``crash_point``). ``SPECBENCH_CRASH_AT=record:FILE`` kills
#: nothing and appends the name of every boundary passed to FILE, one a line, in order: the
#: list a crash test parametrizes over, so a new boundary is tested the day it is written.
#: Unset, it costs one comparison.
CRASH_ENV = "SPECBENCH_CRASH_AT"
RECORD_PREFIX = "record:"
_setting = os.environ.get(CRASH_ENV) or ""
_record = _setting.removeprefix(RECORD_PREFIX) if _setting.startswith(RECORD_PREFIX) else ""
_want, _, _nth = ("" if _record else _setting).partition("@")
_crash_seen: Counter[str] = Counter()


def crash_point(name: str) -> None:
    """A write boundary: ``name`` says what has just become durable (``part``, ``texts``,
    ``event:cell_finished``, ``views:cells``, ...)."""
    if _record:
        _record_boundary(name)
        return
    if name != _want:
        return
    _crash_seen[name] += 1
    if _crash_seen[name] == int(_nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)


def _record_boundary(name: str) -> None:
    # One O_APPEND write per line: whole lines in order, even from a worker thread.
    fd = os.open(_record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{name}\n".encode())
    finally:
        os.close(fd)


class StorageError(OSError):
    """A results file could not be written (disk full, read-only, no permission).

    ``where`` is the path; ``recoverable`` says whether waiting can help (a full disk may
    get space back; a read-only or forbidden directory will not fix itself).
    """

    def __init__(self, where: Path, exc: OSError) -> None:
        super().__init__(exc.errno, exc.strerror or str(exc))
        self.where = where
        self.recoverable = exc.errno in (errno.ENOSPC, errno.EDQUOT)

    def __str__(self) -> str:
        return f"cannot write {self.where}: {self.strerror}"


_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
)


class NotAFile(OSError):
    """A path the tool keeps one of its files at holds something else: a link, a FIFO, a
    directory. The tool never reads or writes through it (a link would point its writes at
    another file; a FIFO would block every read), and says so in one line."""

    def __init__(self, path: Path, kind: str) -> None:
        super().__init__(errno.EINVAL, kind, str(path))
        self.path = path
        self.kind = kind

    def __str__(self) -> str:
        return (
            f"{self.path} is {self.kind}, not a file: the tool keeps only plain files under "
            "this name and will not read or write through it; move it away and run again"
        )


def own_file(path: Path) -> None:
    """Raise :class:`NotAFile` when ``path`` exists and is not a plain file (a link is not
    followed); nothing when it is one or is missing."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    for test, kind in _KINDS:
        if test(mode):
            raise NotAFile(path, kind)
    if not stat.S_ISREG(mode):
        raise NotAFile(path, "not a plain file")


def tmp_name(path: Path) -> Path:
    return path.with_name(f"{TMP_PREFIX}{path.name}{TMP_SUFFIX}")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomic(path: Path, data: bytes | memoryview) -> None:
    """Temp file, fsync, rename, fsync the directory: readers see the old file or the new
    one, never half of one. Raises StorageError."""
    tmp = tmp_name(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        _discard(tmp)
        raise StorageError(path, exc) from exc


def write_parquet_atomic(df: pl.DataFrame, path: Path) -> None:
    """As ``write_bytes_atomic``, for a parquet file. The file is encoded in memory first:
    polars reports a full disk as a ComputeError about thrift, not as the OSError it is."""
    buf = io.BytesIO()
    df.write_parquet(buf)
    write_bytes_atomic(path, buf.getbuffer())


def _discard(tmp: Path) -> None:
    with contextlib.suppress(OSError):
        tmp.unlink()


def remove_torn(directory: Path) -> list[Path]:
    """Delete temp files a crash left mid-write in ``directory`` (they were never renamed
    into place, so nothing refers to them); returns what was removed."""
    removed = []
    if not directory.is_dir():
        return removed
    for p in directory.iterdir():
        if p.name.startswith(TMP_PREFIX) and p.name.endswith(TMP_SUFFIX) and p.is_file():
            _discard(p)
            removed.append(p)
    return removed


def read_json_object(path: Path) -> dict[str, Any]:
    """A JSON object file written whole (a cell's output texts); empty when it is missing,
    unreadable or not an object, so a reader judges what is there."""
    try:
        obj = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


@dataclass(frozen=True)
class BadLine:
    """A line of the event log that is not an event: its number (from 1), its text and why."""

    number: int
    text: str
    why: str

    def to_json(self) -> dict[str, object]:
        return {"line": self.number, "why": self.why, "text": self.text}


@dataclass
class EventLog:
    """An event log as read: its events in order, and the lines that are not events."""

    events: list[Event] = field(default_factory=list)
    bad: list[BadLine] = field(default_factory=list)
    torn: bool = False  # the last line has no end of line (a write a crash cut short)

    def summary(self, path: Path) -> str:
        """One sentence naming the bad lines, for a notice or a report's note."""
        first = self.bad[0]
        more = f" and {len(self.bad) - 1} more" if len(self.bad) > 1 else ""
        return (
            f"{path.name} line {first.number}{more} could not be read as an event "
            f"({first.why}); read without {'it' if len(self.bad) == 1 else 'them'}"
        )


def read_event_log(path: Path) -> EventLog:
    """Every event of a log, in order, and every line that is not one: not JSON, not an
    object, or a known event whose fields do not have their types (``InvalidEvent``). A
    last line with no end of line (a crash mid-write) marks the log ``torn``; it is an event
    when it still parses as one."""
    log = EventLog()
    own_file(path)
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return log
    with f:
        for number, raw in enumerate(f, 1):
            text = raw.decode("utf-8", errors="replace")
            if not text.strip():
                continue
            why = ""
            cut = not raw.endswith(b"\n")
            log.torn = log.torn or cut
            try:
                obj = json.loads(text)
            except RecursionError:
                why = "nested too deeply"
            except ValueError:
                why = "cut short: no end of line" if cut else "not JSON"
            else:
                if not isinstance(obj, dict):
                    why = "not a JSON object"
                else:
                    ev = Event.from_json(obj)
                    if isinstance(ev, InvalidEvent):
                        why = f"{ev.event}: {ev.why}"
                    else:
                        log.events.append(ev)
            if why:
                log.bad.append(BadLine(number, text.rstrip("\n"), why))
    return log


def read_events(path: Path) -> list[Event]:
    """Every event of a log, in order; lines that are not events are left out (see
    ``read_event_log`` for what they were)."""
    return read_event_log(path).events


def event_line(ev: Event) -> str:
    """One event as its line of ``events.jsonl`` (and of the control socket)."""
    return json.dumps(ev.to_json(), separators=(",", ":"), ensure_ascii=False) + "\n"

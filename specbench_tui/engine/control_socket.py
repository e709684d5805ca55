"""The control endpoint every campaign serves (console or headless), and the client a detached
console uses.

A Unix socket ``control.sock`` in the results directory (mode 0600: only its owner can steer
the campaign). Newline-delimited JSON, one request per connection:
``{"op": "subscribe"}`` streams every event so far and then new ones until the campaign ends;
``{"op": "command", "action": ..., "target": ..., "by": ...}`` answers ``{"ok": .., "text": ..}``.
Closing a connection changes nothing in the campaign.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import os
import socket
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

from specbench_tui.engine.commands import CampaignControl, Command, Reply
from specbench_tui.errors import InputError
from specbench_tui.results.events import Event
from specbench_tui.results.files import event_line
from specbench_tui.results.layout import ResultsLayout

#: Longest event line a reader of the socket accepts (campaign_started of a big plan).
LINE_LIMIT = 64 * 1024 * 1024
#: Longest request a campaign reads from a client: commands are small.
REQUEST_LIMIT = 64 * 1024


class ShortPath:
    """AF_UNIX paths are limited to ~108 bytes; results directories can be deeper. Going
    through ``/proc/self/fd/N/`` of an open directory keeps the path short on Linux."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def __enter__(self) -> str:
        if len(os.fsencode(self.path)) < 100:
            return str(self.path)
        self._fd = os.open(self.path.parent, os.O_RDONLY)
        return f"/proc/self/fd/{self._fd}/{self.path.name}"

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)


class _TooLong:
    """Stands for a request line over REQUEST_LIMIT (its bytes are dropped, not kept)."""


async def request_lines(reader: asyncio.StreamReader) -> AsyncIterator[bytes | _TooLong]:
    """The request lines of a connection, each at most REQUEST_LIMIT bytes; a longer one is
    skipped to its newline and stands as one ``_TooLong`` so it still gets an answer."""
    buf = b""
    dropping = False
    while True:
        chunk = await reader.read(65536)
        if not chunk:
            if buf and not dropping:
                yield buf
            return
        buf += chunk
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                if len(buf) > REQUEST_LIMIT:
                    if not dropping:
                        dropping = True
                        yield _TooLong()
                    buf = b""
                break
            line, buf = buf[:nl], buf[nl + 1 :]
            if dropping:
                dropping = False
                continue
            if len(line) > REQUEST_LIMIT:
                yield _TooLong()
            elif line.strip():
                yield line


def _reply(writer: asyncio.StreamWriter, ok: bool, text: str) -> None:
    writer.write(json.dumps({"ok": ok, "text": text}).encode() + b"\n")


def parse_request(line: bytes | _TooLong) -> dict[str, Any]:
    """One request as an object; raises ValueError saying what is wrong with it."""
    if isinstance(line, _TooLong):
        raise ValueError(f"request longer than {REQUEST_LIMIT // 1024} KiB")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("request is not UTF-8 text") from None
    try:
        req = json.loads(text)
    except RecursionError:
        raise ValueError("request is nested too deeply") from None
    except ValueError as exc:
        raise ValueError(f"request is not JSON ({exc})") from None
    if not isinstance(req, dict):
        raise ValueError('a request is a JSON object, e.g. {"op": "subscribe"}')
    return req


async def _serve_one(
    campaign: CampaignControl, line: bytes | _TooLong, writer: asyncio.StreamWriter
) -> bool:
    """Answer one request; False when the connection is done (a subscription ended)."""
    try:
        req = parse_request(line)
    except ValueError as exc:
        _reply(writer, False, str(exc))
        await writer.drain()
        return True
    op = req.get("op")
    if op == "subscribe":
        async for ev in campaign.subscribe():
            writer.write(event_line(ev).encode())
            await writer.drain()
        return False
    if op == "command":
        try:
            cmd = Command.from_json(req)
        except ValueError as exc:
            reply = Reply(False, str(exc))
        else:
            reply = await campaign.send(cmd)
        _reply(writer, reply.ok, reply.text)
    elif op == "ping":
        _reply(writer, True, f"pid {os.getpid()}")
    else:
        _reply(writer, False, f"unknown op {op!r}; known: subscribe, command, ping")
    await writer.drain()
    return True


def _listener_pid(path: Path) -> int | None:
    """The pid of the process listening on ``path`` (SO_PEERCRED), or None when none does."""
    with ShortPath(path) as p, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(p)
            cred = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        except OSError:
            return None
        return struct.unpack("3i", cred)[0]


def remove_stale(path: Path, *, ours: bool = False) -> bool:
    """Take away a control socket no process answers on (one that died); with ``ours``, also
    this process's own, still listening though its loop is gone (a run ending in an internal
    error, whose close path was never reached). False when another process answers."""
    if not (path.exists() or path.is_symlink()):
        return True
    pid = _listener_pid(path)
    if pid is not None and not (ours and pid == os.getpid()):
        return False
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return True


async def serve_control(campaign: CampaignControl, path: Path) -> asyncio.AbstractServer:
    if not remove_stale(path):
        raise InputError(f"{path}: another campaign answers on this control socket")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async for line in request_lines(reader):
                if not await _serve_one(campaign, line, writer):
                    break
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):  # a peer gone, a loop closing
                writer.close()

    old = os.umask(0o177)  # the socket is created 0600
    try:
        with ShortPath(path) as p:
            server = await asyncio.start_unix_server(handle, path=p)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    return server


class AttachedControl(CampaignControl):
    """A running campaign seen through its control socket."""

    detached: ClassVar[bool] = True  # closing a console on it leaves the campaign running

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def results_root(self) -> Path:
        return self.path.parent

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        with ShortPath(self.path) as p:
            return await asyncio.open_unix_connection(p, limit=LINE_LIMIT)

    async def subscribe(self) -> AsyncIterator[Event]:
        reader, writer = await self._open()
        try:
            writer.write(b'{"op": "subscribe"}\n')
            await writer.drain()
            while line := await reader.readline():
                try:
                    yield Event.from_json(json.loads(line))
                except (json.JSONDecodeError, TypeError):
                    continue
        finally:
            writer.close()

    async def send(self, command: Command) -> Reply:
        try:
            reader, writer = await self._open()
        except OSError as exc:
            return Reply(
                False, f"the campaign is not answering ({exc.strerror or exc}); it may have ended"
            )
        try:
            writer.write(json.dumps({"op": "command", **command.to_json()}).encode() + b"\n")
            await writer.drain()
            line = await reader.readline()
            obj: dict[str, Any] = json.loads(line) if line else {}
            return Reply(bool(obj.get("ok")), str(obj.get("text", "no answer")))
        finally:
            writer.close()


def _lock_owner(layout: ResultsLayout) -> str | None:
    """The pid a live campaign wrote into the directory's lock, None when no process holds it."""
    try:
        fd = os.open(layout.lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        with contextlib.suppress(OSError):
            return layout.lock.read_text().strip() or "?"
        return "?"
    finally:
        os.close(fd)
    return None


def attach_control(results_dir: Path) -> CampaignControl:
    """The campaign in ``results_dir``: its control socket while a process runs it (any
    campaign, console or headless, serves one), else its log opened read-only. Says clearly
    what is wrong when there is nothing to open."""
    from specbench_tui.engine.replay import ReplayControl

    layout = ResultsLayout(Path(results_dir))
    if not layout.root.is_dir():
        raise InputError(f"{layout.root}: no such results directory")
    sock = layout.control_socket
    if not sock.exists():
        if not layout.events.exists():
            raise InputError(f"{layout.root}: no campaign here (no control.sock, no events.jsonl)")
        owner = _lock_owner(layout)
        if owner is not None:
            raise InputError(
                f"{layout.root}: the campaign here (pid {owner}) is starting and its control "
                "socket is not up yet; try again in a moment"
            )
        return ReplayControl(layout, "the campaign has ended: opened read-only")
    with ShortPath(sock) as p, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(p)
        except OSError as exc:
            if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
                if not layout.events.exists():
                    raise InputError(
                        f"{sock}: stale control socket and no events.jsonl beside it"
                    ) from None
                return ReplayControl(
                    layout,
                    "the campaign's process is gone without ending it (interrupted): opened "
                    "read-only; running the plan again resumes it",
                )
            raise InputError(f"{sock}: cannot connect: {exc.strerror or exc}") from None
    return AttachedControl(sock)

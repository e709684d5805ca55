"""A server run as a child process of the campaign (local and simulated hosts).

The server gets its own session (so its session and process group hold the engine's TP
workers and engine core, which outlive a killed parent and keep GPU memory otherwise), on
record in the results directory from the moment it starts (``server_records``), its output
goes line by line to ``logs/<group>.log`` and to the engine, and stopping it always ends with
every process of its session gone and its port free, or an error that names what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import errno
import functools
import os
import signal
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from specbench_tui.hosts.lines import LineSplitter
from specbench_tui.hosts.server_records import (
    ProcStat,
    ServerRecord,
    describe_processes,
    drop_record,
    new_record,
    write_record,
)
from specbench_tui.hosts.service import (
    LineCallback,
    Service,
    ServiceError,
    describe_stop,
)
from specbench_tui.results.cells import ServiceGroup

_CHUNK = 65536


def port_in_use(port: int, host: str = "") -> bool:
    """True when something listens on (or holds a bound socket on) ``port``.

    Binding is the only check that matches what the server will do. SO_REUSEADDR makes
    sockets of closed connections (TIME_WAIT) not count, as they do not stop a new listener.
    The wildcard address also catches a listener bound to 127.0.0.1 only.
    """
    for family, addr in ((socket.AF_INET, host or "0.0.0.0"), (socket.AF_INET6, host or "::")):
        if family == socket.AF_INET6 and (host or not socket.has_ipv6):
            continue
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((addr, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return True
            if e.errno == errno.EADDRNOTAVAIL:
                continue  # no IPv6 on this machine
            raise
        finally:
            sock.close()
    return False


@dataclass(frozen=True)
class Listener:
    """A socket listening on a port of this machine's network namespace: its owner's uid
    and the processes holding it (none visible: another user's, to a user who is not root)."""

    inode: str
    uid: int
    pids: tuple[int, ...]

    def describe(self) -> str:
        if not self.pids:
            return f"a process of uid {self.uid}"
        return ", ".join(f"pid {p}: {process_name(p)}" for p in self.pids)


def listeners(port: int) -> list[Listener]:
    """Every socket listening on ``port`` (Linux), from /proc/net/tcp{,6}, with the
    processes whose file descriptors hold it."""
    found: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f, None)
                for row in f:
                    parts = row.split()
                    if len(parts) < 10:
                        continue
                    local, state, uid, inode = parts[1], parts[3], parts[7], parts[9]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                        found[inode] = int(uid)
        except OSError:
            continue
    if not found:
        return []
    targets = {f"socket:[{i}]": i for i in found}
    holders: dict[str, set[int]] = {i: set() for i in found}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            for fd in os.scandir(f"/proc/{entry.name}/fd"):
                try:
                    inode = targets.get(os.readlink(fd.path))
                except OSError:
                    continue
                if inode is not None:
                    holders[inode].add(int(entry.name))
        except OSError:
            continue
    return [Listener(i, uid, tuple(sorted(holders[i]))) for i, uid in found.items()]


def port_holder(port: int) -> tuple[int, str] | None:
    """Best effort (Linux, own or permitted processes): the pid and name listening on ``port``;
    None when it cannot tell (another user's process)."""
    for sock in listeners(port):
        if sock.pids:
            return sock.pids[0], process_name(sock.pids[0])
    return None


def process_name(pid: int) -> str:
    """``comm`` plus the command line when readable: "python3 (python -m <engine>.launch_server
    ...)" tells the operator which server it is, "python3" alone does not."""
    name = "?"
    with contextlib.suppress(OSError):
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    with contextlib.suppress(OSError):
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        cmd = " ".join(raw.replace(b"\0", b" ").decode(errors="replace").split())
        if cmd:
            return f"{name} ({cmd[:120]}{'...' if len(cmd) > 120 else ''})"
    return name


def describe_port_holder(port: int) -> str:
    holder = port_holder(port)
    if holder is None:
        return "another process"
    return f"pid {holder[0]}: {holder[1]}"


class ProcessService(Service):
    """The group's command as a local child process in its own process group.

    ``extra_env`` (e.g. the simulator's state directory) is added after the group's own env.
    ``records`` is the results directory's ``servers/``: where the server is on record
    while anything of it may run (None: nowhere, for a server no campaign owns).
    """

    def __init__(
        self,
        group: ServiceGroup,
        log_path: str | os.PathLike[str],
        on_line: LineCallback | None = None,
        *,
        extra_env: dict[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        port_free_timeout_s: float = 30.0,
        base_url: str | None = None,
        records: Path | None = None,
    ) -> None:
        super().__init__(group, on_line, base_url=base_url)
        self.records = records
        self.record: ServerRecord | None = None
        self._record_path: Path | None = None
        self.log_path = Path(log_path)
        self.extra_env = dict(extra_env or {})
        self.cwd = cwd
        self.port_free_timeout_s = port_free_timeout_s
        self._proc: asyncio.subprocess.Process | None = None
        self._pgid: int | None = None
        self._reader: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    @property
    def exit_code(self) -> int | None:
        return self._proc.returncode if self._proc else None

    async def start(self) -> None:
        if self.alive():
            raise ServiceError(f"{self.group.id}: already running (pid {self.pid})")
        port = self.group.port
        if port_in_use(port):
            raise ServiceError(
                f"{self.group.id}: port {port} already in use by {describe_port_holder(port)};"
                " stop it or change the plan's port"
            )
        if not self.group.command:
            raise ServiceError(f"{self.group.id}: the service group has no command")
        self._reset_for_start()
        env = dict(os.environ)
        env.update(dict(self.group.env))
        env.update(self.extra_env)
        env.setdefault("PYTHONUNBUFFERED", "1")  # a Python server's lines arrive as printed
        self._open_log()
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        self._write_log(f"----- {stamp} starting {self.group.id}: {' '.join(self.group.command)}")
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self.group.command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=functools.partial(_die_with_parent, os.getpid()),
            )
        except OSError as e:
            self._close_log()
            raise ServiceError(
                f"{self.group.id}: cannot run {self.group.command[0]!r}: {e.strerror or e}"
            ) from e
        self._pgid = self._proc.pid  # start_new_session: the leader's pid is the group id
        self.record = new_record(
            self.group.host, self.group.id, self._proc.pid, port, list(self.group.command)
        )
        if self.records is not None:
            try:
                self._record_path = write_record(self.records, self.record)
            except OSError as e:  # a server nobody could find after a crash: not started
                await self._kill_group(signal.SIGKILL)
                await self._proc.wait()
                self._close_log()
                raise ServiceError(
                    f"{self.group.id}: cannot put the server on record in {self.records}: "
                    f"{e.strerror or e}; stopped it"
                ) from e
        assert self._proc.stdout is not None
        self._reader = asyncio.create_task(self._read_output(self._proc.stdout))

    async def wait_exit(self) -> int | None:
        if self._proc is None:
            return None
        code = await self._proc.wait()
        # The output may still be in the pipe; wait for the reader to reach EOF, but not
        # forever: a surviving TP worker of the same group keeps the pipe open.
        if self._reader is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._reader), timeout=1.0)
        return code

    async def wait_ready(self, timeout_s: float | None = None) -> float:
        """As the base, then the proof that what answers on the port is this server (a
        server that died on EADDRINUSE would otherwise pass its check against whoever holds
        the port). A failed start-up also kills what the server left behind (TP workers of a
        dead parent would keep their GPU memory)."""
        try:
            ready = await super().wait_ready(timeout_s)
            self.prove_own_port()
            return ready
        except ServiceError:
            if not self.alive():
                await self._kill_group(signal.SIGKILL)
            raise

    def prove_own_port(self) -> None:
        """Raise ServiceError, naming the holder, unless every socket listening on the
        group's port belongs to a process of this server's session."""
        port = self.group.port
        mine = {p.pid for p in self._members()}
        for sock in listeners(port):
            if not set(sock.pids) & mine:
                raise ServiceError(
                    f"{self.group.id}: port {port} answers for another process, not this "
                    f"server: {sock.describe()}; not measured",
                    self.log_tail(),
                )

    async def stop(self, grace_s: float = 30.0) -> None:
        proc = self._proc
        if proc is not None:
            sent: list[str] = []
            if proc.returncode is None or self._group_alive():
                self._write_log(f"----- stopping {self.group.id} (SIGTERM, grace {grace_s:g}s)")
                sent.append("SIGTERM")
                await self._kill_group(signal.SIGTERM)
                if not await self._ended(proc, grace_s):
                    self._write_log(f"----- {self.group.id} ignored SIGTERM; sending SIGKILL")
                    sent.append("SIGKILL")
                    await self._kill_group(signal.SIGKILL)
                    # SIGKILL is delivered, not instant: an orphaned worker of a reaped leader
                    # takes a moment to end on a loaded machine, so the group is waited for too.
                    await self._ended(proc, 10.0)
            if self._reader is not None:
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(self._reader, timeout=2.0)
                if not self._reader.done():
                    self._reader.cancel()
            self._write_log(f"----- {self.group.id} {describe_stop(proc.returncode, sent)}")
        self._close_log()
        if proc is None:  # never started: the port is not ours to wait for
            return
        left = self._members()
        if left:
            raise ServiceError(
                f"{self.group.id}: still running after SIGKILL: {describe_processes(left)}",
                self.log_tail(),
            )
        drop_record(self._record_path)
        self._record_path = None
        await self._wait_port_free()

    async def released(self) -> bool:
        return not self.alive() and not self._group_alive() and not port_in_use(self.group.port)

    async def _wait_port_free(self) -> None:
        port = self.group.port
        deadline = time.monotonic() + self.port_free_timeout_s
        while port_in_use(port):
            if time.monotonic() >= deadline:
                raise ServiceError(
                    f"{self.group.id}: port {port} still in use after the server stopped, by "
                    f"{describe_port_holder(port)}",
                    self.log_tail(),
                )
            await asyncio.sleep(0.1)

    async def _ended(self, proc: asyncio.subprocess.Process, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the leader and every process of its group to end
        (workers can outlive the leader); whether they all did."""
        deadline = time.monotonic() + timeout_s
        while proc.returncode is None or self._group_alive():
            if time.monotonic() >= deadline:
                return False
            if proc.returncode is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(proc.wait()), timeout=0.05)
            else:
                await asyncio.sleep(0.05)  # the leader is gone, its workers are not
        return True

    def _members(self) -> list[ProcStat]:
        """The live processes of the server's session and process group (its workers and
        engine core outlive the parent); an unreaped leader is not one."""
        if self.record is None:
            return []
        return [p for p in self.record.members() if p.pid != self.pid or self.alive()]

    def _group_alive(self) -> bool:
        """Whether any process of the server is left (workers can outlive the parent)."""
        return bool(self._members())

    async def _kill_group(self, sig: signal.Signals) -> None:
        if self._pgid is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._pgid, sig)
        for p in self._members():  # one that left the process group, not the session
            if p.pgid != self._pgid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(p.pid, sig)
        await asyncio.sleep(0)

    async def _read_output(self, stream: asyncio.StreamReader) -> None:
        """Split output into lines; a bare CR (progress bars) keeps only what a terminal
        would show, the last state, instead of one line per redraw."""
        lines = LineSplitter()
        while True:
            chunk = await stream.read(_CHUNK)
            if not chunk:
                break
            for raw in lines.feed(chunk):
                self._handle_raw(raw)
        rest = lines.end()
        if rest is not None:
            self._handle_raw(rest)


try:  # loaded here, not in the forked child, where only async-signal-safe work belongs
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
except OSError:
    _LIBC = None


def _die_with_parent(parent: int) -> None:
    """In the child: be killed if the campaign process dies (even by SIGKILL), so a crashed
    campaign never leaves a server holding the port and GPUs its resume needs. A parent that
    died between the fork and the prctl sends nothing: then the child ends itself."""
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)

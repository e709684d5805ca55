"""The SSH transport to a plan host: one kept-alive connection, reconnected when it drops.

A campaign runs for hours over one connection; a dropped link (a laptop on Wi-Fi, a host
reboot) must not end it. asyncssh neither sends keepalives nor reconnects by itself, so
``SshConnection`` sets a keepalive (a dead link is noticed in about a minute instead of at
the next TCP timeout) and reconnects with a backoff on the next use. The user's OpenSSH
setup applies as it does for ``ssh``: ``~/.ssh/config`` resolves aliases, users, ports and
keys, and ``~/.ssh/known_hosts`` decides which host keys are trusted. An unknown host key is
refused, never accepted silently: the operator checks it once with ``ssh`` themselves.

Errors: ``SshConnectError`` when the host cannot be reached or refuses us for a reason the
user must fix (host key, authentication, name, port). It is both a ``ServiceError`` (so the
engine reports its ``reason`` like any other failed start) and an ``InputError`` (so a
preflight that lets it escape ends the program with one line, exit status 2). Other
transport failures mid-campaign are ``SshError`` (a ``ServiceError``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shlex
import socket
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from specbench_tui.errors import InputError
from specbench_tui.hosts.service import ServiceError, format_duration
from specbench_tui.hosts.telemetry import AgentProcess, AgentRunner, agent_source

log = logging.getLogger(__name__)

# A dead link is declared after KEEPALIVE_INTERVAL_S * KEEPALIVE_COUNT_MAX without an answer.
KEEPALIVE_INTERVAL_S = 15.0
KEEPALIVE_COUNT_MAX = 4
RECONNECT_BACKOFF_S: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 30.0)

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SshError(ServiceError):
    """The SSH transport failed (the connection dropped and could not be re-established,
    a command timed out); ``reason`` says which host and what to do."""


class SshConnectError(SshError, InputError):
    """The host cannot be connected to at all for a reason the user must fix."""


@dataclass(frozen=True)
class Destination:
    """A plan's ``ssh`` value split the way OpenSSH reads it: ``[user@]host[:port]``.

    ``host`` may be an alias from ``~/.ssh/config``; user and port left as None let the
    config (or the defaults: the local user, port 22) decide.
    """

    host: str
    user: str | None = None
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> Destination:
        """Parse ``alias``, ``user@host``, ``user@host:port``, ``[v6addr]:port``."""
        rest = text.strip()
        user: str | None = None
        if "@" in rest:
            user, rest = rest.rsplit("@", 1)
            user = user or None
        port: int | None = None
        if rest.startswith("["):
            host, _, tail = rest[1:].partition("]")
            if tail.startswith(":") and tail[1:].isdigit():
                port = int(tail[1:])
        elif rest.count(":") == 1:
            host, _, p = rest.partition(":")
            if not p.isdigit():
                raise InputError(f"ssh destination {text!r}: port {p!r} is not a number")
            port = int(p)
        else:
            host = rest
        if not host:
            raise InputError(f"ssh destination {text!r} names no host")
        if port is not None and not 0 < port < 65536:
            raise InputError(f"ssh destination {text!r}: port {port} is out of range")
        return cls(host=host, user=user, port=port)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return (
            (f"{self.user}@" if self.user else "") + host + (f":{self.port}" if self.port else "")
        )

    def ssh_command(self) -> str:
        """The ``ssh`` command a user would type to reach it (for messages)."""
        host = (f"{self.user}@" if self.user else "") + self.host
        return f"ssh -p {self.port} {host}" if self.port else f"ssh {host}"


@dataclass(frozen=True)
class CommandResult:
    """A finished remote command. ``exit_status`` is None when it was killed by a signal."""

    exit_status: int | None
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


def env_prefix(env: Mapping[str, str]) -> str:
    """``env K=V ...`` for a remote command line.

    sshd only accepts the variables its AcceptEnv lists (usually LANG and LC_*), so an
    environment is passed in the command, quoted, instead of through the SSH protocol.
    """
    if not env:
        return ""
    for key in env:
        if not _ENV_NAME.match(key):
            raise ValueError(f"invalid environment variable name {key!r}")
    return "env " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + " "


def quote_command(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def until_channel_closed(line: str) -> str:
    """Wrap a never-ending command (``tail -F``, ``journalctl -f``) so that it ends when our
    channel closes or the connection drops.

    Without a pty, sshd sends no signal when a channel closes, and a follower only notices
    at its next write, which may be never: each reconnect would leave one behind on the
    host. The wrapper waits for EOF on stdin (the channel closing) and kills the follower.
    """
    # ``set -m`` puts the follower in a process group of its own, so the kill reaches all
    # of it (a compound command forks); an asynchronous list's stdin would be /dev/null,
    # hence the channel kept on fd 3 for the watcher.
    watcher = "(cat <&3 >/dev/null; kill -TERM -$p 2>/dev/null) >/dev/null 2>&1 &"
    return f"exec 3<&0; set -m; {{ {line} ; }} </dev/null & p=$!; {watcher} wait $p"


class SshConnection:
    """A connection to one destination, opened on first use and reopened after a drop.

    ``config``, ``known_hosts`` and ``client_keys`` default to the user's OpenSSH files;
    tests point them at files of their own. ``connect_timeout_s`` bounds one attempt;
    ``reconnect_backoff_s`` are the waits between attempts after a drop (the first connect
    is tried once: a wrong host name or key will not fix itself).
    """

    def __init__(
        self,
        destination: str,
        *,
        config: str | os.PathLike[str] | None = None,
        known_hosts: str | os.PathLike[str] | None = None,
        client_keys: Sequence[str | os.PathLike[str]] | None = None,
        use_agent: bool = True,
        connect_timeout_s: float = 15.0,
        keepalive_interval_s: float = KEEPALIVE_INTERVAL_S,
        keepalive_count_max: int = KEEPALIVE_COUNT_MAX,
        reconnect_backoff_s: Sequence[float] = RECONNECT_BACKOFF_S,
    ) -> None:
        self.destination = Destination.parse(destination)
        self.config = Path(config).expanduser() if config is not None else None
        self.known_hosts = Path(known_hosts).expanduser() if known_hosts is not None else None
        self.client_keys = [str(Path(k).expanduser()) for k in client_keys or ()] or None
        self.use_agent = use_agent
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_interval_s = keepalive_interval_s
        self.keepalive_count_max = keepalive_count_max
        self.reconnect_backoff_s = tuple(reconnect_backoff_s) or (1.0,)
        self.reconnects = 0
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()
        self._ever_connected = False
        self._closed = False

    def __str__(self) -> str:
        return str(self.destination)

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    # --- connecting ------------------------------------------------------------------------

    async def connection(self) -> asyncssh.SSHClientConnection:
        """The live connection, (re)connecting first when there is none.

        The first connection is tried once and a failure raises ``SshConnectError``. After
        a drop, attempts follow ``reconnect_backoff_s``; when all fail, ``SshError``.
        """
        if self._closed:
            raise SshError(f"{self.destination}: the SSH connection was closed")
        if self.connected:
            assert self._conn is not None
            return self._conn
        async with self._lock:
            if self.connected:
                assert self._conn is not None
                return self._conn
            if not self._ever_connected:
                self._conn = await self._connect_once()
                self._ever_connected = True
                return self._conn
            last: Exception | None = None
            for delay in (0.0, *self.reconnect_backoff_s):
                if delay:
                    await asyncio.sleep(delay)
                try:
                    self._conn = await self._connect_once()
                except SshConnectError as e:
                    last = e
                    log.info("%s: reconnect failed: %s", self.destination, e)
                    continue
                self.reconnects += 1
                log.info("%s: reconnected", self.destination)
                return self._conn
            raise SshError(
                f"{self.destination}: connection lost and {len(self.reconnect_backoff_s) + 1} "
                f"reconnect attempts failed; last: {last}"
            )

    async def _connect_once(self) -> asyncssh.SSHClientConnection:
        d = self.destination
        kwargs: dict[str, object] = {
            "keepalive_interval": self.keepalive_interval_s,
            "keepalive_count_max": self.keepalive_count_max,
            "connect_timeout": self.connect_timeout_s,
        }
        if d.user:
            kwargs["username"] = d.user
        if d.port:
            kwargs["port"] = d.port
        if self.config is not None:
            kwargs["config"] = [str(self.config)]
        if self.known_hosts is not None:
            kwargs["known_hosts"] = str(self.known_hosts)
        if self.client_keys is not None:
            kwargs["client_keys"] = self.client_keys
        if not self.use_agent:
            kwargs["agent_path"] = None
        try:
            return await asyncssh.connect(d.host, **kwargs)  # type: ignore[arg-type]
        except asyncssh.HostKeyNotVerifiable as e:
            kh = str(self.known_hosts) if self.known_hosts is not None else "~/.ssh/known_hosts"
            raise SshConnectError(
                f"host key of {d} is not in {kh}; connect once with `{d.ssh_command()}` "
                "to check and accept it"
            ) from e
        except asyncssh.PermissionDenied as e:
            raise SshConnectError(
                f"{d}: SSH authentication failed ({e.reason}); check that `{d.ssh_command()}` "
                "logs in without a password (key in ~/.ssh/config or the ssh agent)"
            ) from e
        except socket.gaierror as e:
            raise SshConnectError(
                f"{d}: cannot resolve host name {d.host!r} ({e.strerror}); check the plan's "
                "ssh value or the Host entry in ~/.ssh/config"
            ) from e
        except (TimeoutError, asyncssh.TimeoutError) as e:
            raise SshConnectError(
                f"{d}: no SSH answer within {format_duration(self.connect_timeout_s)}; "
                f"is the host up and reachable (`{d.ssh_command()}`)?"
            ) from e
        except ConnectionRefusedError as e:
            raise SshConnectError(
                f"{d}: connection refused (no SSH server on port {d.port or 'from config/22'}); "
                f"check the port and that sshd runs (`{d.ssh_command()}`)"
            ) from e
        except OSError as e:
            raise SshConnectError(
                f"{d}: cannot connect: {e.strerror or e}; check with `{d.ssh_command()}`"
            ) from e
        except asyncssh.Error as e:
            raise SshConnectError(f"{d}: SSH connection failed: {e.reason}") from e
        except ValueError as e:  # a bad ~/.ssh/config or key file
            raise SshConnectError(f"{d}: SSH setup error: {e}") from e

    async def close(self) -> None:
        """Close for good (later calls raise)."""
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with contextlib.suppress(Exception):
                await conn.wait_closed()

    def drop(self) -> None:
        """Abort the current connection as a network failure would (the next use
        reconnects); for tests and for a caller that knows the link is dead."""
        if self._conn is not None:
            self._conn.abort()

    # --- commands ------------------------------------------------------------------------

    async def run(
        self,
        command: str | Sequence[str],
        *,
        timeout_s: float | None = 60.0,
        input: str | bytes | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = False,
    ) -> CommandResult:
        """Run a command to its end; returns (exit status, stdout, stderr).

        ``command`` is a shell command line or an argv list (quoted here). One retry after
        a dropped connection, since commands used here are idempotent checks and queries.
        ``check`` raises ``SshError`` with stderr's last line on a non-zero status.
        """
        line = command if isinstance(command, str) else quote_command(command)
        line = env_prefix(env or {}) + line if env else line
        for attempt in (1, 2):
            conn = await self.connection()
            try:
                res = await asyncio.wait_for(
                    conn.run(line, input=input, check=False, encoding="utf-8", errors="replace"),
                    timeout=timeout_s,
                )
            except TimeoutError as e:
                raise SshError(
                    f"{self.destination}: `{_short(line)}` did not finish within "
                    f"{format_duration(timeout_s or 0)}"
                ) from e
            except (asyncssh.ConnectionLost, asyncssh.DisconnectError, ConnectionError) as e:
                if attempt == 2:
                    raise SshError(f"{self.destination}: connection lost running a command") from e
                continue
            except asyncssh.ChannelOpenError as e:
                if attempt == 2 or self.connected:
                    raise SshError(f"{self.destination}: cannot open a session: {e.reason}") from e
                continue
            result = CommandResult(res.exit_status, _text(res.stdout), _text(res.stderr))
            if check and not result.ok:
                err = result.stderr.strip().splitlines()
                raise SshError(
                    f"{self.destination}: `{_short(line)}` failed with status "
                    f"{result.exit_status}" + (f": {err[-1]}" if err else "")
                )
            return result
        raise AssertionError("unreachable")

    async def start_process(
        self, command: str | Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> asyncssh.SSHClientProcess[bytes]:
        """Start a long-running command with binary stdin/stdout/stderr pipes."""
        line = command if isinstance(command, str) else quote_command(command)
        line = env_prefix(env or {}) + line if env else line
        conn = await self.connection()
        try:
            return await conn.create_process(line, encoding=None)
        except (asyncssh.ConnectionLost, asyncssh.DisconnectError, ConnectionError):
            conn = await self.connection()
            return await conn.create_process(line, encoding=None)

    async def stream_lines(
        self, command: str | Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> AsyncIterator[str]:
        """Lines a long-running command prints (without newline) until it ends.

        The remote command is closed when the caller stops iterating. A drop of the
        connection ends the iteration; the caller decides whether to resume (log tails
        resume from the offset they reached, so nothing is read twice).
        """
        line = command if isinstance(command, str) else quote_command(command)
        line = env_prefix(env or {}) + line if env else line
        proc = await self.start_process(until_channel_closed(line))
        try:
            buf = b""
            while True:
                try:
                    chunk = await proc.stdout.read(65536)
                except (asyncssh.ConnectionLost, asyncssh.DisconnectError, ConnectionError):
                    break
                if not chunk:
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for raw in lines:
                    yield raw.decode("utf-8", errors="replace").rstrip("\r")
            if buf:
                yield buf.decode("utf-8", errors="replace")
        finally:
            proc.close()

    async def forward_local_port(
        self, remote_port: int, *, remote_host: str = "127.0.0.1", local_port: int = 0
    ) -> asyncssh.SSHListener:
        """Listen on 127.0.0.1 here and tunnel each connection to ``remote_host:remote_port``
        as seen from the host, so a server bound to the host's loopback is reachable here.

        ``local_port`` 0 picks a free port: read it with ``.get_port()``. A forward does
        not survive a reconnect; ``PortForward`` re-creates it on the same local port.
        """
        conn = await self.connection()
        try:
            return await conn.forward_local_port("127.0.0.1", local_port, remote_host, remote_port)
        except OSError as e:
            raise SshError(
                f"{self.destination}: cannot listen on 127.0.0.1:{local_port} for the forward "
                f"to port {remote_port}: {e.strerror or e}"
            ) from e


class PortForward:
    """A local port forward that outlives reconnects: the same local port, re-created on
    the new connection, so a ``base_url`` handed out once stays valid for the campaign."""

    def __init__(self, ssh: SshConnection, remote_port: int, remote_host: str = "127.0.0.1"):
        self.ssh = ssh
        self.remote_port = remote_port
        self.remote_host = remote_host
        self.local_port: int | None = None
        self._listener: asyncssh.SSHListener | None = None
        self._conn: asyncssh.SSHClientConnection | None = None
        self._watch: asyncio.Task[None] | None = None

    async def open(self) -> int:
        """Open (or re-open) the forward; returns the local port."""
        await self._listen()
        if self._watch is None or self._watch.done():
            self._watch = asyncio.create_task(self._keep())
        assert self.local_port is not None
        return self.local_port

    async def _listen(self) -> None:
        listener = await self.ssh.forward_local_port(
            self.remote_port, remote_host=self.remote_host, local_port=self.local_port or 0
        )
        self._listener = listener
        self._conn = self.ssh._conn
        self.local_port = listener.get_port()

    async def _keep(self) -> None:
        """Re-create the forward after the connection it lived on closed."""
        while True:
            conn = self._conn
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.wait_closed()
            await asyncio.sleep(0.2)
            try:
                await self._listen()
            except SshError as e:
                log.warning("port forward to %s: %s", self.remote_port, e)
                await asyncio.sleep(2.0)

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        if self._listener is not None:
            self._listener.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._listener.wait_closed(), timeout=2.0)
            self._listener = None


# --- telemetry over SSH ----------------------------------------------------------------------


class _SshAgentProcess(AgentProcess):
    def __init__(self, proc: asyncssh.SSHClientProcess[bytes]) -> None:
        self._proc = proc
        self._stderr = b""
        self._stderr_task = asyncio.create_task(self._collect_stderr())

    async def _collect_stderr(self) -> None:
        with contextlib.suppress(asyncssh.Error, ConnectionError):
            while chunk := await self._proc.stderr.read(8192):
                self._stderr = (self._stderr + chunk)[-4000:]

    async def lines(self) -> AsyncIterator[str]:
        buf = b""
        while True:
            try:
                chunk = await self._proc.stdout.read(65536)
            except (asyncssh.Error, ConnectionError):
                return
            if not chunk:
                if buf:
                    yield buf.decode("utf-8", errors="replace")
                return
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                yield raw.decode("utf-8", errors="replace").rstrip("\r")

    async def wait(self) -> int | None:
        with contextlib.suppress(asyncssh.Error, ConnectionError):
            await self._proc.wait_closed()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stderr_task, timeout=1.0)
        return self._proc.exit_status

    async def terminate(self) -> None:
        # Closing the channel ends the agent: it gets EPIPE at its next line (within one
        # interval); there is no pty, so no signal reaches it reliably.
        self._proc.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._proc.wait_closed(), timeout=2.0)
        if not self._stderr_task.done():
            self._stderr_task.cancel()

    def stderr_tail(self) -> str:
        return self._stderr.decode(errors="replace").strip()


class SshAgentRunner(AgentRunner):
    """Runs the telemetry agent on the host as ``python3 - ARGS`` with its source on stdin,
    so nothing has to be installed there. ``env`` goes into the command line."""

    def __init__(
        self, ssh: SshConnection, python: str = "python3", env: Mapping[str, str] | None = None
    ) -> None:
        self.ssh = ssh
        self.python = python
        self.env = dict(env or {})

    async def start(self, args: list[str]) -> AgentProcess:
        env = {**self.env, "PYTHONUNBUFFERED": "1"}
        proc = await self.ssh.start_process([self.python, "-", *args], env=env)
        proc.stdin.write(agent_source())
        proc.stdin.write_eof()
        return _SshAgentProcess(proc)


def _text(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    return str(v)


def _short(line: str, n: int = 80) -> str:
    return line if len(line) <= n else line[: n - 3] + "..."


async def wait_until(deadline: float, step_s: float = 0.2) -> bool:
    """Sleep one step unless past ``deadline``; False once the deadline has passed."""
    if time.monotonic() >= deadline:
        return False
    await asyncio.sleep(min(step_s, max(deadline - time.monotonic(), 0)))
    return True

"""The SSH transport to a plan host: one kept-alive connection, reconnected when it drops.

A campaign runs for hours over one connection; a dropped link (a laptop on Wi-Fi, a host
reboot, sshd restarted) must not end it. asyncssh neither sends keepalives nor reconnects by
itself, so ``SshConnection`` sets a keepalive (a dead link is noticed in about a minute
instead of at the next TCP timeout), notices a drop the moment asyncssh does, and reconnects
in the background with a backoff for up to ``reconnect_timeout_s``; everything that needs the
link meanwhile waits for it. ``on_state`` hears "reconnecting", "connected" and
"unreachable", so the console can show the host as away. The user's OpenSSH setup applies as
it does for ``ssh``: ``~/.ssh/config`` resolves aliases, users, ports and keys, and
known_hosts decides which host keys are trusted. An unknown host key is refused, never
accepted silently, and a changed one is refused as a possible attack (``ssh_diagnose``).

The rule for commands: a command whose result is lost (the link dropped before its exit
status came back) raises ``SshResultLost``; it is never read as a status. Only commands the
caller marks ``idempotent`` (reads, checks, a signal sent again) are run again after the link
is back. Anything else, a start above all, is the caller's to reconcile: read what runs on
the host before doing it again.

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
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from specbench_tui.errors import InputError
from specbench_tui.hosts import ssh_diagnose
from specbench_tui.hosts.lines import LineSplitter
from specbench_tui.hosts.service import ServiceError, format_duration
from specbench_tui.hosts.shell import env_prefix, quote_command, until_channel_closed
from specbench_tui.hosts.telemetry import AgentProcess, AgentRunner, agent_source

log = logging.getLogger(__name__)

# A dead link is declared after KEEPALIVE_INTERVAL_S * KEEPALIVE_COUNT_MAX without an answer.
KEEPALIVE_INTERVAL_S = 15.0
KEEPALIVE_COUNT_MAX = 4
# Waits between reconnect attempts after a drop; the last one repeats until the timeout.
RECONNECT_BACKOFF_S: tuple[float, ...] = (1.0, 2.0, 3.0, 5.0)
RECONNECT_TIMEOUT_S = 600.0
IDEMPOTENT_TRIES = 5  # an idempotent command on a link that keeps dropping

StateCallback = Callable[[str, str], None]  # (state, reason)

__all__ = [
    "CommandResult",
    "Destination",
    "PortForward",
    "SshAgentRunner",
    "SshConnectError",
    "SshConnection",
    "SshError",
    "SshRefused",
    "SshResultLost",
]


class SshError(ServiceError):
    """The SSH transport failed (the connection dropped and could not be re-established,
    a command timed out); ``reason`` says which host and what to do."""


class SshResultLost(SshError):
    """The link dropped (or went silent) while a command ran: it may or may not have run
    to its end on the host. The caller must find out there before doing it again."""


class SshConnectError(SshError, InputError):
    """The host cannot be connected to at all for a reason the user must fix."""


class SshRefused(SshConnectError):
    """The host was reached and refused us (host key, authentication): retrying cannot
    help, so a reconnect gives up at once."""


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
    """A finished remote command. ``exit_status`` is -1 when it was killed by a signal."""

    exit_status: int | None
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


class _LinkWatch(asyncssh.SSHClient):
    """Tells the connection the moment asyncssh sees its link end, before any waiter on a
    channel resumes, so no failed request can be taken for the server's fault."""

    def __init__(self, owner: SshConnection) -> None:
        self.owner = owner
        self.conn: asyncssh.SSHClientConnection | None = None

    def connection_made(self, conn: asyncssh.SSHClientConnection) -> None:
        self.conn = conn

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner._lost(self.conn, exc)


class SshConnection:
    """A connection to one destination, opened on first use and reopened after a drop.

    ``config``, ``known_hosts`` and ``client_keys`` default to the user's OpenSSH files;
    tests point them at files of their own. ``connect_timeout_s`` bounds one attempt. The
    first connect is tried once (a wrong host name or key will not fix itself); after a
    drop, attempts follow ``reconnect_backoff_s`` (its last wait repeated) until
    ``reconnect_timeout_s`` has passed, and then the host counts as unreachable: the next use
    tries once more and fails at once if it is still away.
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
        reconnect_timeout_s: float = RECONNECT_TIMEOUT_S,
        on_state: StateCallback | None = None,
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
        self.reconnect_timeout_s = reconnect_timeout_s
        self.on_state = on_state
        self.reconnects = 0
        self.drops = 0  # links lost so far: a change tells a caller its work was cut
        self.down_since: float | None = None  # time.monotonic() of the current drop
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()
        self._ever_connected = False
        self._closed = False
        self._reconnector: asyncio.Task[asyncssh.SSHClientConnection] | None = None
        self._gave_up: str | None = None  # why the last reconnect window ended unanswered
        self._no_wait = asyncio.Event()  # set: a link that is down is not waited for
        self._endpoint: ssh_diagnose.Endpoint | None = None

    def __str__(self) -> str:
        return str(self.destination)

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    def endpoint(self) -> ssh_diagnose.Endpoint:
        """Where the destination really leads (HostName and Port from the SSH config)."""
        if self._endpoint is None:
            d = self.destination
            try:
                self._endpoint = ssh_diagnose.resolve(d.host, d.user, d.port, self.config)
            except (OSError, ValueError, asyncssh.Error) as e:
                raise SshConnectError(f"{d}: SSH setup error: {e}") from e
        return self._endpoint

    # --- connecting ------------------------------------------------------------------------

    async def connection(self) -> asyncssh.SSHClientConnection:
        """The live connection; while a reconnect runs, the one it brings.

        The first connection is tried once and a failure raises ``SshConnectError``. After
        a drop, this waits for the background reconnect, which raises ``SshError`` once the
        host stayed away for ``reconnect_timeout_s``.
        """
        if self._closed:
            raise SshError(f"{self.destination}: the SSH connection was closed")
        if self.connected:
            assert self._conn is not None
            return self._conn
        if self._reconnector is not None and not self._reconnector.done():
            return await asyncio.shield(self._reconnector)
        async with self._lock:
            if self.connected:
                assert self._conn is not None
                return self._conn
            if not self._ever_connected:
                self._conn = await self._connect_once()
                self._ever_connected = True
                return self._conn
            if self._gave_up is None:  # a drop nobody saw (closed from our side): reconnect
                self._start_reconnect("the connection was closed")
                assert self._reconnector is not None
            elif self._no_wait.is_set():
                raise SshError(f"{self.endpoint().where()} is away ({self._gave_up})")
            else:  # the host was given up on: one attempt, then fail at once
                try:
                    self._conn = await self._connect_once()
                except SshConnectError as e:
                    where = self.endpoint().where()
                    raise SshError(
                        f"{where} is still unreachable ({_after(where, e.reason)})"
                    ) from e
                self._gave_up, self.down_since = None, None
                self.reconnects += 1
                self._notify("connected", "reachable again")
                return self._conn
        return await asyncio.shield(self._reconnector)

    def _lost(self, conn: asyncssh.SSHClientConnection | None, exc: Exception | None) -> None:
        """asyncssh says a link ended: count it, say so, reconnect in the background."""
        if self._closed or conn is None or conn is not self._conn:
            return
        self.drops += 1
        why = str(exc) if exc is not None and str(exc) else "connection lost"
        log.info("%s: %s; reconnecting", self.destination, why)
        self._start_reconnect(f"the link to {self.endpoint().where()} dropped ({why})")

    def _start_reconnect(self, reason: str) -> None:
        if self._reconnector is not None and not self._reconnector.done():
            return
        self.down_since = time.monotonic()
        self._gave_up = None
        self._notify("reconnecting", reason)
        self._reconnector = asyncio.get_running_loop().create_task(
            self._reconnect(), name=f"ssh-reconnect-{self.destination}"
        )
        self._reconnector.add_done_callback(_retrieve)

    async def _reconnect(self) -> asyncssh.SSHClientConnection:
        assert self.down_since is not None
        deadline = self.down_since + self.reconnect_timeout_s
        last = ""
        refused = False
        waits = iter(self.reconnect_backoff_s)
        delay = 0.0
        while True:
            if delay:
                with contextlib.suppress(TimeoutError):
                    wait = max(0.0, min(delay, deadline - time.monotonic()))
                    await asyncio.wait_for(self._no_wait.wait(), wait)
            if self._no_wait.is_set():
                last = "not waited for: the run is ending"
                break
            try:
                conn = await self._connect_once()
            except SshRefused as e:
                last, refused = e.reason, True
                break  # a changed host key or refused login does not fix itself
            except SshConnectError as e:
                last = e.reason
                log.info("%s: reconnect failed: %s", self.destination, last)
            else:
                away = time.monotonic() - self.down_since
                self._conn = conn
                self.down_since = None
                self.reconnects += 1
                self._notify("connected", f"reconnected after {format_duration(away)}")
                return conn
            if time.monotonic() >= deadline:
                break
            delay = next(waits, self.reconnect_backoff_s[-1])
        away = format_duration(time.monotonic() - self.down_since)
        self._gave_up = last or "no answer"
        where = self.endpoint().where()
        if refused:
            reason = last
        elif self._no_wait.is_set():
            reason = f"{where} is away, {last}"
        else:
            reason = f"{where} unreachable for {away} ({_after(where, last)})"
        self._notify("unreachable", reason)
        raise SshError(reason)

    def _notify(self, state: str, reason: str) -> None:
        if self.on_state is None:
            return
        try:
            self.on_state(state, reason)
        except Exception:  # a watcher's bug must not break the reconnect it is told of
            log.exception("on_state callback failed for %s", self.destination)

    async def _connect_once(self) -> asyncssh.SSHClientConnection:
        d = self.destination
        ep = self.endpoint()
        where = ep.where()
        kwargs: dict[str, object] = {
            "keepalive_interval": self.keepalive_interval_s,
            "keepalive_count_max": self.keepalive_count_max,
            "connect_timeout": self.connect_timeout_s,
            "client_factory": lambda: _LinkWatch(self),
        }
        if d.user:
            kwargs["username"] = d.user
        if d.port:
            kwargs["port"] = d.port
        if self.config is not None:
            kwargs["config"] = [str(self.config)]
        if self.known_hosts is not None:
            kwargs["known_hosts"] = str(self.known_hosts)
        elif ep.known_hosts is None:  # the config says "none": keys are checked regardless
            kwargs["known_hosts"] = [
                f for f in ssh_diagnose.checked_files(ep, None) if os.path.isfile(f)
            ] or b""
        if self.client_keys is not None:
            kwargs["client_keys"] = self.client_keys
        if not self.use_agent:
            kwargs["agent_path"] = None
        explicit = str(self.known_hosts) if self.known_hosts is not None else None
        try:
            return await asyncssh.connect(d.host, **kwargs)  # type: ignore[arg-type]
        except asyncssh.HostKeyNotVerifiable as e:
            text = await ssh_diagnose.host_key_problem(ep, explicit, self.connect_timeout_s)
            raise SshRefused(text) from e
        except asyncssh.PermissionDenied as e:
            raise SshRefused(
                f"{where}: SSH authentication failed ({e.reason}); check that "
                f"`{ep.ssh_command()}` logs in without a password (key in the SSH config or "
                "the ssh agent)"
            ) from e
        except socket.gaierror as e:
            via = f" (the HostName of {d.host!r} in the SSH config)" if ep.host != d.host else ""
            raise SshConnectError(
                f"{d}: cannot resolve host name {ep.host!r}{via} ({e.strerror}); check the "
                "plan's ssh value or the Host entry in the SSH config"
            ) from e
        except (TimeoutError, asyncssh.TimeoutError) as e:
            raise SshConnectError(
                f"{where}: no SSH answer within {format_duration(self.connect_timeout_s)}; "
                f"is the host up and reachable (`{ep.ssh_command()}`)?"
            ) from e
        except ConnectionRefusedError as e:
            raise SshConnectError(
                f"{where}: connection refused: nothing listens on port {ep.port} of {ep.host}; "
                f"check the port and that sshd runs (`{ep.ssh_command()}`)"
            ) from e
        except (asyncssh.ConnectionLost, asyncssh.ProtocolError, ConnectionResetError) as e:
            other = await ssh_diagnose.banner_problem(ep)
            if other is not None:
                raise SshConnectError(other) from e
            raise SshConnectError(f"{where}: SSH connection failed: {e}") from e
        except OSError as e:
            raise SshConnectError(
                f"{where}: cannot connect: {e.strerror or e}; check with `{ep.ssh_command()}`"
            ) from e
        except asyncssh.Error as e:
            raise SshConnectError(f"{where}: SSH connection failed: {e.reason}") from e
        except ValueError as e:  # a bad SSH config or key file
            raise SshConnectError(f"{d}: SSH setup error: {e}") from e

    async def close(self) -> None:
        """Close for good (later calls raise)."""
        self._closed = True
        if self._reconnector is not None and not self._reconnector.done():
            self._reconnector.cancel()
            with contextlib.suppress(BaseException):
                await self._reconnector
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with contextlib.suppress(asyncssh.Error, OSError):  # closing: a drop is no news
                await conn.wait_closed()

    def stop_waiting(self) -> bool:
        """From now on a link that is down is not waited for: a reconnect under way ends at
        its next attempt, later uses fail at once. True when the link is down now."""
        self._no_wait.set()
        return self.down_since is not None

    def drop(self) -> None:
        """Abort the current connection as a network failure would (a reconnect follows);
        for tests and for a caller that knows the link is dead."""
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
        idempotent: bool = False,
    ) -> CommandResult:
        """Run a command to its end; returns (exit status, stdout, stderr).

        ``command`` is a shell command line or an argv list (quoted here). When the link
        drops before the exit status arrives: an ``idempotent`` command runs again once the
        link is back; any other raises ``SshResultLost`` (so does one that outlived
        ``timeout_s``: it may still run there). ``check`` raises ``SshError`` with stderr's
        last line on a non-zero status.
        """
        line = command if isinstance(command, str) else quote_command(command)
        line = env_prefix(env or {}) + line if env else line
        for attempt in range(1, IDEMPOTENT_TRIES + 1):
            conn = await self.connection()
            try:
                res = await asyncio.wait_for(
                    conn.run(line, input=input, check=False, encoding="utf-8", errors="replace"),
                    timeout=timeout_s,
                )
            except TimeoutError as e:
                why = (
                    f"{self.destination}: `{_short(line)}` did not finish within "
                    f"{format_duration(timeout_s or 0)}"
                )
                if idempotent:
                    raise SshError(why) from e
                raise SshResultLost(why + "; it may still run there") from e
            except asyncssh.ChannelOpenError as e:
                if self.connected:  # refused by a live server: nothing ran
                    raise SshError(f"{self.destination}: cannot open a session: {e.reason}") from e
            except (asyncssh.ConnectionLost, asyncssh.DisconnectError, ConnectionError):
                pass
            else:
                if res.exit_status is not None or res.exit_signal is not None:
                    status = res.exit_status if res.exit_status is not None else -1
                    result = CommandResult(status, _text(res.stdout), _text(res.stderr))
                    if check and not result.ok:
                        err = result.stderr.strip().splitlines()
                        raise SshError(
                            f"{self.destination}: `{_short(line)}` failed with status "
                            f"{result.exit_status}" + (f": {err[-1]}" if err else "")
                        )
                    return result
            # The link dropped before the exit status came back.
            if not idempotent:
                raise SshResultLost(
                    f"{self.destination}: the connection dropped while `{_short(line)}` ran; "
                    "its result is lost"
                )
            log.info("%s: connection lost running a check (try %d)", self.destination, attempt)
        raise SshError(
            f"{self.destination}: connection lost {IDEMPOTENT_TRIES} times running a command"
        )

    async def start_process(
        self, command: str | Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> asyncssh.SSHClientProcess[bytes]:
        """Start a long-running command with binary stdin/stdout/stderr pipes (a follower or
        the telemetry agent: one that died with its channel may simply be started again)."""
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
            lines = LineSplitter()
            while True:
                try:
                    chunk = await proc.stdout.read(65536)
                except (asyncssh.ConnectionLost, asyncssh.DisconnectError, ConnectionError):
                    break
                if not chunk:
                    break
                for raw in lines.feed(chunk):
                    yield raw.decode("utf-8", errors="replace").rstrip("\r")
            rest = lines.end()
            if rest is not None:
                yield rest.decode("utf-8", errors="replace")
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


def _retrieve(task: asyncio.Task[asyncssh.SSHClientConnection]) -> None:
    """A reconnect nobody waited for still has its outcome read (no asyncio warning)."""
    if not task.cancelled():
        task.exception()


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

    @property
    def live(self) -> bool:
        """Listening on a connection that is up (after a drop: once re-created)."""
        return self._listener is not None and self._conn is not None and not self._conn.is_closed()

    async def open(self) -> int:
        """Open (or re-open) the forward; returns the local port."""
        await self._listen()
        if self._watch is None or self._watch.done():
            self._watch = asyncio.create_task(self._keep())
        assert self.local_port is not None
        return self.local_port

    async def wait_live(self, timeout_s: float) -> bool:
        """Until the forward is re-created after a reconnect; False after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not self.live:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def _listen(self) -> None:
        conn = await self.ssh.connection()
        listener = await self.ssh.forward_local_port(
            self.remote_port, remote_host=self.remote_host, local_port=self.local_port or 0
        )
        self._listener = listener
        self._conn = conn
        self.local_port = listener.get_port()

    async def _keep(self) -> None:
        """Re-create the forward after the connection it lived on closed."""
        while True:
            conn = self._conn
            if conn is not None:
                with contextlib.suppress(asyncssh.Error, OSError):  # closed either way
                    await conn.wait_closed()
            await asyncio.sleep(0.05)
            try:
                await self._listen()
            except SshError as e:
                log.info("port forward to %s: %s", self.remote_port, e)
                await asyncio.sleep(2.0)

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        if self._listener is not None:
            self._listener.close()
            with contextlib.suppress(asyncssh.Error, OSError, TimeoutError):
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
        lines = LineSplitter()
        while True:
            try:
                chunk = await self._proc.stdout.read(65536)
            except (asyncssh.Error, ConnectionError):
                return
            if not chunk:
                rest = lines.end()
                if rest is not None:
                    yield rest.decode("utf-8", errors="replace")
                return
            for raw in lines.feed(chunk):
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
        with contextlib.suppress(asyncssh.Error, OSError, TimeoutError):  # the link went first
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
        try:
            proc.stdin.write(agent_source())
            proc.stdin.write_eof()
        except (asyncssh.Error, OSError) as e:  # the channel broke at once: a transport error
            proc.close()
            raise SshError(f"{self.ssh}: the agent's channel broke: {e}") from e
        return _SshAgentProcess(proc)


def _text(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    return str(v)


def _after(where: str, reason: str) -> str:
    """A connect error without the host it names (already said before it)."""
    return reason.removeprefix(f"{where}: ")


def _short(line: str, n: int = 80) -> str:
    return line if len(line) <= n else line[: n - 3] + "..."


async def wait_until(deadline: float, step_s: float = 0.2) -> bool:
    """Sleep one step unless past ``deadline``; False once the deadline has passed."""
    if time.monotonic() >= deadline:
        return False
    await asyncio.sleep(min(step_s, max(deadline - time.monotonic(), 0)))
    return True

"""The interface the engine uses to run one service group's server, whatever supervises it.

The engine only ever needs: start it, wait until it answers, know whether it still runs, stop
it, and show the last lines of its log when something goes wrong. Everything here is
independent of *how* the server runs, so a local child process (``process.py``) and a systemd
unit over SSH share the readiness logic, the log tail and the wording of errors; a subclass
only starts, watches and stops its kind of process and feeds each log line to ``_emit_line``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

import httpx

from specbench_tui.durations import format_duration
from specbench_tui.engines.registry import DEFAULT_ENGINE, adapter
from specbench_tui.errors import HostError
from specbench_tui.results.cells import ServiceGroup

log = logging.getLogger(__name__)

#: The default engine's ready line (the simulator prints it too).
READY_LINE = adapter(DEFAULT_ENGINE).ready_line

LineCallback = Callable[[str], None]


class ServiceError(HostError):
    """A server that could not be started, got unhealthy or could not be stopped.

    ``reason`` is one line an operator can act on; ``log_tail`` is the server's last lines,
    which usually hold the real cause (a CUDA error, a missing model path).
    """

    def __init__(self, reason: str, log_tail: list[str] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.log_tail: list[str] = list(log_tail or [])

    def __str__(self) -> str:
        return self.reason


class HostUnreachable(ServiceError):
    """The host of a server stayed away longer than its reconnect timeout: what runs there
    cannot be reached, so the work that needs it fails (with this reason)."""


def describe_exit(code: int | None) -> str:
    """Turn a return code into words; a negative code means a signal, which hints at the OOM
    killer (SIGKILL) or a crash (SIGSEGV, SIGABRT) rather than a Python error."""
    if code is None:
        return "exited"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def describe_stop(code: int | None, sent: Sequence[str]) -> str:
    """How a server this tool stopped ended, saying who ended it: ``sent`` names the signals
    this tool sent it ("SIGTERM", then "SIGKILL" after the grace period; none when it had
    ended before the stop). A SIGKILL the tool did not send came from the server itself (some
    engines end their own process tree a few seconds after SIGTERM, or after a fault) or from
    the host."""
    said = describe_exit(code)
    if code is None or code >= 0:
        return said
    name = describe_exit(code).removeprefix("was killed by ")
    if name in sent:
        later = name == "SIGKILL" and len(sent) > 1
        return said + " (sent by this tool" + (" after the grace period)" if later else ")")
    what = "which sent " + " and ".join(sent) if sent else "which had sent none"
    return said + f" (not sent by this tool, {what}: the server itself or the host ended it)"


class Service(ABC):
    """One group's server. Subclasses implement start/stop/alive/exit_code/wait_exit.

    Log lines go through ``_emit_line``: it keeps the tail, calls ``on_line`` and notices the
    ready line, so every implementation gets the same behaviour.
    """

    def __init__(
        self,
        group: ServiceGroup,
        on_line: LineCallback | None = None,
        *,
        base_url: str | None = None,
        tail_lines: int = 400,
    ) -> None:
        self.group = group
        self._on_line = on_line
        self._base_url = (base_url or f"http://127.0.0.1:{group.port}").rstrip("/")
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._ready_seen = asyncio.Event()
        engine = adapter(group.engine)
        self._ready_line = engine.ready_line
        self._health_paths = engine.health_paths(group.api)
        self._callback_failed = False
        self.started_at: float | None = None  # time.monotonic() of the last start()
        self.ready_after_s: float | None = None  # start-up time of the last wait_ready()
        self._last_health = ""  # the last probe's outcome, for the timeout message
        self.log_path: Path | None = None  # the local copy of the server's log, if kept
        self._log: IO[str] | None = None

    # --- the local log file and line handling, the same for every kind of server --------

    def _open_log(self) -> None:
        self._close_log()
        if self.log_path is None:
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "a", encoding="utf-8")  # noqa: SIM115 (closed in stop)

    def _write_log(self, line: str) -> None:
        if self._log is None:
            return
        try:
            self._log.write(line + "\n")
            self._log.flush()
        except OSError:
            pass  # a full local disk must not stop the campaign; the tail still works

    def _close_log(self) -> None:
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None

    def _handle_raw(self, raw: bytes) -> None:
        """One raw output line: a progress bar redrawn with carriage returns keeps only its
        last state, so a log is not flooded; then the local log, the tail and ``on_line``."""
        if b"\r" in raw:
            parts = [p for p in raw.split(b"\r") if p.strip()]
            raw = parts[-1] if parts else b""
        line = raw.decode("utf-8", errors="replace")
        self._write_log(line)
        self._emit_line(line)

    # --- what a subclass provides ------------------------------------------------------

    @abstractmethod
    async def start(self) -> None:
        """Launch the server; returns once it is launched, not once it is ready.

        Raises ServiceError when it cannot even be launched (port taken, no such program).
        """

    @abstractmethod
    def alive(self) -> bool:
        """Whether the server's process still runs (cheap; no I/O for a local process)."""

    @property
    @abstractmethod
    def exit_code(self) -> int | None:
        """The exit status once it has exited (negative: killed by that signal), else None."""

    @abstractmethod
    async def wait_exit(self) -> int | None:
        """Return once the server has exited, with its exit code, its last output read."""

    @abstractmethod
    async def stop(self, grace_s: float = 30.0) -> None:
        """Stop the server (politely, then by force after ``grace_s``) and free its port.

        Safe to call when it never started or already exited. Raises ServiceError only
        when the port stays held afterwards, since the next group would fail on it.
        """

    async def released(self) -> bool:
        """Whether nothing of this server is left: no process of it and its port free. With
        no GPU telemetry this is all a host can check before the next server starts."""
        return not self.alive()

    @property
    def link_drops(self) -> int:
        """How often the link to the server's host has dropped so far (never, for a server
        on this machine): a change while a cell ran means its requests were cut by the
        link, not by the server."""
        return 0

    async def after_outage(self) -> None:
        """After the link to the host dropped: return once it is back and the server's state
        is known again; ``HostUnreachable`` when the host stays away, ``ServiceError`` when
        the server runs but does not answer. Nothing to do here."""
        return None

    # --- shared behaviour ----------------------------------------------------------------

    @property
    def last_health(self) -> str:
        """What the last health probe saw ("GET /health HTTP 503", "connection refused")."""
        return self._last_health

    @property
    def base_url(self) -> str:
        """Where the benchmark client reaches the server, e.g. ``http://127.0.0.1:30000``."""
        return self._base_url

    def log_tail(self, n: int = 40) -> list[str]:
        """The last ``n`` log lines seen, oldest first."""
        if n <= 0:
            return []
        return list(self._tail)[-n:]

    def _reset_for_start(self) -> None:
        """Forget the previous run's ready line so a restart waits for a fresh one."""
        self._ready_seen = asyncio.Event()
        self.started_at = time.monotonic()
        self.ready_after_s = None
        self._last_health = ""

    def _emit_line(self, line: str) -> None:
        """Record one server log line and pass it on; the callback may never break the tail."""
        self._tail.append(line)
        if self._ready_line in line:
            self._ready_seen.set()
        if self._on_line is not None:
            try:
                self._on_line(line)
            except Exception:  # a reader's bug must not stop the tail the readiness waits on
                if not self._callback_failed:  # say it once, not for every line
                    self._callback_failed = True
                    log.exception("on_line callback failed for %s", self.group.id)

    def ended_said(self) -> str:
        """How the server ended, in words for a notice, with the cause where its engine's log
        names one (the tail's last line is seldom it: a traceback's frames, a shutdown's
        noise); the same reading as a death during start-up."""
        cause = adapter(self.group.engine).startup_failure(list(self._tail))
        return f"it {describe_exit(self.exit_code)}" + (f": {cause}" if cause else "")

    async def wait_ready(self, timeout_s: float | None = None) -> float:
        """Wait until the server answers its health check; return the start-up time in s.

        Healthy means a 200 from the health endpoint(s) of the group's API. The ready line in
        the log only makes the next check come at once. Connection refused, 503 and timeouts
        are the normal state of a starting server and are retried quietly with a short
        backoff. An exit during start-up raises at once with the log tail, rather than after
        the (often 15 minute) timeout.
        """
        if self.started_at is None:
            raise ServiceError(f"{self.group.id}: wait_ready() before start()")
        timeout = self.group.ready_timeout_s if timeout_s is None else timeout_s
        t0 = time.monotonic()
        started = self.started_at
        exit_task = asyncio.ensure_future(self.wait_exit())
        health_task = asyncio.ensure_future(self._poll_health(t0 + timeout))
        try:
            done, _ = await asyncio.wait(
                {exit_task, health_task}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if exit_task in done:
                code = exit_task.result()
                # The cause, where the engine's log says it: the tail's last line is
                # seldom it (a traceback's frames, a shutdown warning).
                cause = adapter(self.group.engine).startup_failure(list(self._tail))
                raise ServiceError(
                    f"{self.group.id}: server {describe_exit(code)} during start-up"
                    + (f": {cause}" if cause else ""),
                    self.log_tail(),
                )
            if health_task in done:
                health_task.result()  # re-raise anything unexpected
                self.ready_after_s = time.monotonic() - started
                return self.ready_after_s
            last = self._last_health or "no answer"
            seen = "; the ready line was logged" if self._ready_seen.is_set() else ""
            raise ServiceError(
                f"{self.group.id}: not healthy after {format_duration(timeout)} (ready_timeout)"
                f"; last health check: {last}{seen}",
                self.log_tail(),
            )
        finally:
            for task in (exit_task, health_task):
                if not task.done():
                    task.cancel()
            await asyncio.gather(exit_task, health_task, return_exceptions=True)

    async def check_health(self, client: httpx.AsyncClient | None = None) -> bool:
        """One health probe (all endpoints of the API); True on the first HTTP 200.

        Also usable between cells to notice a server that still runs but no longer serves.
        """
        own = client is None
        if client is None:
            client = _client()
        try:
            for path in self._health_paths:
                try:
                    resp = await client.get(self._base_url + path)
                except httpx.ConnectError:
                    self._last_health = "connection refused"
                    return False  # nothing listens yet; the other paths cannot do better
                except httpx.TimeoutException:
                    self._last_health = f"GET {path} timed out"
                    continue
                except httpx.HTTPError as e:
                    self._last_health = f"GET {path}: {type(e).__name__}: {e}"
                    continue
                if resp.status_code == 200:
                    self._last_health = f"GET {path} 200"
                    return True
                self._last_health = f"GET {path} HTTP {resp.status_code}"
            return False
        finally:
            if own:
                await client.aclose()

    async def _poll_health(self, deadline: float) -> None:
        """Probe until healthy; sleeps back off from 0.1 s to 2 s, cut short by the ready line."""
        delay = 0.1
        async with _client() as client:
            while True:
                if await self.check_health(client):
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    await asyncio.sleep(3600)  # wait_ready's own timeout decides
                if self._ready_seen.is_set():
                    await asyncio.sleep(min(delay, left))
                    delay = min(delay * 1.5, 1.0)
                    continue
                try:
                    await asyncio.wait_for(self._ready_seen.wait(), timeout=min(delay, left))
                except TimeoutError:
                    delay = min(delay * 1.5, 2.0)
                else:
                    delay = 0.1  # the server says it is up: check at once, then often


def _client() -> httpx.AsyncClient:
    """An HTTP client for health checks: no proxy from the environment (a corporate
    HTTP_PROXY must not swallow 127.0.0.1), and a timeout long enough for /health_generate,
    which runs a generation on a possibly busy server."""
    return httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(20.0, connect=2.0))

"""A group's server as a detached process on an SSH host (``services = "process"``).

For hosts without systemd (a container, a machine where we lack root). The server must
outlive the SSH connection that started it (a dropped link must not kill a server in the
middle of a 15-minute start-up), so it runs under ``nohup setsid`` in a session of its own,
with its output in ``<workdir>/<campaign>/logs/<group>.log`` and its pid in
``<workdir>/<campaign>/<group>.pid``: campaigns that share a workdir (their group ids may
well be the same) never touch each other's files. A small shell wrapper is the session
leader: it records the server's exit status in ``<group>.exit``, which is how a crash is
told apart from a link that went quiet. The wrapper's ``$0`` is the launch mark
(``remote_service.launch_mark``), so a process found through a pid file is known to be this
group's server, started with this command line, and not a stranger that reused the pid.

A start is never sent twice blindly: when the reply to it is lost, the pid file says whether
the server came up (it is then followed as if the reply had come) or not (it is started
again). A server of the group found running at a start (left by a crash of this tool) is
taken over when its mark matches and it answers its health check, and stopped otherwise.

The log is followed with ``tail -F`` over SSH from the byte offset reached so far, so a
reconnect neither loses nor repeats lines. Health checks go through a local port forward;
``base_url`` is that forward's local port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncssh

from specbench_tui.errors import describe
from specbench_tui.hosts.backends.ssh.remote_service import (
    ADOPT_HEALTH_S,
    RemoteHolder,
    RemoteService,
    mark_mismatch,
    mark_what,
)
from specbench_tui.hosts.lines import LineSplitter
from specbench_tui.hosts.service import (
    LineCallback,
    ServiceError,
    describe_stop,
)
from specbench_tui.hosts.shell import (
    env_prefix,
    quote,
    quote_command,
    remote_path,
    until_channel_closed,
)
from specbench_tui.hosts.ssh import SshConnection, SshError, SshResultLost
from specbench_tui.results.cells import ServiceGroup

log = logging.getLogger(__name__)

# The session leader: writes its pid, runs the server, writes the server's exit status.
WRAPPER = 'echo $$ > "$1"; f="$2"; shift 2; "$@"; echo $? > "$f"'
# A shell function: exit 0 while a live (non-zombie) process of process group $1 exists.
ALIVE_FN = (
    'alive() { for s in /proc/[0-9]*/stat; do read -r l < "$s" 2>/dev/null || continue; '
    'set -- "$1" ${l##*)}; [ "$4" = "$1" ] && [ "$2" != Z ] && return 0; done; return 1; }; '
)


def group_alive_script(pgid: int) -> str:
    """Shell: exit 0 while a live (non-zombie) process of process group ``pgid`` exists.

    Reads /proc with the shell's own ``read``, no fork per process. Zombies are ignored:
    an orphaned leader may wait long for a reaper, but holds neither port nor GPU memory.
    """
    return f"{ALIVE_FN}alive {int(pgid)}"


def leader_alive_script(pid: int) -> str:
    """Shell: exit 0 while process ``pid`` exists and is not a zombie."""
    return (
        f'read -r s < /proc/{int(pid)}/stat 2>/dev/null || exit 1; set -- ${{s##*)}}; [ "$1" != Z ]'
    )


def decode_status(text: str) -> int | None:
    """The wrapper's ``$?``: 128+N means killed by signal N (reported as -N, like Popen)."""
    try:
        code = int(text.strip())
    except ValueError:
        return None
    return -(code - 128) if 128 < code < 160 else code


def running_script(pid_file: str) -> str:
    """Shell: the process group a pid file names, while it lives: its pid, the leader's
    ``$0`` (the launch mark) and its ``sh -c`` script (the wrapper) on three lines; nothing
    when there is none."""
    return (
        f"{ALIVE_FN}[ -s {pid_file} ] || exit 0; read -r p < {pid_file}; "
        'case "$p" in ""|*[!0-9]*) exit 0;; esac; alive "$p" || exit 0; '
        "echo \"$p\"; tr '\\0' '\\n' < /proc/$p/cmdline 2>/dev/null | sed -n '3h;4{p;x;p;q;}'"
    )


@dataclass(frozen=True)
class Running:
    """A live process group a pid file names, and its launch mark ("" when unreadable).
    ``wrapper``: its leader runs this tool's wrapper (of any version, marked or not); when
    not, the pid file is stale and its pid now names another process (after a reboot, say),
    which is not ours to stop or follow."""

    pid: int
    mark: str
    wrapper: bool = True


def parse_running(stdout: str) -> Running | None:
    lines = stdout.splitlines()
    if not lines or not lines[0].strip().isdigit():
        return None
    mark = lines[1].strip() if len(lines) > 1 else ""
    return Running(int(lines[0]), mark, len(lines) > 2 and lines[2] == WRAPPER)


async def stop_process_group(
    ssh: SshConnection,
    pgid: int,
    grace_s: float,
    say: Callable[[str], None] | None = None,
    name: str = "",
    kill_wait_s: float = 10.0,
) -> tuple[str, ...]:
    """SIGTERM to the whole process group, SIGKILL after ``grace_s``; returns once none of it is
    left, with the signals it sent (none: the group had already ended). Every step is a
    check or a signal sent again, so each survives a dropped link (the connection waits for
    the host); a host that stays away raises SshError, and a group still there
    ``kill_wait_s`` after SIGKILL raises ServiceError (the caller keeps it on record for the
    leftover check instead of taking it for stopped)."""
    say = say or (lambda _line: None)

    async def alive() -> bool:
        res = await ssh.run(group_alive_script(pgid), timeout_s=30.0, idempotent=True)
        return res.exit_status == 0

    async def signal(sig: str) -> None:
        await ssh.run(f"kill -{sig} -{int(pgid)} 2>/dev/null", timeout_s=30.0, idempotent=True)

    if not await alive():
        return ()
    say(f"----- stopping {name or pgid} (SIGTERM, grace {grace_s:g}s)")
    await signal("TERM")
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and await alive():
        await asyncio.sleep(0.2)
    if await alive():
        say(f"----- {name or pgid} ignored SIGTERM; sending SIGKILL")
        await signal("KILL")
        deadline = time.monotonic() + kill_wait_s
        while time.monotonic() < deadline and await alive():
            await asyncio.sleep(0.2)
        if await alive():
            raise ServiceError(
                f"{name or f'process group {pgid}'} on {ssh}: still running after SIGKILL"
            )
        return ("SIGTERM", "SIGKILL")
    return ("SIGTERM",)


def campaign_files(workdir: str, campaign: str) -> str:
    """The folder of a campaign's pid files and logs in a host's workdir (unquoted)."""
    base = workdir.rstrip("/")
    return f"{base}/{campaign}" if campaign else base or "/"


class RemoteProcessService(RemoteService):
    """The group's command on an SSH host, detached, supervised over the connection.

    ``workdir`` holds, in a folder per campaign (``campaign_files``), the logs and pid files
    on the host (``~`` allowed); ``cwd`` is the server's working directory there (default:
    the workdir). ``python`` is used on the host for the port check.
    """

    def __init__(
        self,
        group: ServiceGroup,
        ssh: SshConnection,
        log_path: str | os.PathLike[str],
        on_line: LineCallback | None = None,
        *,
        workdir: str = "~/specbench",
        **kw: Any,
    ) -> None:
        super().__init__(group, ssh, log_path, on_line, **kw)
        self.workdir = workdir.rstrip("/") or "/"
        self.pid: int | None = None
        self._offset = 0  # bytes of the remote log consumed
        self._lines = LineSplitter()  # the log's lines, the one in progress kept

    # --- remote file names ----------------------------------------------------------------

    def _w(self, name: str) -> str:
        """A file of this campaign's on the host (``name`` "" : the workdir itself)."""
        base = self.workdir if self.workdir != "/" else ""
        if not name:
            return remote_path(f"{base}/")
        return remote_path(f"{campaign_files(base, self.campaign)}/{name}")

    @property
    def remote_log(self) -> str:
        return self._w(f"logs/{self.group.id}.log")

    @property
    def pid_file(self) -> str:
        return self._w(f"{self.group.id}.pid")

    @property
    def exit_file(self) -> str:
        return self._w(f"{self.group.id}.exit")

    # --- Service --------------------------------------------------------------------------

    def alive(self) -> bool:
        """From the last poll (every ``poll_s``): no round trip here."""
        return self.pid is not None and not self._exited.is_set()

    def _on_record(self) -> dict[str, object]:
        return {"pid": self.pid}

    def _owns(self, holder: RemoteHolder) -> bool:
        """The wrapper is its session's leader (``setsid``): every process of the server
        has its pid as session id, whatever it renamed itself to."""
        return self.pid is not None and self.pid in (holder.sid, holder.pgid)

    async def _start(self) -> None:
        if self.alive():
            raise ServiceError(f"{self.group.id}: already running on {self.ssh} (pid {self.pid})")
        if not self.group.command:
            raise ServiceError(f"{self.group.id}: the service group has no command")
        await self._stop_background()
        self._reset_for_start()
        self.adopted = False
        running = await self._running()
        if running is not None and not running.wrapper:
            self.on_notice(
                "warning",
                f"{self.group.id}: the pid file on {self.ssh} names pid {running.pid}, now a "
                "process this tool did not start: left alone; starting a new server",
            )
            running = None
        if running is not None:
            self._refuse_foreign(f"the server of pid {running.pid}", running.mark)
            same = mark_what(running.mark) == mark_what(self.mark)
            if same and await self._adopt(running.pid):
                return
            if not same:
                mark = running.mark if running.mark.startswith("specbench:") else ""
                self.on_notice(
                    "warning",
                    f"{self.group.id}: stopped the server left running on {self.ssh} by an "
                    f"earlier run (pid {running.pid}): {mark_mismatch(mark)}",
                )
            await self._stop_running(running)
        await self._refuse_taken_port()
        for _ in range(2):  # a launch whose reply was lost and that did not come up: once more
            if await self._launch():
                return
        raise ServiceError(
            f"{self.group.id}: cannot start on {self.ssh}: the connection dropped during the "
            "start twice and no server came up"
        )

    async def _launch(self) -> bool:
        """Start the server; False when the reply was lost and nothing came up."""
        self._new_run()
        self._open_log()
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        self._write_log(
            f"----- {stamp} starting {self.group.id} on {self.ssh}: "
            f"{quote_command(self.group.command)}"
        )
        env = {**dict(self.group.env), **self.extra_env}
        env.setdefault("PYTHONUNBUFFERED", "1")
        cwd = remote_path(self.cwd) if self.cwd else self._w("")
        script = (
            f"mkdir -p {self._w('logs')} && rm -f {self.pid_file} {self.exit_file} && "
            f"cd {cwd} && "
            f"{{ nohup setsid sh -c {quote(WRAPPER)} {quote(self.mark)} {self.pid_file} "
            f"{self.exit_file} {env_prefix(env)}{quote_command(self.group.command)} "
            f"> {self.remote_log} 2>&1 < /dev/null & }} && "
            f"i=0; while [ ! -s {self.pid_file} ] && [ $i -lt 100 ]; do sleep 0.05; "
            "i=$((i+1)); done; cat "
            f"{self.pid_file}"
        )
        try:
            res = await self.ssh.run(script, timeout_s=30.0)
        except SshResultLost as e:
            # Did it start? The pid file says, once the link is back (a start that was
            # under way when the link dropped writes it within moments).
            log.info("%s: %s", self.group.id, e.reason)
            running = None
            for _ in range(3):
                running = await self._running()
                if running is not None and not running.wrapper:
                    running = None  # the old pid file, its pid reused: nothing of ours
                if running is not None:
                    break
                await asyncio.sleep(1.0)
            if running is None:
                self._write_log("----- the reply to the start was lost and no server runs")
                self.on_notice(
                    "warning",
                    f"{self.group.id}: the link to {self.ssh} dropped during the start and no "
                    "server came up; starting it again",
                )
                return False
            if running.mark != self.mark:  # not ours after all: make way, then start again
                self._refuse_foreign(f"the server of pid {running.pid}", running.mark)
                await self._stop_running(running)
                return False
            self._write_log(
                f"----- the reply to the start was lost; the server it started runs "
                f"(pid {running.pid}): following it"
            )
            self.on_notice(
                "warning",
                f"{self.group.id}: the link to {self.ssh} dropped during the start; the server "
                f"it started runs (pid {running.pid}): following it, not starting another",
            )
            await self._attach(running.pid)
            return True
        except SshError as e:
            self._close_log()
            raise ServiceError(f"{self.group.id}: cannot start on {self.ssh}: {e.reason}") from e
        try:
            pid = int(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            self._close_log()
            err = (res.stderr.strip().splitlines() or ["no pid written"])[-1]
            raise ServiceError(f"{self.group.id}: cannot start on {self.ssh}: {err}") from None
        await self._attach(pid)
        return True

    def _new_run(self) -> None:
        self._exited = asyncio.Event()
        self._exit_code = None
        self.pid = None
        self._offset = 0
        self._lines = LineSplitter()

    async def _attach(self, pid: int) -> None:
        """Follow the server with pid (and process group) ``pid``: forward, log, watch."""
        self.pid = pid
        await self._open_forward()
        self._tail_task = asyncio.create_task(self._follow_log(), name=f"tail-{self.group.id}")
        self._watch_task = asyncio.create_task(self._watch(), name=f"watch-{self.group.id}")

    async def _adopt(self, pid: int) -> bool:
        """Take over this group's server found running (left by an earlier run of the tool):
        followed from the end of its log, kept only if it answers its health check."""
        self._new_run()
        self._open_log()
        res = await self.ssh.run(
            f"stat -c %s {self.remote_log} 2>/dev/null", timeout_s=10.0, idempotent=True
        )
        with contextlib.suppress(ValueError):
            self._offset = int(res.stdout.strip() or 0)
        await self._attach(pid)
        if await self._answers(ADOPT_HEALTH_S):
            self.adopted = True
            self._write_log(
                f"----- {self.group.id}: took over the server already running (pid {pid})"
            )
            self.on_notice(
                "info",
                f"{self.group.id}: took over its server left running on {self.ssh} by an "
                f"earlier run (pid {pid}): same command line, healthy",
            )
            return True
        why = f"does not answer its health check ({self._last_health or 'no answer'})"
        self._write_log(f"----- {self.group.id}: the server already running (pid {pid}) {why}")
        self.on_notice(
            "warning",
            f"{self.group.id}: stopped its server left running on {self.ssh} by an earlier run "
            f"(pid {pid}): it {why}; starting a new one",
        )
        await self._stop_background()
        self.pid = None
        return False

    async def _stop_running(self, running: Running) -> None:
        """Stop a process group of this group's pid file that is not to be kept."""
        await stop_process_group(
            self.ssh, running.pid, 30.0, self._write_log, f"pid {running.pid} ({running.mark})"
        )
        await self._wait_port_free()

    async def _running(self) -> Running | None:
        res = await self.ssh.run(running_script(self.pid_file), timeout_s=30.0, idempotent=True)
        return parse_running(res.stdout)

    async def wait_exit(self) -> int | None:
        if self.pid is None:
            return None
        await self._exited.wait()
        await self._drain_log(2.0)
        return self._exit_code

    async def _stop(self, grace_s: float) -> None:
        pid = self.pid
        try:
            if pid is not None:
                sent = await stop_process_group(
                    self.ssh, pid, grace_s, self._write_log, self.group.id
                )
                await self._read_exit_file()
                if not self._exited.is_set():
                    self._exited.set()  # killed by us: the wrapper died before writing a status
                await self._drain_log(1.0)
                said = describe_stop(self._exit_code, sent)
                self._write_log(f"----- {self.group.id} {said}")
        finally:  # a stop that failed still ends the tail and the log; its record stays
            await self._stop_background()
            self._close_log()
        if pid is not None:
            await self._wait_port_free()

    async def released(self) -> bool:
        if self.pid is not None and await self._group_alive(self.pid):
            return False
        return not await self._port_in_use()

    # --- remote checks ---------------------------------------------------------------------

    async def _group_alive(self, pgid: int) -> bool:
        res = await self.ssh.run(group_alive_script(pgid), timeout_s=30.0, idempotent=True)
        return res.exit_status == 0

    async def _read_exit_file(self) -> bool:
        res = await self.ssh.run(
            f"cat {self.exit_file} 2>/dev/null", timeout_s=30.0, idempotent=True
        )
        if res.ok and res.stdout.strip():
            self._exit_code = decode_status(res.stdout)
            self._exited.set()
            return True
        return False

    def _poll_script(self, pid: int) -> str:
        return (
            f"if [ -e {self.exit_file} ]; then echo exit; cat {self.exit_file}; "
            f"elif ( {leader_alive_script(pid)} ); then echo alive; else echo gone; fi"
        )

    async def _poll(self) -> bool:
        """One look at the wrapper; True once the server has ended (and how is recorded)."""
        assert self.pid is not None
        res = await self.ssh.run(self._poll_script(self.pid), timeout_s=60.0, idempotent=True)
        words = res.stdout.split()
        if words[:1] == ["exit"]:
            self._exit_code = decode_status(words[1]) if len(words) > 1 else None
            self._exited.set()
        elif words[:1] == ["gone"]:
            await asyncio.sleep(0.1)  # the wrapper may be writing its status right now
            if not await self._read_exit_file():
                self._exited.set()  # killed from outside: no status
        return self._exited.is_set()

    async def _refresh(self) -> None:
        if self.pid is not None and not self._exited.is_set():
            await self._poll()

    async def _watch(self) -> None:
        """Poll the wrapper: its exit file says the server ended and how."""
        while not self._exited.is_set():
            try:
                if await self._poll():
                    return
            except SshError as e:
                # The link, not the server, failed; keep trying (reconnects back off).
                log.info("%s: cannot poll the server: %s", self.group.id, e)
                await asyncio.sleep(self.poll_s * 4)
                continue
            await asyncio.sleep(self.poll_s)

    # --- log following ---------------------------------------------------------------------

    async def _follow_log(self) -> None:
        """``tail -F`` from the offset reached; after a dropped connection, resume there.
        The offset counts every byte read, and the splitter keeps the line in progress
        across a reconnect, so a line is neither lost nor read twice (nor its cost squared)."""
        while True:
            cmd = f"tail -c +{self._offset + 1} -F {self.remote_log} 2>/dev/null"
            try:
                proc = await self.ssh.start_process(until_channel_closed(cmd))
            except SshError as e:
                log.info("%s: log tail: %s", self.group.id, e)
                await asyncio.sleep(2.0)
                continue
            except (asyncssh.Error, OSError) as e:  # a channel error: retry on a fresh one
                log.info("%s: log tail: %s", self.group.id, describe(e))
                await asyncio.sleep(1.0)
                continue
            try:
                while True:
                    try:
                        chunk = await proc.stdout.read(65536)
                    except (asyncssh.Error, OSError):  # the channel broke: start another
                        break
                    if not chunk:
                        break
                    self._offset += len(chunk)  # the line in progress stays in the splitter
                    for raw in self._lines.feed(chunk):
                        self._handle_raw(raw)
            finally:
                proc.close()
            await asyncio.sleep(0.5)

    async def _drain_log(self, timeout_s: float) -> None:
        """Wait (briefly) until the tail has read the remote log to its end."""
        deadline = time.monotonic() + timeout_s
        with contextlib.suppress(SshError):
            res = await self.ssh.run(
                f"stat -c %s {self.remote_log} 2>/dev/null", timeout_s=10.0, idempotent=True
            )
            size = int(res.stdout.strip() or 0)
            while self._offset < size and time.monotonic() < deadline:
                await asyncio.sleep(0.05)


__all__ = [
    "RemoteProcessService",
    "Running",
    "decode_status",
    "group_alive_script",
    "leader_alive_script",
    "parse_running",
    "running_script",
    "stop_process_group",
]

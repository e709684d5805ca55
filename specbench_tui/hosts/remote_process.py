"""A group's server as a detached process on an SSH host (``services = "process"``).

For hosts without systemd (a container, a machine where we lack root). The server must
outlive the SSH connection that started it (a dropped link must not kill a server in the
middle of a 15-minute start-up), so it runs under ``nohup setsid`` in a session of its own,
with its output in ``<workdir>/logs/<group>.log`` and its pid in ``<workdir>/<group>.pid``.
A small shell wrapper is the session leader: it records the server's exit status in
``<group>.exit``, which is how a crash is told apart from a link that went quiet.

The log is followed with ``tail -F`` over SSH from the byte offset reached so far, so a
reconnect neither loses nor repeats lines. Health checks go through a local port forward;
``base_url`` is that forward's local port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import time
from datetime import UTC, datetime

from specbench_tui.hosts.remote_service import RemoteService
from specbench_tui.hosts.service import LineCallback, ServiceError, describe_exit
from specbench_tui.hosts.ssh import (
    PortForward,
    SshConnection,
    SshError,
    env_prefix,
    quote_command,
    until_channel_closed,
)
from specbench_tui.results.cells import ServiceGroup

log = logging.getLogger(__name__)


def remote_path(path: str) -> str:
    """A remote path as a shell word, with a leading ``~`` expanded by the remote shell
    (quoting alone would keep it literal)."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def group_alive_script(pgid: int) -> str:
    """Shell: exit 0 while a live (non-zombie) process of process group ``pgid`` exists.

    Reads /proc with the shell's own ``read``, no fork per process. Zombies are ignored:
    an orphaned leader may wait long for a reaper, but holds neither port nor GPU memory.
    """
    return (
        "for f in /proc/[0-9]*/stat; do read -r s < $f 2>/dev/null || continue; "
        f'set -- ${{s##*)}}; [ "$3" = {pgid} ] && [ "$1" != Z ] && exit 0; done; exit 1'
    )


def leader_alive_script(pid: int) -> str:
    """Shell: exit 0 while process ``pid`` exists and is not a zombie."""
    return f'read -r s < /proc/{pid}/stat 2>/dev/null || exit 1; set -- ${{s##*)}}; [ "$1" != Z ]'


def decode_status(text: str) -> int | None:
    """The wrapper's ``$?``: 128+N means killed by signal N (reported as -N, like Popen)."""
    try:
        code = int(text.strip())
    except ValueError:
        return None
    return -(code - 128) if 128 < code < 160 else code


class RemoteProcessService(RemoteService):
    """The group's command on an SSH host, detached, supervised over the connection.

    ``workdir`` holds logs and pid files on the host (``~`` allowed); ``cwd`` is the
    server's working directory there (default: the workdir). ``python`` is used on the
    host for the port check.
    """

    def __init__(
        self,
        group: ServiceGroup,
        ssh: SshConnection,
        log_path: str | os.PathLike[str],
        on_line: LineCallback | None = None,
        *,
        workdir: str = "~/specbench",
        cwd: str | None = None,
        extra_env: dict[str, str] | None = None,
        python: str = "python3",
        port_free_timeout_s: float = 30.0,
        poll_s: float = 0.5,
    ) -> None:
        super().__init__(
            group,
            ssh,
            log_path,
            on_line,
            cwd=cwd,
            extra_env=extra_env,
            python=python,
            port_free_timeout_s=port_free_timeout_s,
            poll_s=poll_s,
        )
        self.workdir = workdir.rstrip("/") or "/"
        self.pid: int | None = None
        self._offset = 0  # bytes of the remote log consumed

    # --- remote file names ----------------------------------------------------------------

    def _w(self, name: str) -> str:
        base = self.workdir if self.workdir != "/" else ""
        return remote_path(f"{base}/{name}")

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

    async def start(self) -> None:
        if self.alive():
            raise ServiceError(f"{self.group.id}: already running on {self.ssh} (pid {self.pid})")
        if not self.group.command:
            raise ServiceError(f"{self.group.id}: the service group has no command")
        await self._stop_background()
        port = self.group.port
        if await self._port_in_use():
            holder = await self._describe_port_holder()
            raise ServiceError(
                f"{self.group.id}: port {port} already in use on {self.ssh}{holder}; "
                "stop it or change the plan's port"
            )
        self._reset_for_start()
        self._exited = asyncio.Event()
        self._exit_code = None
        self.pid = None
        self._offset = 0
        self._open_log()
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        command = quote_command(self.group.command)
        self._write_log(f"----- {stamp} starting {self.group.id} on {self.ssh}: {command}")
        env = {**dict(self.group.env), **self.extra_env}
        env.setdefault("PYTHONUNBUFFERED", "1")
        wrapper = 'echo $$ > "$1"; f="$2"; shift 2; "$@"; echo $? > "$f"'
        cwd = remote_path(self.cwd) if self.cwd else self._w("")
        script = (
            f"mkdir -p {self._w('logs')} && rm -f {self.pid_file} {self.exit_file} && "
            f"cd {cwd} && "
            f"{{ nohup setsid sh -c {shlex.quote(wrapper)} sh {self.pid_file} {self.exit_file} "
            f"{env_prefix(env)}{quote_command(self.group.command)} "
            f"> {self.remote_log} 2>&1 < /dev/null & }} && "
            f"i=0; while [ ! -s {self.pid_file} ] && [ $i -lt 100 ]; do sleep 0.05; "
            "i=$((i+1)); done; cat "
            f"{self.pid_file}"
        )
        try:
            res = await self.ssh.run(script, timeout_s=30.0)
        except SshError as e:
            self._close_log()
            raise ServiceError(f"{self.group.id}: cannot start on {self.ssh}: {e.reason}") from e
        try:
            self.pid = int(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            self._close_log()
            err = (res.stderr.strip().splitlines() or ["no pid written"])[-1]
            raise ServiceError(f"{self.group.id}: cannot start on {self.ssh}: {err}") from None
        self._forward = PortForward(self.ssh, port)
        try:
            local = await self._forward.open()
        except SshError as e:
            raise ServiceError(f"{self.group.id}: {e.reason}") from e
        self._base_url = f"http://127.0.0.1:{local}"
        self._tail_task = asyncio.create_task(self._follow_log(), name=f"tail-{self.group.id}")
        self._watch_task = asyncio.create_task(self._watch(), name=f"watch-{self.group.id}")

    async def wait_exit(self) -> int | None:
        if self.pid is None:
            return None
        await self._exited.wait()
        await self._drain_log(2.0)
        return self._exit_code

    async def stop(self, grace_s: float = 30.0) -> None:
        pid = self.pid
        if pid is not None:
            if await self._group_alive(pid):
                self._write_log(f"----- stopping {self.group.id} (SIGTERM, grace {grace_s:g}s)")
                await self._signal_group(pid, "TERM")
                deadline = time.monotonic() + grace_s
                while time.monotonic() < deadline and await self._group_alive(pid):
                    await asyncio.sleep(0.2)
                if await self._group_alive(pid):
                    self._write_log(f"----- {self.group.id} ignored SIGTERM; sending SIGKILL")
                    await self._signal_group(pid, "KILL")
                    deadline = time.monotonic() + 10.0
                    while time.monotonic() < deadline and await self._group_alive(pid):
                        await asyncio.sleep(0.2)
            await self._read_exit_file()
            if not self._exited.is_set():
                self._exited.set()  # killed by us: the wrapper died before writing a status
            await self._drain_log(1.0)
            self._write_log(f"----- {self.group.id} {describe_exit(self._exit_code)}")
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
        res = await self.ssh.run(group_alive_script(pgid), timeout_s=30.0)
        return res.exit_status == 0

    async def _signal_group(self, pgid: int, sig: str) -> None:
        await self.ssh.run(f"kill -{sig} -{pgid} 2>/dev/null", timeout_s=30.0)

    async def _read_exit_file(self) -> bool:
        res = await self.ssh.run(f"cat {self.exit_file} 2>/dev/null", timeout_s=30.0)
        if res.ok and res.stdout.strip():
            self._exit_code = decode_status(res.stdout)
            self._exited.set()
            return True
        return False

    async def _watch(self) -> None:
        """Poll the wrapper: its exit file says the server ended and how."""
        assert self.pid is not None
        pid = self.pid
        script = (
            f"if [ -e {self.exit_file} ]; then echo exit; cat {self.exit_file}; "
            f"elif ( {leader_alive_script(pid)} ); then echo alive; else echo gone; fi"
        )
        while not self._exited.is_set():
            try:
                res = await self.ssh.run(script, timeout_s=60.0)
            except SshError as e:
                # The link, not the server, failed; keep trying (reconnects back off).
                log.warning("%s: cannot poll the server: %s", self.group.id, e)
                await asyncio.sleep(self.poll_s * 4)
                continue
            words = res.stdout.split()
            if words[:1] == ["exit"]:
                self._exit_code = decode_status(words[1]) if len(words) > 1 else None
                self._exited.set()
            elif words[:1] == ["gone"]:
                await asyncio.sleep(0.1)  # the wrapper may be writing its status right now
                if not await self._read_exit_file():
                    self._exited.set()  # killed from outside: no status
                return
            await asyncio.sleep(self.poll_s)

    # --- log following ---------------------------------------------------------------------

    async def _follow_log(self) -> None:
        """``tail -F`` from the offset reached; after a dropped connection, resume there."""
        while True:
            cmd = f"tail -c +{self._offset + 1} -F {self.remote_log} 2>/dev/null"
            try:
                proc = await self.ssh.start_process(until_channel_closed(cmd))
            except SshError as e:
                log.warning("%s: log tail: %s", self.group.id, e)
                await asyncio.sleep(2.0)
                continue
            except Exception as e:  # a channel error: retry on a fresh attempt
                log.warning("%s: log tail: %s", self.group.id, e)
                await asyncio.sleep(1.0)
                continue
            buf = b""
            try:
                while True:
                    try:
                        chunk = await proc.stdout.read(65536)
                    except Exception:
                        break
                    if not chunk:
                        break
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for raw in lines:
                        self._offset += len(raw) + 1
                        self._handle_raw(raw)
            finally:
                proc.close()
            await asyncio.sleep(0.5)

    async def _drain_log(self, timeout_s: float) -> None:
        """Wait (briefly) until the tail has read the remote log to its end."""
        deadline = time.monotonic() + timeout_s
        with contextlib.suppress(SshError):
            res = await self.ssh.run(f"stat -c %s {self.remote_log} 2>/dev/null", timeout_s=10.0)
            size = int(res.stdout.strip() or 0)
            while self._offset < size and time.monotonic() < deadline:
                await asyncio.sleep(0.05)

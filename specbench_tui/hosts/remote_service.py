"""What every server on an SSH host shares, however it is supervised (plain process or
systemd unit): the connection, the port checks done on the host, the forward that lets the
client here reach it, and the background tasks that follow it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from specbench_tui.hosts.service import LineCallback, Service, ServiceError
from specbench_tui.hosts.ssh import PortForward, SshConnection, SshError
from specbench_tui.results.cells import ServiceGroup

# Exit 1 when something listens on (or holds) the port: the same bind test as port_in_use.
PORT_CHECK = (
    "import errno,socket,sys\n"
    "s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
    "try: s.bind(('0.0.0.0',int(sys.argv[1])))\n"
    "except OSError as e: sys.exit(1 if e.errno==errno.EADDRINUSE else 0)\n"
)


async def remote_port_in_use(ssh: SshConnection, port: int, python: str = "python3") -> bool:
    """Whether something on the host listens on (or holds) ``port``: the bind test of
    ``port_in_use``, run there."""
    res = await ssh.run([python, "-c", PORT_CHECK, str(port)], timeout_s=30.0)
    return res.exit_status == 1


@dataclass(frozen=True)
class PortHolder:
    """What listens on a port of a host, as far as ``ss`` shows it (the process is only
    visible to its owner or root) and the systemd unit its cgroup names."""

    text: str  # ss's line, squeezed: users:(("python3",pid=1234,fd=3)) ...
    pid: int | None = None
    unit: str | None = None

    def describe(self) -> str:
        who = f"{self.unit}, " if self.unit else ""
        return f"{who}{self.text}" if self.text else (self.unit or "an unknown process")


async def remote_port_holder(ssh: SshConnection, port: int) -> PortHolder:
    with contextlib.suppress(SshError):
        res = await ssh.run(f"ss -ltnpH 'sport = :{int(port)}' 2>/dev/null", timeout_s=10.0)
        line = " ".join(res.stdout.split())
        users = re.search(r"users:\(\(.*\)\)", line)
        text = (users.group(0) if users else line)[:200]
        m = re.search(r"pid=(\d+)", text)
        if m is None:
            return PortHolder(text)
        pid = int(m.group(1))
        res = await ssh.run(f"cat /proc/{pid}/cgroup 2>/dev/null", timeout_s=10.0)
        units = re.findall(r"/([^/\s]+\.service)(?:/|$)", res.stdout, flags=re.M)
        return PortHolder(text, pid, units[-1] if units else None)
    return PortHolder("")


class RemoteService(Service):
    """Base of the SSH-host services. ``python`` runs the port check on the host."""

    def __init__(
        self,
        group: ServiceGroup,
        ssh: SshConnection,
        log_path: str | os.PathLike[str],
        on_line: LineCallback | None = None,
        *,
        cwd: str | None = None,
        extra_env: dict[str, str] | None = None,
        python: str = "python3",
        port_free_timeout_s: float = 30.0,
        poll_s: float = 0.5,
    ) -> None:
        super().__init__(group, on_line)
        self.ssh = ssh
        self.log_path = Path(log_path)
        self.cwd = cwd
        self.extra_env = dict(extra_env or {})
        self.python = python
        self.port_free_timeout_s = port_free_timeout_s
        self.poll_s = poll_s
        self._exit_code: int | None = None
        self._exited = asyncio.Event()
        self._forward: PortForward | None = None
        self._tail_task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None

    @property
    def exit_code(self) -> int | None:
        return self._exit_code

    async def _port_in_use(self) -> bool:
        return await remote_port_in_use(self.ssh, self.group.port, self.python)

    async def _describe_port_holder(self) -> str:
        holder = await remote_port_holder(self.ssh, self.group.port)
        return f" ({holder.describe()})" if holder.text or holder.unit else ""

    async def _wait_port_free(self) -> None:
        deadline = time.monotonic() + self.port_free_timeout_s
        while await self._port_in_use():
            if time.monotonic() >= deadline:
                holder = await self._describe_port_holder()
                raise ServiceError(
                    f"{self.group.id}: port {self.group.port} on {self.ssh} still in use after "
                    f"the server stopped{holder}",
                    self.log_tail(),
                )
            await asyncio.sleep(0.2)

    async def _stop_background(self) -> None:
        for task in (self._watch_task, self._tail_task):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._watch_task = self._tail_task = None
        if self._forward is not None:
            await self._forward.close()
            self._forward = None

"""What every server on an SSH host shares, however it is supervised (plain process or
systemd unit): the connection, the port checks done on the host, the forward that lets the
client here reach it, and the background tasks that follow it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
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
        res = await self.ssh.run(
            [self.python, "-c", PORT_CHECK, str(self.group.port)], timeout_s=30.0
        )
        return res.exit_status == 1

    async def _describe_port_holder(self) -> str:
        with contextlib.suppress(SshError):
            res = await self.ssh.run(
                f"ss -ltnpH 'sport = :{self.group.port}' 2>/dev/null", timeout_s=10.0
            )
            text = " ".join(res.stdout.split())
            if text:
                return f" ({text[:160]})"
        return ""

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

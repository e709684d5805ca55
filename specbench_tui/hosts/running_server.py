"""A server this tool did not start (a config's ``url``), behind the same interface as one
it did: measured as it is, never started, stopped or restarted.

"Start" only marks the time its health is asked from; "stop" leaves it running. It has no
process here and no log this tool reads, so "alive" is what its health checks say: once a
check fails after it was ready (a request lost, between cells), it counts as gone, and how
it ended is said in those words, with the reminder that this tool cannot restart it.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from specbench_tui.hosts.service import LineCallback, Service
from specbench_tui.results.cells import ServiceGroup


class RunningServer(Service):
    """The server at ``group.url``, left as it is whatever happens to the campaign."""

    def __init__(self, group: ServiceGroup, on_line: LineCallback | None = None) -> None:
        assert group.url is not None, "a running server is reached by its url"
        super().__init__(group, on_line, base_url=group.url)
        self._gone = False
        self._never = asyncio.Event()  # its process is not ours: no exit is ever seen

    async def start(self) -> None:
        self._reset_for_start()
        self._gone = False

    def alive(self) -> bool:
        return not self._gone

    @property
    def exit_code(self) -> int | None:
        return None

    async def wait_exit(self) -> int | None:
        await self._never.wait()
        return None

    async def stop(self, grace_s: float = 30.0) -> None:
        """Nothing: the server was running before the campaign and runs on after it."""

    async def released(self) -> bool:
        return True

    async def check_health(self, client: httpx.AsyncClient | None = None) -> bool:
        healthy = await super().check_health(client)
        if not healthy and self.ready_after_s is not None:
            self._gone = True
        return healthy

    async def wait_ready(self, timeout_s: float | None = None) -> float:
        """Healthy within the group's ``ready_timeout`` (a running server answers at once,
        or once the request it is busy on is done); its "start-up" is that wait."""
        t0 = time.monotonic()
        await super().wait_ready(timeout_s)
        self.ready_after_s = time.monotonic() - t0
        return self.ready_after_s

    def ended_said(self) -> str:
        return (
            f"the server at {self.base_url} stopped answering ({self.last_health or 'no answer'}); "
            "this tool did not start it and cannot restart it"
        )

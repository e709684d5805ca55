"""A plan host reached over SSH: its servers run there (as systemd units or plain processes),
its GPUs are read there, and the benchmark client reaches each server through a port forward.

The engine sees the same ``Host`` methods as for a local or simulated host; only
``preflight`` is extra, run once before a campaign so that an unknown host key, a missing
interpreter or a model missing from /dev/shm after a reboot is said up front, in one line.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Iterable

from specbench_tui.errors import InputError
from specbench_tui.hosts.host import Host, NoticeCallback, SshSettings
from specbench_tui.hosts.remote_process import RemoteProcessService
from specbench_tui.hosts.service import LineCallback, Service
from specbench_tui.hosts.ssh import SshAgentRunner, SshConnection
from specbench_tui.hosts.systemd import ForeignUnits, SystemdService
from specbench_tui.hosts.telemetry import AgentRunner
from specbench_tui.results.cells import ServiceGroup


def _model_path(group: ServiceGroup) -> str | None:
    """The model a server loads, read off its command line (SGLang's ``--model-path``)."""
    cmd = list(group.command)
    for i, arg in enumerate(cmd):
        if arg in ("--model-path", "--model") and i + 1 < len(cmd):
            return cmd[i + 1]
        if arg.startswith("--model-path="):
            return arg.split("=", 1)[1]
    return None


class SshHost(Host):
    kind = "ssh"

    def __init__(
        self,
        name: str,
        gpus: int,
        settings: SshSettings,
        *,
        gpu_ids: Iterable[int] | None = None,
        on_notice: NoticeCallback | None = None,
        telemetry_interval_s: float = 1.0,
    ) -> None:
        super().__init__(
            name,
            gpus,
            gpu_ids=gpu_ids,
            on_notice=on_notice,
            telemetry_interval_s=telemetry_interval_s,
            python="python3",
        )
        self.settings = settings
        self.ssh = SshConnection(settings.destination, config=settings.ssh_config)
        self._foreign = ForeignUnits(self.ssh)

    # --- before the campaign ------------------------------------------------------------------

    async def preflight(self, groups: Iterable[ServiceGroup]) -> None:
        """Connect, create the work directory, and check that each server's interpreter and
        model exist; run the plan's ``prepare`` commands once if something is missing.
        Raises InputError with one line saying what is wrong and what to do."""
        await self.ssh.connection()  # host key, auth, reachability: SshConnectError is InputError
        res = await self.ssh.run(f"mkdir -p {self.settings.workdir}/logs")
        if not res.ok:
            raise InputError(
                f"host {self.name}: cannot create {self.settings.workdir}: "
                f"{res.stderr.strip() or res.exit_status}"
            )
        groups = list(groups)
        await self.recover(groups)
        missing = await self._missing(groups)
        if missing:
            hint = "" if self.settings.prepare else " (a prepare command in the plan can fix it)"
            raise InputError(f"host {self.name}: {missing[0]}{hint}")

    async def recover(self, groups: Iterable[ServiceGroup]) -> bool:
        """When something a server needs is gone (the model from /dev/shm after a reboot),
        run the plan's ``prepare`` commands; True when they ran. Raises InputError when a
        prepare command fails."""
        missing = await self._missing(groups)
        if not missing or not self.settings.prepare:
            return False
        self.on_notice("info", f"{self.name}: {missing[0]}; running the plan's prepare")
        for command in self.settings.prepare:
            res = await self.ssh.run(command, timeout_s=3600)
            if not res.ok:
                last = (res.stderr.strip().splitlines() or [f"exit {res.exit_status}"])[-1]
                raise InputError(f"host {self.name}: prepare command {command!r} failed: {last}")
        return True

    async def _missing(self, groups: Iterable[ServiceGroup]) -> list[str]:
        checks: dict[str, str] = {}
        for g in groups:
            if g.command:
                checks.setdefault(g.command[0], "interpreter")
            model = _model_path(g)
            if model:
                checks.setdefault(model, "model")
        out = []
        for path, what in checks.items():
            test = (
                f"command -v {shlex.quote(path)}"
                if what == "interpreter"
                else f"test -e {shlex.quote(path)}"
            )
            res = await self.ssh.run(test + " >/dev/null")
            if not res.ok:
                out.append(f"{what} {path} not found")
        return out

    # --- servers -------------------------------------------------------------------------------

    def service(
        self,
        group: ServiceGroup,
        log_path: str | os.PathLike[str],
        on_line: LineCallback | None = None,
    ) -> Service:
        svc: Service
        if self.settings.services == "process":
            svc = RemoteProcessService(
                group, self.ssh, log_path, on_line, workdir=self.settings.workdir
            )
        else:
            svc = SystemdService(
                group, self.ssh, log_path, on_line, campaign=self.settings.campaign
            )
        self._services.append(svc)
        return svc

    def agent_runner(self) -> AgentRunner:
        return SshAgentRunner(self.ssh, self.python, self.agent_env())

    # --- foreign services ----------------------------------------------------------------------

    async def stop_foreign(self, names: Iterable[str]) -> None:
        if self.settings.services != "systemd":
            await super().stop_foreign(names)
            return
        stopped = await self._foreign.stop(names)
        if stopped:
            self.on_notice("info", f"{self.name}: stopped {', '.join(stopped)} to free GPUs")

    async def restore_foreign(self) -> None:
        if not self.settings.restore_after or not self._foreign.stopped:
            return
        names = ", ".join(self._foreign.stopped)
        problems = await self._foreign.restore()
        for p in problems:
            self.on_notice("error", f"{self.name}: {p}")
        if not problems:
            self.on_notice("info", f"{self.name}: started {names} again")

    async def close(self, grace_s: float = 10.0) -> None:
        await super().close(grace_s)
        with contextlib.suppress(Exception):
            await self.ssh.close()

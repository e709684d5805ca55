"""One plan host as the engine sees it: run a group's server, read its GPUs, clear the way.

The engine holds one ``Host`` per ``[hosts.NAME]`` and never asks what kind it is. Local and
simulated hosts run servers as child processes; an SSH host with systemd will implement the
same methods (``stop_foreign``/``restore_foreign`` only mean something there, which is why
the hooks exist already).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from specbench_tui.hosts.process import ProcessService
from specbench_tui.hosts.service import LineCallback, Service
from specbench_tui.hosts.telemetry import (
    AgentRunner,
    GpusNotFreeError,
    LocalAgentRunner,
    ProblemCallback,
    SampleCallback,
    TelemetryReader,
    wait_gpus_free,
)
from specbench_tui.results.cells import ServiceGroup

NoticeCallback = Callable[[str, str], None]  # (level "info"|"warning"|"error", text)

FAKE_NVML_PATH = Path(__file__).resolve().parent.parent / "sim" / "fake_nvml.py"


def _ignore_notice(level: str, text: str) -> None:
    return None


class Host:
    """A host whose servers run as local child processes (``local = true``)."""

    kind: Literal["local", "sim", "ssh"] = "local"

    def __init__(
        self,
        name: str,
        gpus: int,
        *,
        gpu_ids: Iterable[int] | None = None,
        on_notice: NoticeCallback | None = None,
        telemetry_interval_s: float = 1.0,
        python: str = sys.executable,
        cpu_only: bool = False,
    ) -> None:
        self.name = name
        self.gpus = gpus
        # A host that serves on CPUs (vLLM's CPU build): no GPUs to watch or to wait for.
        self.cpu_only = cpu_only
        self.gpu_ids = list(gpu_ids) if gpu_ids is not None else list(range(gpus))
        self.on_notice = on_notice or _ignore_notice
        self.telemetry_interval_s = telemetry_interval_s
        self.python = python
        self._reader: TelemetryReader | None = None
        self._services: list[Service] = []

    # --- servers ------------------------------------------------------------------------

    def service_env(self) -> dict[str, str]:
        """Environment added to every server on this host, after the group's own."""
        return {}

    def service(
        self,
        group: ServiceGroup,
        log_path: str | os.PathLike[str],
        on_line: LineCallback | None = None,
    ) -> Service:
        """The group's server, not started yet."""
        svc = ProcessService(group, log_path, on_line, extra_env=self.service_env())
        self._services.append(svc)
        return svc

    # --- telemetry ----------------------------------------------------------------------

    def agent_env(self) -> dict[str, str]:
        return {}

    def agent_runner(self) -> AgentRunner:
        """Where the telemetry agent runs: a local process here, over SSH on an SSH host."""
        return LocalAgentRunner(self.python, self.agent_env())

    def telemetry(
        self,
        on_sample: SampleCallback | None = None,
        on_problem: ProblemCallback | None = None,
    ) -> TelemetryReader:
        """This host's telemetry reader, started on first use (one per host).

        Callbacks given on a later call replace the earlier ones. Problems go to the host's
        notices unless ``on_problem`` is given.
        """
        if self._reader is None:
            self._reader = TelemetryReader(
                self.name,
                self.agent_runner(),
                interval_s=self.telemetry_interval_s,
                gpus=self.gpu_ids,
            )
            self._reader.on_problem = self._telemetry_problem
        if on_sample is not None:
            self._reader.on_sample = on_sample
        if on_problem is not None:
            self._reader.on_problem = on_problem
        if not self.cpu_only:
            self._reader.start()
        return self._reader

    def _telemetry_problem(self, text: str) -> None:
        self.on_notice("warning", f"{self.name}: telemetry: {text}")

    async def wait_gpus_free(
        self, gpu_ids: Iterable[int], timeout_s: float, idle_mem_mib: float = 1024
    ) -> None:
        """Return once the GPUs hold no compute process and idle memory; else raise
        GpusNotFreeError naming the GPU, its memory and the process holding it."""
        if self.cpu_only:
            return
        reader = self.telemetry()
        try:
            await wait_gpus_free(reader.latest, gpu_ids, timeout_s, idle_mem_mib, host=self.name)
        except GpusNotFreeError as e:
            if reader.last_error:  # "no telemetry" is only actionable with the agent's reason
                e.reason += f" (telemetry: {reader.last_error})"
                e.args = (e.reason,)
            raise

    async def recover(self, groups: Iterable[ServiceGroup]) -> bool:
        """Repair what a failed start may have lost (an SSH host runs its ``prepare``);
        True when something was done and a new start is worth trying."""
        return False

    # --- foreign services ----------------------------------------------------------------

    async def stop_foreign(self, names: Iterable[str]) -> None:
        """Stop services outside the campaign that hold GPUs (``stop_before``).

        Only a systemd host can; here it is a notice, and the GPU wait that follows will name
        whatever still holds the GPUs.
        """
        names = list(names)
        if names:
            self.on_notice(
                "warning",
                f"{self.name}: cannot stop {', '.join(names)} on a {self.kind} host "
                "(stop_before needs a systemd host); skipped",
            )

    async def restore_foreign(self) -> None:
        """Start again what ``stop_foreign`` stopped; nothing was stopped here."""
        return None

    # --- end ------------------------------------------------------------------------------

    async def close(self, grace_s: float = 10.0) -> None:
        """Stop the telemetry and any server still running (an aborted campaign must not
        leave a server holding GPUs behind)."""
        for svc in self._services:
            if svc.alive():
                with contextlib.suppress(Exception):
                    await svc.stop(grace_s)
        self._services.clear()
        if self._reader is not None:
            await self._reader.stop()
            self._reader = None


class SimHost(Host):
    """The embedded simulated host: simulated servers write GPU state files into a state
    directory, and the telemetry agent reads them back through the fake NVML."""

    kind = "sim"

    def __init__(
        self,
        name: str,
        gpus: int,
        *,
        state_dir: str | os.PathLike[str] | None = None,
        gpu_ids: Iterable[int] | None = None,
        on_notice: NoticeCallback | None = None,
        telemetry_interval_s: float = 1.0,
        python: str = sys.executable,
    ) -> None:
        super().__init__(
            name,
            gpus,
            gpu_ids=gpu_ids,
            on_notice=on_notice,
            telemetry_interval_s=telemetry_interval_s,
            python=python,
        )
        self._owns_state = state_dir is None
        if state_dir is None:
            self.state_dir = Path(tempfile.mkdtemp(prefix=f"specbench-sim-{name}-"))
        else:
            self.state_dir = Path(state_dir)
            self.state_dir.mkdir(parents=True, exist_ok=True)

    @property
    def sim_gpu_count(self) -> int:
        """GPUs the simulated machine has: enough for the highest physical id used."""
        return max([self.gpus, *(g + 1 for g in self.gpu_ids)])

    def service_env(self) -> dict[str, str]:
        return {
            "SPECBENCH_SIM_STATE": str(self.state_dir),
            "SPECBENCH_SIM_GPUS": str(self.sim_gpu_count),
        }

    def agent_env(self) -> dict[str, str]:
        return {
            "SPECBENCH_SIM_NVML": str(self.state_dir),
            "SPECBENCH_SIM_NVML_MODULE": str(FAKE_NVML_PATH),
            "SPECBENCH_SIM_GPUS": str(self.sim_gpu_count),
        }

    async def close(self, grace_s: float = 10.0) -> None:
        await super().close(grace_s)
        if self._owns_state:
            shutil.rmtree(self.state_dir, ignore_errors=True)


def make_host(
    name: str,
    kind: Literal["local", "sim", "ssh"],
    gpus: int,
    *,
    gpu_ids: Iterable[int] | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    on_notice: NoticeCallback | None = None,
    telemetry_interval_s: float = 1.0,
    ssh: SshSettings | None = None,
    cpu_only: bool = False,
) -> Host:
    """The Host for a plan host of the given kind (``ssh`` settings for an SSH host)."""
    if kind == "sim":
        return SimHost(
            name,
            gpus,
            state_dir=state_dir,
            gpu_ids=gpu_ids,
            on_notice=on_notice,
            telemetry_interval_s=telemetry_interval_s,
        )
    if kind == "local":
        return Host(
            name,
            gpus,
            gpu_ids=gpu_ids,
            on_notice=on_notice,
            telemetry_interval_s=telemetry_interval_s,
            cpu_only=cpu_only,
        )
    if ssh is None:
        raise ValueError(f"host {name}: an SSH host needs its ssh settings")
    from specbench_tui.hosts.ssh_host import SshHost

    return SshHost(
        name,
        gpus,
        ssh,
        gpu_ids=gpu_ids,
        on_notice=on_notice,
        telemetry_interval_s=telemetry_interval_s,
    )


@dataclass(frozen=True)
class SshSettings:
    """What the plan says about an SSH host, beyond its GPUs."""

    destination: str
    campaign: str
    services: Literal["systemd", "process"] = "systemd"
    workdir: str = "~/specbench"
    prepare: tuple[str, ...] = ()
    restore_after: bool = True
    ssh_config: str | None = None  # like ``ssh -F``; None: ~/.ssh/config

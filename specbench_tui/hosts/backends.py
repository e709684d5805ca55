"""Every kind of plan host, by name: how the campaign builds what runs a host's groups, and how
a dry run checks it and a campaign preflights it.

Two shapes of backend: a machine the engine drives itself (``host`` builds its ``Host``:
local, sim, SSH), and a batch system whose scheduler places each service group as one job
(``batch_system`` and ``batch_jobs`` build what the batch scheduler drives: Slurm). A new
backend is one module and one line in ``BACKENDS``; the engine asks this registry and never
names a kind.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specbench_tui.errors import InputError
from specbench_tui.hosts.host import Host, HostEvents, HostReport, SimHost, SshSettings
from specbench_tui.plan.document import Plan
from specbench_tui.plan.model import HostSpec, PlanSpec
from specbench_tui.results.cells import ServiceGroup

if TYPE_CHECKING:
    from specbench_tui.hosts.batch import BatchJobs, BatchSystem


@dataclass(frozen=True)
class HostBuild:
    """What every Host is built from, whatever its kind."""

    name: str
    gpus: int
    gpu_ids: Iterable[int] | None = None
    state_dir: str | os.PathLike[str] | None = None
    events: HostEvents | None = None
    telemetry_interval_s: float = 1.0
    ssh: SshSettings | None = None
    groups: Iterable[ServiceGroup] = ()
    owner: str = ""

    def common(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "gpu_ids": self.gpu_ids,
            "events": self.events,
            "telemetry_interval_s": self.telemetry_interval_s,
            "groups": [g for g in self.groups if g.host == self.name],
        }


Check = Callable[[Plan, str, list[ServiceGroup], "str | None"], Awaitable[HostReport]]


@dataclass(frozen=True)
class Backend:
    """One kind of plan host: ``host`` (a machine) or ``batch_*`` (a batch system) is set."""

    name: str
    #: The Host of a machine host.
    host: Callable[[HostBuild], Host] | None = None
    #: The connection settings of a machine host reached remotely (None: none needed).
    settings: Callable[[HostSpec, str, str | None], SshSettings | None] | None = None
    #: A batch host: its cluster, for ``(spec, host, ssh_config)``, and its jobs' layout.
    batch_system: Callable[[PlanSpec, str, str | None], BatchSystem] | None = None
    batch_jobs: Callable[[PlanSpec, str], BatchJobs] | None = None
    #: ``--dry-run --check`` of a batch host (a machine host's is ``Host.check``).
    batch_check: Check | None = None
    #: Whether a campaign reaches the host before it starts (``Host.preflight``, or the first
    #: problem of ``batch_check``): an unknown host key is one clear line, not a failure later.
    preflights: bool = False
    #: Another machine: servers an earlier run left there are settled at every start (an
    #: SSH host takes one over), not only when this run has groups to run there.
    remote: bool = False
    #: Environment variables in which a batch job finds its GPUs when the system set no
    #: ``CUDA_VISIBLE_DEVICES``, in order.
    job_gpu_variables: tuple[str, ...] = ()


def _local(b: HostBuild) -> Host:
    return Host(b.name, b.gpus, **b.common())


def _sim(b: HostBuild) -> Host:
    return SimHost(b.name, b.gpus, state_dir=b.state_dir, **b.common())


def _ssh(b: HostBuild) -> Host:
    from specbench_tui.hosts.ssh_host import SshHost

    if b.ssh is None:
        raise ValueError(f"host {b.name}: an SSH host needs its ssh settings")
    return SshHost(b.name, b.gpus, b.ssh, **b.common())


def _ssh_settings(hs: HostSpec, campaign: str, ssh_config: str | None) -> SshSettings | None:
    if hs.ssh is None:
        return None
    return SshSettings(
        destination=hs.ssh,
        campaign=campaign,
        services=hs.services or "systemd",
        workdir=hs.workdir,
        prepare=tuple(hs.prepare),
        restore_after=hs.restore_after,
        ssh_config=ssh_config,
        reconnect_timeout_s=hs.reconnect_timeout,
    )


def _slurm_system(spec: PlanSpec, host: str, ssh_config: str | None) -> BatchSystem:
    from specbench_tui.hosts.slurm import cluster_of

    return cluster_of(spec, host, ssh_config)


def _slurm_jobs(spec: PlanSpec, host: str) -> BatchJobs:
    from specbench_tui.hosts.slurm_batch import SlurmJobs

    return SlurmJobs.of(spec, host)


async def _slurm_check(
    plan: Plan, host: str, groups: list[ServiceGroup], ssh_config: str | None
) -> HostReport:
    from specbench_tui.hosts.slurm import check_slurm

    return await check_slurm(plan, host, groups, ssh_config)


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend("local", host=_local),
        Backend("sim", host=_sim),
        Backend("ssh", host=_ssh, settings=_ssh_settings, preflights=True, remote=True),
        Backend(
            "slurm",
            batch_system=_slurm_system,
            batch_jobs=_slurm_jobs,
            batch_check=_slurm_check,
            preflights=True,
            job_gpu_variables=("SLURM_JOB_GPUS", "SLURM_STEP_GPUS"),
        ),
    )
}


def backend(kind: str) -> Backend:
    try:
        return BACKENDS[kind]
    except KeyError:
        raise ValueError(f"no backend for hosts of kind {kind!r}") from None


def job_gpu_variables() -> tuple[str, ...]:
    """Every batch backend's variables that name a job's GPUs."""
    return tuple(v for b in BACKENDS.values() for v in b.job_gpu_variables)


def build_host(plan_spec: PlanSpec, name: str, ssh_config: str | None = None, **kw: Any) -> Host:
    """The Host of a machine host of the plan (``kw``: the rest of ``HostBuild``)."""
    hs = plan_spec.hosts[name]
    entry = backend(kw.pop("kind", None) or hs.kind)
    assert entry.host is not None, f"host {name}: a {entry.name} host runs batch jobs"
    campaign = plan_spec.campaign.name
    ssh = entry.settings(hs, campaign, ssh_config) if entry.settings else None
    kw.setdefault("gpu_ids", hs.gpu_ids)
    return entry.host(HostBuild(name, hs.gpus, ssh=ssh, **kw))


async def check_host(
    plan: Plan, name: str, kind: str, groups: list[ServiceGroup], ssh_config: str | None
) -> HostReport:
    """``--dry-run --check`` of one host: reached as a campaign would, left as it was."""
    entry = backend(kind)
    if entry.batch_check is not None:
        return await entry.batch_check(plan, name, groups, ssh_config)
    host = build_host(plan.spec, name, ssh_config, kind=kind, groups=groups)
    try:
        return await host.check(groups)
    finally:
        await host.close()


async def preflight_host(
    plan: Plan, name: str, kind: str, groups: list[ServiceGroup], ssh_config: str | None, **kw: Any
) -> None:
    """Before a campaign: raise InputError with the first thing that would stop the host's
    groups (nothing for a host that needs no reaching)."""
    entry = backend(kind)
    if not entry.preflights:
        return
    if entry.batch_check is not None:
        report = await entry.batch_check(plan, name, groups, ssh_config)
        if report.problems:
            raise InputError(f"host {name}: {report.problems[0]}")
        return
    host = build_host(plan.spec, name, ssh_config, kind=kind, groups=groups, **kw)
    try:
        await host.preflight(groups)  # type: ignore[attr-defined]
    finally:
        await host.close()

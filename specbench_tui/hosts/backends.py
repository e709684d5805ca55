"""Every kind of plan host, by name: what the plan side asks of it (its dry-run words, the
checks of its table, a batch system's jobs), how the campaign builds what runs its groups, and
how a dry run checks it and a campaign preflights it.

Two shapes of backend: a machine the engine drives itself (``host`` builds its ``Host``:
local, sim, SSH), and a batch system whose scheduler places each service group as one job
(``batch`` for the plan side; ``batch_system`` and ``batch_jobs`` build what the batch
scheduler drives: Slurm). A new backend is its key in ``host_table.py``, one module and one
line in ``BACKENDS``; the plan, the engine and the console ask this registry and never name a
kind. The plan loads this module, so what runs a host is imported only when it is built.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from specbench_tui.errors import InputError
from specbench_tui.hosts import slurm_jobs
from specbench_tui.hosts.batch_kind import BatchKind
from specbench_tui.hosts.host_table import HostSpec, check_destination
from specbench_tui.hosts.options import HostOptions
from specbench_tui.results.cells import ServiceGroup
from specbench_tui.table_types import PlanError

T = TypeVar("T")

if TYPE_CHECKING:
    from specbench_tui.hosts.batch import BatchJobs, BatchSystem
    from specbench_tui.hosts.host import Host, HostEvents, HostReport


@dataclass(frozen=True)
class HostBuild:
    """What every Host is built from, whatever its kind: the host's plan table, the campaign
    and the run's options, from which a backend takes what it needs (an SSH host its
    connection settings), and what the campaign gives every host."""

    name: str
    table: HostSpec
    campaign: str
    options: HostOptions
    gpu_ids: Iterable[int] | None = None
    state_dir: str | os.PathLike[str] | None = None
    events: HostEvents | None = None
    telemetry_interval_s: float = 1.0
    groups: Iterable[ServiceGroup] = ()
    owner: str = ""

    @property
    def gpus(self) -> int:
        return self.table.gpus

    def common(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "gpu_ids": self.gpu_ids,
            "events": self.events,
            "telemetry_interval_s": self.telemetry_interval_s,
            "groups": [g for g in self.groups if g.host == self.name],
        }


#: ``(host table, host name, campaign, its groups, options)`` -> what the check found.
Check = Callable[[HostSpec, str, str, list[ServiceGroup], HostOptions], Awaitable["HostReport"]]


def _no_problems(name: str, host: HostSpec) -> list[PlanError]:
    return []


@dataclass(frozen=True)
class Backend:
    """One kind of plan host: ``host`` (a machine) or ``batch_*`` (a batch system) is set."""

    name: str
    #: The dry run's words for a host of this kind: ``(host, campaign) -> text``.
    describe: Callable[[HostSpec, str], str]
    #: What the host's table must satisfy beyond its types: ``(name, host) -> problems``.
    check_table: Callable[[str, HostSpec], list[PlanError]] = _no_problems
    #: The Host of a machine host.
    host: Callable[[HostBuild], Host] | None = None
    #: A batch host: what the plan side knows of its jobs.
    batch: BatchKind | None = None
    #: A batch host: its cluster, for ``(host table, host name, options)``, and its jobs'
    #: layout for ``(host table, campaign)``.
    batch_system: Callable[[HostSpec, str, HostOptions], BatchSystem] | None = None
    batch_jobs: Callable[[HostSpec, str], BatchJobs] | None = None
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
    #: The embedded simulator: its engine is the simulated one, its power made up.
    simulated: bool = False
    #: Servers run on the machine the campaign runs on: their files (a model's chat
    #: template) can be read from here.
    on_this_machine: bool = False
    #: What a plan writes to choose this kind, for the "set exactly one of" message.
    plan_words: str = ""


# --- machines ----------------------------------------------------------------------------------


def _local(b: HostBuild) -> Host:
    from specbench_tui.hosts.host import Host

    return Host(b.name, b.gpus, **b.common())


def _sim(b: HostBuild) -> Host:
    from specbench_tui.hosts.host import SimHost

    return SimHost(b.name, b.gpus, state_dir=b.state_dir, **b.common())


def _ssh(b: HostBuild) -> Host:
    from specbench_tui.hosts.host import SshSettings
    from specbench_tui.hosts.ssh_host import SshHost

    hs = b.table
    if hs.ssh is None:
        raise ValueError(f"host {b.name}: an SSH host needs its ssh destination")
    settings = SshSettings(
        destination=hs.ssh,
        campaign=b.campaign,
        services=hs.services or "systemd",
        workdir=hs.workdir,
        prepare=tuple(hs.prepare),
        restore_after=hs.restore_after,
        ssh_config=b.options.ssh_config,
        reconnect_timeout_s=hs.reconnect_timeout,
    )
    return SshHost(b.name, b.gpus, settings, **b.common())


def _check_ssh(name: str, host: HostSpec) -> list[PlanError]:
    assert host.ssh is not None  # asked only of a host that sets it
    return check_destination(("hosts", name, "ssh"), host.ssh)


# --- batch systems -----------------------------------------------------------------------------


def _slurm_system(hs: HostSpec, host: str, options: HostOptions) -> BatchSystem:
    from specbench_tui.hosts.slurm import cluster_of

    assert hs.slurm is not None
    return cluster_of(hs.slurm, host, options.ssh_config)


def _slurm_jobs(hs: HostSpec, campaign: str) -> BatchJobs:
    from specbench_tui.hosts.slurm_batch import SlurmJobs

    assert hs.slurm is not None
    return SlurmJobs(hs.slurm, campaign)


async def _slurm_check(
    hs: HostSpec, host: str, campaign: str, groups: list[ServiceGroup], options: HostOptions
) -> HostReport:
    from specbench_tui.hosts.slurm import check_slurm

    assert hs.slurm is not None
    return await check_slurm(hs.slurm, host, campaign, groups, options.ssh_config)


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend(
            "ssh",
            describe=lambda h, _: f"ssh {h.ssh}, {h.services or 'systemd'}, {h.gpus} GPUs",
            check_table=_check_ssh,
            host=_ssh,
            preflights=True,
            remote=True,
            plan_words='ssh = "user@host"',
        ),
        Backend(
            "local",
            describe=lambda h, _: f"local, {h.services or 'process'}, {h.gpus} GPUs",
            host=_local,
            on_this_machine=True,
            plan_words="local = true",
        ),
        Backend(
            "sim",
            describe=lambda h, _: f"simulated, {h.gpus} GPUs, speed x{h.speed:g}",
            host=_sim,
            simulated=True,
            on_this_machine=True,
            plan_words="sim = true",
        ),
        Backend(
            "slurm",
            describe=slurm_jobs.where,
            check_table=slurm_jobs.check_slurm_host,
            batch=slurm_jobs.BATCH_KIND,
            batch_system=_slurm_system,
            batch_jobs=_slurm_jobs,
            batch_check=_slurm_check,
            preflights=True,
            job_gpu_variables=("SLURM_JOB_GPUS", "SLURM_STEP_GPUS"),
            plan_words="slurm = { login = ... }",
        ),
    )
}


#: The kind every host of a rehearsal (``--sim``) is built as.
REHEARSAL = next(b.name for b in BACKENDS.values() if b.simulated)
#: The kind a batch job's own node is to the job: the machine it runs on.
THIS_MACHINE = next(b.name for b in BACKENDS.values() if b.on_this_machine and not b.simulated)


def simulated(kind: str) -> bool:
    """Whether hosts of ``kind`` are the embedded simulator."""
    return backend(kind).simulated


def on_this_machine(kind: str) -> bool:
    """Whether hosts of ``kind`` run their servers on the machine the campaign runs on."""
    return backend(kind).on_this_machine


def backend(kind: str) -> Backend:
    try:
        return BACKENDS[kind]
    except KeyError:
        raise ValueError(f"no backend for hosts of kind {kind!r}") from None


def batch_kind(kind: str) -> BatchKind | None:
    """The plan side of a batch host's jobs; None for a machine host."""
    return backend(kind).batch


def job_gpu_variables() -> tuple[str, ...]:
    """Every batch backend's variables that name a job's GPUs."""
    return tuple(v for b in BACKENDS.values() for v in b.job_gpu_variables)


def check_host_table(name: str, host: HostSpec) -> list[PlanError]:
    """A ``[hosts.NAME]`` table: one kind, then each kind's own checks."""
    chosen = [k for k in BACKENDS if getattr(host, k, None) not in (None, False)]
    errs: list[PlanError] = []
    if len(chosen) != 1:
        words = ", ".join(b.plan_words for b in BACKENDS.values())
        found = len(chosen) or "none"
        errs.append(PlanError(("hosts", name), f"set exactly one of {words} (found {found})"))
    for kind in chosen:
        errs += backend(kind).check_table(name, host)
    return errs


def build_host(
    hs: HostSpec, name: str, campaign: str, options: HostOptions | None = None, **kw: Any
) -> Host:
    """The Host of a machine host of the plan (``kw``: the rest of ``HostBuild``; ``kind``
    builds it as another kind, as a rehearsal does)."""
    entry = backend(kw.pop("kind", None) or hs.kind)
    if entry.host is None:
        raise ValueError(f"host {name}: a {entry.name} host runs batch jobs, not a Host")
    kw.setdefault("gpu_ids", hs.gpu_ids)
    return entry.host(HostBuild(name, hs, campaign, options or HostOptions(), **kw))


async def check_host(
    hs: HostSpec,
    name: str,
    campaign: str,
    kind: str,
    groups: list[ServiceGroup],
    options: HostOptions,
) -> HostReport:
    """``--dry-run --check`` of one host: reached as a campaign would, left as it was."""
    entry = backend(kind)
    if entry.batch_check is not None:
        return await entry.batch_check(hs, name, campaign, groups, options)
    host = build_host(hs, name, campaign, options, kind=kind, groups=groups)
    return await _closing(host, host.check(groups))


async def preflight_host(
    hs: HostSpec,
    name: str,
    campaign: str,
    kind: str,
    groups: list[ServiceGroup],
    options: HostOptions,
    **kw: Any,
) -> None:
    """Before a campaign: raise InputError with the first thing that would stop the host's
    groups (nothing for a host that needs no reaching)."""
    entry = backend(kind)
    if not entry.preflights:
        return
    if entry.batch_check is None:
        host = build_host(hs, name, campaign, options, kind=kind, groups=groups, **kw)
        await _closing(host, host.preflight(groups))  # type: ignore[attr-defined]
        return
    report = await entry.batch_check(hs, name, campaign, groups, options)
    if report.problems:
        raise InputError(f"host {name}: {report.problems[0]}")


async def _closing(host: Host, work: Awaitable[T]) -> T:
    """``work`` on a host built for it alone, closed after whatever it did."""
    try:
        return await work
    finally:
        await host.close()

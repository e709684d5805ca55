"""What a kind of plan host is: a ``Backend``, the one object a backend's folder
(``hosts/backends/<name>/``) exports, and the ``HostBuild`` a machine backend builds its
``Host`` from.

Two shapes of backend: a machine the engine drives itself (``host`` builds its ``Host``:
local, sim, SSH), and a batch system whose scheduler places each service group as one job
(``batch`` for the plan side; ``batch_system`` and ``batch_jobs`` build what the batch
scheduler drives: Slurm). Its traits (``simulated``, ``on_this_machine``, ``remote``) are
what the plan and the engine ask instead of its name.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specbench_tui.hosts.batch_kind import BatchKind
from specbench_tui.hosts.options import HostOptions
from specbench_tui.results.cells import ServiceGroup
from specbench_tui.table_types import PlanError

if TYPE_CHECKING:
    from specbench_tui.hosts.batch import BatchJobs, BatchSystem
    from specbench_tui.hosts.host import Host, HostEvents, HostReport


@dataclass(frozen=True)
class HostBuild:
    """What every Host is built from, whatever its kind: the host's plan table, the campaign
    and the run's options, from which a backend takes what it needs (an SSH host its
    connection settings), and what the campaign gives every host."""

    name: str
    table: Any  # the plan's HostSpec (hosts/backends/__init__.py)
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
Check = Callable[[Any, str, str, list[ServiceGroup], HostOptions], Awaitable["HostReport"]]


def _no_problems(name: str, host: Any) -> list[PlanError]:
    return []


@dataclass(frozen=True)
class Backend:
    """One kind of plan host: ``host`` (a machine) or ``batch_*`` (a batch system) is set."""

    name: str
    #: The dry run's words for a host of this kind: ``(host, campaign) -> text``.
    describe: Callable[[Any, str], str]
    #: The value of the plan key that makes a host this kind (named as the backend): its type
    #: as the plan's ``HostSpec`` declares it, optional; what the plan format says of it; and
    #: an example the backend contract test builds a host table from.
    table: Any
    meaning: str
    example: Any
    #: What the host's table must satisfy beyond its types: ``(name, host) -> problems``.
    check_table: Callable[[str, Any], list[PlanError]] = _no_problems
    #: The host table's keys before they are read, for a kind that fills some from its own
    #: table (a Slurm host's ``gpus`` is its nodes'): ``raw table -> raw table``.
    fill_table: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    #: The Host of a machine host.
    host: Callable[[HostBuild], Host] | None = None
    #: A batch host: what the plan side knows of its jobs.
    batch: BatchKind | None = None
    #: A batch host: its cluster, for ``(host table, host name, options)``, and its jobs'
    #: layout for ``(host table, campaign)``.
    batch_system: Callable[[Any, str, HostOptions], BatchSystem] | None = None
    batch_jobs: Callable[[Any, str], BatchJobs] | None = None
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
    #: The programs it runs on its hosts (a service manager, a batch system's commands):
    #: names that, like its own, appear nowhere outside ``hosts/`` (tests/test_names.py).
    programs: tuple[str, ...] = ()

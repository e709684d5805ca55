"""The plan's batch-host kinds, by name: what the plan side says of a host whose service groups
run as batch jobs (its dry-run line, each group's first submission as the dry run shows it,
how many jobs run at once). The plan's table for each kind and its job text live in that
kind's module (``slurm_jobs.py``); a new batch system is that module and one line here, and
plan code asks this table instead of naming a kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specbench_tui.plan import slurm_jobs
from specbench_tui.plan.document import Plan
from specbench_tui.plan.model import HostSpec
from specbench_tui.results.cells import ServiceGroup


@dataclass(frozen=True)
class JobPreview:
    """A group's first submission as the dry run shows it (the coordinator submits exactly
    this): its directory, the submission's command line, the script and its warnings."""

    dir: str
    argv: list[str]
    script: str
    warnings: list[str]
    #: How the JSON dry run names the command line (the system's own command).
    argv_key: str

    def to_json(self) -> dict[str, Any]:
        return {
            "dir": self.dir,
            self.argv_key: self.argv,
            "script": self.script,
            "warnings": self.warnings,
        }


@dataclass(frozen=True)
class BatchKind:
    name: str
    #: The dry run's words for the host: ``(host, campaign) -> text``.
    where: Callable[[HostSpec, str], str]
    #: ``(plan, host, group, estimated seconds)``.
    preview: Callable[[Plan, HostSpec, ServiceGroup, float], JobPreview]
    #: Jobs at once on the host.
    max_jobs: Callable[[HostSpec], int]
    #: A line of the estimate's assumptions, when the plan has such hosts.
    assumption: str


def _slurm_preview(plan: Plan, host: HostSpec, g: ServiceGroup, estimate_s: float) -> JobPreview:
    assert host.slurm is not None
    job = slurm_jobs.first_submission(plan.spec.campaign.name, host.slurm, g, estimate_s)
    return JobPreview(**job, argv_key="sbatch")


def _slurm_max_jobs(host: HostSpec) -> int:
    assert host.slurm is not None
    return host.slurm.max_jobs


def _slurm_where(host: HostSpec, campaign: str) -> str:
    assert host.slurm is not None
    return slurm_jobs.describe(host.slurm, campaign)


BATCH_KINDS: dict[str, BatchKind] = {
    "slurm": BatchKind(
        "slurm",
        where=_slurm_where,
        preview=_slurm_preview,
        max_jobs=_slurm_max_jobs,
        assumption="Slurm hosts run up to max_jobs groups at once, each job starting at once "
        "(no queue wait)",
    ),
}


def batch_kind(kind: str) -> BatchKind | None:
    """The batch kind of that name; None for a machine host (local, sim, SSH)."""
    return BATCH_KINDS.get(kind)

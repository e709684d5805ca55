"""The plan's batch-host kinds, by name: what the plan side says of a host whose service groups
run as batch jobs (its dry-run line, each group's first submission as the dry run shows it,
how many jobs run at once). The plan's table for each kind and its job text live in that
kind's module (``slurm_jobs.py``); a new batch system is that module and one line here, and
plan code asks this table instead of naming a kind.
"""

from __future__ import annotations

from specbench_tui.plan import slurm_jobs
from specbench_tui.plan.batch_kind import BatchKind, JobPreview

__all__ = ["BATCH_KINDS", "BatchKind", "JobPreview", "batch_kind"]


BATCH_KINDS: dict[str, BatchKind] = {k.name: k for k in (slurm_jobs.BATCH_KIND,)}


def batch_kind(kind: str) -> BatchKind | None:
    """The batch kind of that name; None for a machine host (local, sim, SSH)."""
    return BATCH_KINDS.get(kind)

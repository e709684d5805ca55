"""Checks of ``[hosts.NAME]``: one kind each, that kind's own table (asked of its backend),
GPU ids that agree. Each problem is a ``PlanError`` at its key path."""

from __future__ import annotations

from specbench_tui.hosts.backends import HostSpec, check_host_table
from specbench_tui.plan.model import PlanSpec
from specbench_tui.table_types import PlanError


def check_hosts(spec: PlanSpec) -> list[PlanError]:
    """Every host of the plan, one after the other."""
    errs: list[PlanError] = []
    for name, host in spec.hosts.items():
        errs += check_host_table(name, host) + _check_gpu_ids(name, host)
    return errs


def _check_gpu_ids(name: str, host: HostSpec) -> list[PlanError]:
    """``gpu_ids``: as many as ``gpus``, none twice."""
    ids = host.gpu_ids
    if ids is None:
        return []
    where = ("hosts", name, "gpu_ids")
    if len(ids) != host.gpus:
        return [
            PlanError(where, f"lists {len(ids)} GPU ids but gpus = {host.gpus}; make them agree")
        ]
    if len(set(ids)) != len(ids):
        return [PlanError(where, "has a GPU id twice")]
    return []

"""Checks of ``[hosts.NAME]``: one kind each, GPU ids that agree, SSH destinations.

A Slurm host's own table is checked by ``slurm_jobs.check_slurm_host``, called from the one
place below (``_check_slurm``) so that it moves with the Slurm code. Each problem is a
PlanError at its key path, a host's problems together and in the order of its keys here.
"""

from __future__ import annotations

import re

from specbench_tui.plan.document import PlanError
from specbench_tui.plan.model import SSH_DESTINATION, HostSpec, PlanSpec
from specbench_tui.plan.slurm_jobs import check_slurm_host

_SSH = re.compile(SSH_DESTINATION)


def check_hosts(spec: PlanSpec) -> list[PlanError]:
    """Every host of the plan, one after the other."""
    errs: list[PlanError] = []
    for name, host in spec.hosts.items():
        errs += (
            _check_kind(name, host)
            + _check_slurm(name, host)
            + _check_gpu_ids(name, host)
            + _check_ssh(name, host)
        )
    return errs


def _check_kind(name: str, host: HostSpec) -> list[PlanError]:
    """Exactly one of the ways to reach a host."""
    kinds = (("ssh", host.ssh), ("local", host.local), ("sim", host.sim), ("slurm", host.slurm))
    chosen = [k for k, on in kinds if on]
    if len(chosen) == 1:
        return []
    return [
        PlanError(
            ("hosts", name),
            'set exactly one of ssh = "user@host", '
            "local = true, sim = true, slurm = { login = ... } "
            f"(found {len(chosen) or 'none'})",
        )
    ]


def _check_slurm(name: str, host: HostSpec) -> list[PlanError]:
    """A ``slurm = {...}`` host: what its table must satisfy beyond its types."""
    return check_slurm_host(name, host) if host.slurm is not None else []


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


def _check_ssh(name: str, host: HostSpec) -> list[PlanError]:
    """``ssh``: a destination ssh can take."""
    if host.ssh is None or _SSH.match(host.ssh):
        return []
    return [
        PlanError(
            ("hosts", name, "ssh"),
            f"{host.ssh!r} is not an SSH destination; write an alias, user@host or user@host:port",
        )
    ]

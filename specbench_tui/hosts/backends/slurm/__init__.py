"""``slurm = {...}``: a Slurm cluster reached through its login node, each service group one
batch job. The table is ``slurm_table.py``; the plan side of its jobs (scripts, checks, the dry
run's preview) ``slurm_jobs.py``; the cluster as the batch scheduler drives it ``slurm.py``
and its jobs' layout ``slurm_batch.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specbench_tui.hosts.backend import Backend
from specbench_tui.hosts.backends.slurm import slurm_jobs
from specbench_tui.hosts.backends.slurm.slurm_table import SlurmSpec
from specbench_tui.hosts.options import HostOptions
from specbench_tui.results.cells import ServiceGroup

if TYPE_CHECKING:
    from specbench_tui.hosts.batch import BatchJobs, BatchSystem
    from specbench_tui.hosts.host import HostReport


def _system(hs: Any, host: str, options: HostOptions) -> BatchSystem:
    from specbench_tui.hosts.backends.slurm.slurm import cluster_of

    return cluster_of(hs.slurm, host, options.ssh_config)


def _jobs(hs: Any, campaign: str) -> BatchJobs:
    from specbench_tui.hosts.backends.slurm.slurm_batch import SlurmJobs

    return SlurmJobs(hs.slurm, campaign)


async def _check(
    hs: Any, host: str, campaign: str, groups: list[ServiceGroup], options: HostOptions
) -> HostReport:
    from specbench_tui.hosts.backends.slurm.slurm import check_slurm

    return await check_slurm(hs.slurm, host, campaign, groups, options.ssh_config)


def _gpus_of_a_node(data: dict[str, Any]) -> dict[str, Any]:
    """On a Slurm host ``gpus`` is what one node has: ``slurm.gpus_per_node``."""
    if isinstance(data.get("slurm"), dict) and "gpus" not in data:
        per_node = data["slurm"].get("gpus_per_node")
        if isinstance(per_node, int) and not isinstance(per_node, bool):
            return {**data, "gpus": per_node}
    return data


BACKEND = Backend(
    "slurm",
    describe=slurm_jobs.where,
    table=SlurmSpec,
    meaning="A Slurm cluster: each service group runs as a batch job (the table below).",
    example={"login": "me@login", "gpus_per_node": 4, "shared_dir": "/shared", "venv": "/v"},
    check_table=slurm_jobs.check_slurm_host,
    fill_table=_gpus_of_a_node,
    batch=slurm_jobs.BATCH_KIND,
    batch_system=_system,
    batch_jobs=_jobs,
    batch_check=_check,
    preflights=True,
    job_gpu_variables=("SLURM_JOB_GPUS", "SLURM_STEP_GPUS"),
    plan_words="slurm = { login = ... }",
    programs=("sbatch", "squeue", "scancel", "sacct", "scontrol"),
)

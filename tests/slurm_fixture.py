"""The session's Slurm cluster (tests/support/slurm_cluster.py), started once: munged,
slurmctld and slurmd of Debian's slurm-wlm on this machine, with eight fake GPUs."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from conftest import IN_CI, need_program
from support.slurm_cluster import SlurmCluster, start_cluster


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    for program in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol"):
        need_program(program)
    if os.geteuid() != 0:  # slurmd starts jobs as their users; only root can
        if IN_CI:
            pytest.fail("the Slurm tests need root (slurmd) under CI")
        pytest.skip("the Slurm tests need root (slurmd)")
    cluster = start_cluster(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def clean_slurm(slurm: SlurmCluster) -> Iterator[SlurmCluster]:
    """The cluster with no job of an earlier test left in it, and none left by this one."""
    slurm.cancel_all()
    yield slurm
    slurm.cancel_all()

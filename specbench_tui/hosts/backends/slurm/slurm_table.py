"""The ``slurm = {...}`` table of a plan host: a Slurm cluster reached through its login node.

Pure: the table's keys, their types and what a wrong value is told; ``slurm_jobs.py`` makes
the jobs from it and checks what needs more than one key.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from specbench_tui.table_types import MAX_GPUS, Duration, Env, HostText, Strict, Worded

# A partition, account or QoS name: what sbatch and a shell take as one word.
SlurmName = Annotated[
    str,
    Worded(
        r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$",
        "{value} is not a Slurm name: use letters, digits, '_', '.', '+' and '-'",
    ),
]
# An absolute path on the cluster: one word for a shell and for sbatch's --output (no '%').
ClusterPath = Annotated[
    str,
    Worded(
        r"^/[A-Za-z0-9_.+/-]*$",
        "{value} is not an absolute path the job script can use as one word: start with '/', "
        "use letters, digits, '_', '.', '+', '-' and '/' (no spaces, '~' or '%')",
    ),
]
# Memory as sbatch --mem takes it.
Memory = Annotated[
    str,
    Worded(
        r"^[0-9]+[KMGT]?$",
        '{value} is not a memory size as sbatch --mem takes it: digits, then K, M, G or T ("256G"; '
        '"0" for all of the node\'s)',
    ),
]


class SlurmSpec(Strict):
    """A Slurm cluster reached through its login node: each service group runs as one batch
    job on a node it allocates, with this tool (from ``venv``) running the group's cells
    there, headless, into ``shared_dir`` (a filesystem the login node and the nodes share)."""

    login: HostText = Field(min_length=1)  # an SSH destination, as for ``ssh``
    # sbatch --partition; the cluster's default partition when unset.
    partition: SlurmName | None = None
    # GPUs of one node (the host's gpus: a TP size must fit one node).
    gpus_per_node: int = Field(ge=1, le=MAX_GPUS)
    # sbatch --account.
    account: SlurmName | None = None
    # sbatch --qos.
    qos: SlurmName | None = None
    time_limit: Duration | None = None  # per job; None: the partition's default
    # CPUs per TP rank: the job asks for cpus_per_tp x TP (sbatch --cpus-per-task); unset, the
    # cluster's default, often one CPU for the server's ranks and the client together.
    cpus_per_tp: int | None = Field(default=None, ge=1, le=1024)
    # Memory of each job, as sbatch --mem takes it ("256G"; "0" for all of the node's); unset:
    # the cluster's default.
    mem: Memory | None = None
    sbatch_args: list[HostText] = []  # extra sbatch options, e.g. ["--constraint=h200"]
    setup: list[HostText] = []  # shell lines the job runs on the node before the tool
    # A directory the login node and every node see: jobs, their plans and results.
    shared_dir: ClusterPath
    # Where this tool is installed on the cluster (the jobs run its specbench-tui).
    venv: ClusterPath
    # Jobs queued or running at once.
    max_jobs: int = Field(default=4, ge=1, le=10_000)
    # Requeues of a group's job in a row without a cell finished before its cells fail.
    max_requeues: int = Field(default=3, ge=0, le=100)
    poll: Duration = 10.0  # how often squeue is asked (job files are read every second)
    env: Env = {}  # environment of the Slurm commands on the login node

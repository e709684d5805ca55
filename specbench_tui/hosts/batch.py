"""What the engine's batch-job scheduler needs of a batch system, whatever its make.

Two parts, both implemented per system (``slurm.py`` and ``slurm_batch.py`` for Slurm):

- ``BatchSystem``: the cluster as reached from outside: submit a job carrying a comment, list
  the queue, ask how a job ended, cancel, requeue, hold and release (only the jobs that still
  carry our comment), and the files on the filesystem the jobs share;
- ``BatchJobs``: one campaign's jobs on one such host: where a submission's files live, the job
  script, the submission's command line, the comment that finds a job again, and the plan's
  limits (jobs at once, requeues, the time limit).

States stay the system's own words (they are what the operator sees); ``JobStates`` says which
of them mean what to the scheduler.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from specbench_tui.hosts.batch_jobs import JobPaths
from specbench_tui.hosts.service import ServiceError
from specbench_tui.results.cells import ServiceGroup


class BatchError(ServiceError):
    """A batch system's command failed; ``reason`` is its own last line, ``transient`` when
    the controller did not answer (worth a retry) rather than refused."""

    def __init__(self, reason: str, *, transient: bool = False) -> None:
        super().__init__(reason)
        self.transient = transient


@dataclass(frozen=True)
class JobInfo:
    """One job as the queue shows it."""

    job_id: str
    state: str
    node: str = ""
    reason: str = ""
    comment: str = ""
    active: bool = True  # still holds (or waits for) an allocation, or comes back
    held: bool = False  # held by its user (a paused campaign)


@dataclass(frozen=True)
class JobEnd:
    """How a job ended; ``state`` is ``UNKNOWN`` when the system no longer knows."""

    state: str
    exit_code: str = ""
    restarts: int = 0
    node: str = ""


@dataclass(frozen=True)
class JobStates:
    """Which of a system's job states mean what to the scheduler."""

    pending: str  # a job just submitted or requeued
    running: frozenset[str]  # the tool runs in it (its mailbox is read)
    cancelled: frozenset[str]  # ended by a cancel (ours, or someone's outside the campaign)
    timed_out: frozenset[str]  # stopped at its time limit
    node_ends: frozenset[str]  # ended by the node or the scheduler, not the job


@dataclass(frozen=True)
class BatchLimits:
    """The plan's limits on one batch host."""

    max_jobs: int
    max_requeues: int
    poll_s: float  # how often the queue is asked
    time_limit_s: float | None  # per job; None: the queue's own
    stop_signal_s: float  # how long before the limit the tool is asked to stop
    signal_early_s: float  # how much earlier than asked the system may send that signal


class BatchSystem(Protocol):
    """A batch cluster reached from outside (the scheduler's side of it)."""

    name: str
    states: JobStates
    #: What a failed call raises: the system's own ``BatchError`` and its transport's.
    errors: tuple[type[Exception], ...]
    #: Words for the notices: the command that submits, the one that lists the queue.
    submit_command: str
    queue_command: str
    cancel_command: str

    async def close(self) -> None: ...

    async def submit(self, argv: Sequence[str], *, comment: str, id_file: str) -> str: ...

    async def queue(self) -> dict[str, JobInfo]: ...

    async def ended_all(self, job_ids: Sequence[str]) -> list[JobEnd]: ...

    async def cancel(self, job_id: str, *, comment: str | None = None) -> None: ...

    async def stop(self, job_id: str, *, comment: str | None = None) -> None:
        """Ask the job's tool to stop (SIGTERM to its batch shell), as an abort does."""

    async def requeue(self, job_id: str, *, comment: str | None = None) -> None: ...

    async def hold(self, job_ids: Iterable[str]) -> None: ...

    async def release(self, job_ids: Iterable[str]) -> None: ...

    async def write_files(self, files: Mapping[str, str]) -> None: ...

    async def append_line(self, path: str, line: str) -> None: ...

    async def read_new(self, files: Sequence[tuple[str, int]]) -> list[bytes | None]: ...

    async def read_bytes(self, path: str) -> bytes | None: ...

    async def list_dirs(self, dirs: Sequence[str]) -> list[list[str]]: ...

    async def submissions(self, groups_dir: str) -> dict[str, list[int]]: ...


class BatchJobs(Protocol):
    """One campaign's jobs on one batch host: their layout, script, command line and comment."""

    key: str  # the campaign's key in every job comment
    limits: BatchLimits
    #: The plan key that raises the time limit, for a cell that does not fit it.
    time_limit_key: str
    #: Who stops a job at its limit, in a reason ("Slurm").
    label: str

    @property
    def groups_dir(self) -> str: ...

    def paths(self, group: str, submission: int) -> JobPaths: ...

    def script(self, group: ServiceGroup, submission: int) -> str: ...

    def submit_argv(self, script_path: str) -> list[str]: ...

    def comment(self, group: str, submission: int) -> str: ...

    def parse_comment(self, text: str) -> tuple[str, str, int] | None: ...

    def output_of(self, paths: JobPaths, job_id: str) -> str: ...

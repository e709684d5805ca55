"""How a batch host's scheduler settles a job that left the queue (``batch_scheduler.py``):
done, requeued for the rest of its cells, a cell cut by the time limit failed once and the
job requeued for the others, or the rest of its share failed with the reason. A mixin of
``BatchScheduler``, whose state it reads (the attributes declared below)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import IO, Any

from specbench_tui import __version__
from specbench_tui.durations import format_duration
from specbench_tui.engine.checks import after_group
from specbench_tui.engine.context import RunContext
from specbench_tui.engine.job_fold import JobFolder, JobRun
from specbench_tui.hosts.batch import BatchJobs, BatchSystem
from specbench_tui.hosts.batch_jobs import JobSpec
from specbench_tui.results.cells import ServiceGroup
from specbench_tui.results.events import CellFailed, GroupFinished, ServiceFailed


class JobEndings:
    """The end of a job: ``_settle`` and what it calls."""

    ctx: RunContext
    cluster: BatchSystem
    layout: BatchJobs
    folder: JobFolder
    campaign: str
    host: str
    limits: Any
    states: Any
    errors: Any
    _next: dict[str, int]
    _requeues: dict[str, int]
    _given_up: set[str]
    _logs: dict[str, IO[str]]

    # --- a job that ended -----------------------------------------------------------------

    async def _settle(self, job: JobRun) -> None:
        """A job left the queue: done, requeued for the rest, or its rest failed."""
        await self._telemetry([job])  # its last samples (its tool writes them as it ends)
        self.folder.interrupted(job)
        self._deactivate(job)
        group = job.group
        await self._write_group_log(group)
        if self.ctx.control.aborted:
            return
        pending = [c.id for c in self.ctx.pending(group)]
        if not pending:
            await after_group(self.ctx, group.host, [group.tp])
            return
        what = f"job {job.job_id} ended {job.state}"
        tail = await self._output_tail(job)
        if job.tool_exit == 2 or (job.starts == 0 and job.state not in self.states.node_ends):
            why = "before the tool started" if job.starts == 0 else "with bad input"
            self._fail_group(group, f"{what} {why}", tail)
            return
        if job.state in self.states.cancelled:  # not by this campaign: its abort ended above
            self._fail_group(
                group,
                f"{what}: cancelled outside the campaign ({self.cluster.cancel_command} or "
                "preemption); run the "
                "plan again with --rerun-failed to retry",
                tail,
            )
            return
        timed_out = await self._fail_cut_by_time_limit(job)
        if self._stopped_by_time_limit(job):
            what += " at its time limit"
        if timed_out:
            pending = [c.id for c in self.ctx.pending(group)]
            if not pending:
                await after_group(self.ctx, group.host, [group.tp])
                return
        # Its share it has not ended itself (a cell ended there and queued again here is a
        # rerun the operator asked for: a new submission runs it).
        left = set(job.cells) - job.ended_cells
        if job.tool_exit in (0, 1):
            if set(pending) & left:
                self._fail_group(group, f"{what} without running these cells", tail)
            return  # cells queued after it was submitted: a new submission runs them
        progress = job.finished_since_start or timed_out  # a cell ended either way
        self._requeues[group.id] = (0 if progress else self._requeues.get(group.id, 0)) + 1
        if self._requeues[group.id] > self.limits.max_requeues:
            self._fail_group(
                group,
                f"{what}; {self._requeues[group.id]} ends in a row without a finished cell, "
                "giving up",
                tail,
            )
            return
        if not set(pending) <= left:
            return  # a new submission takes the rest, with what was queued since
        try:
            await self.cluster.requeue(job.job_id, comment=self._comment(job))
        except self.errors as e:
            self.ctx.hub.notice(
                f"{group.id}: {what}; cannot requeue it ({e}), submitting the rest anew",
                "warning",
            )
            return
        job.ended = False
        job.state, job.reason = self.states.pending, "requeued"
        self._activate(job)
        self._changed(job)
        self.ctx.hub.notice(
            f"{group.id}: {what}; requeued for the {len(pending)} cells left", "warning"
        )

    def _stopped_by_time_limit(self, job: JobRun) -> bool:
        """The job's last run ended at its time limit: its state says so, or SIGTERM stopped
        the tool (the job script asks for it before the limit) at a time near the limit,
        and neither the operator (CANCELLED) nor the cluster (a node end) ended it."""
        st = self.states
        if job.state in st.timed_out:
            return True
        if job.signalled is None or job.state in st.cancelled or job.state in st.node_ends:
            return False
        limit = self.limits.time_limit_s
        if limit is None or job.run_started is None:
            return True  # the partition's limit: the one signal a job script asks for
        soonest = limit - self.limits.stop_signal_s - self.limits.signal_early_s
        return job.signalled - job.run_started >= soonest

    async def _fail_cut_by_time_limit(self, job: JobRun) -> bool:
        """A cell that had the job's run to itself (no cell ended before it there) and was
        still running when the time limit stopped the job cannot fit: it fails once, saying
        so, and leaves the job's share (``job.json``), so the requeued job runs the rest
        instead of the same cell again. One cut after other cells is only requeued: it runs
        first in the next run, and is judged there. True when one failed."""
        if not job.cut or not self._stopped_by_time_limit(job):
            return False
        limit = (
            f"time_limit {format_duration(self.limits.time_limit_s)}"
            if self.limits.time_limit_s is not None
            else "its partition's time limit"
        )
        failed = []
        for cid, ran in job.cut.items():
            c = self.ctx.state.cells.get(cid)
            if c is None or c.status != "pending":
                continue
            self.ctx.hub.emit(
                CellFailed(
                    cell_id=cid,
                    group=job.group.id,
                    cell=c.name,
                    attempt=max(c.attempt, 1),
                    reason=(
                        f"longer than the time limit: job {job.job_id} has {limit}, and the "
                        f"cell, run first, had run {format_duration(ran)} when "
                        f"{self.layout.label} stopped the job ({job.state}); raise "
                        f"{self.layout.time_limit_key} to run it"
                    ),
                )
            )
            failed.append(cid)
        job.cut.clear()
        if not failed:
            return False
        job.cells = tuple(c for c in job.cells if c not in failed)
        spec = JobSpec(
            campaign=self.campaign,
            group=job.group.id,
            submission=job.submission,
            cells=job.cells,
            plan_hash=self.ctx.plan.hash,
            tool_version=__version__,
        )
        try:
            await self.cluster.write_files({job.paths.spec: spec.dumps()})
        except self.errors as e:  # the requeued job skips nothing: it fails again
            self.ctx.hub.notice(
                f"{job.group.id}: cannot take the cells too long for the time limit out of "
                f"job {job.job_id} ({e}); it will try them again",
                "warning",
            )
        return True

    async def _output_tail(self, job: JobRun, n: int = 20) -> list[str]:
        if not job.job_id:
            return []
        try:
            data = await self.cluster.read_bytes(self.layout.output_of(job.paths, job.job_id))
        except self.errors:
            return []
        return (data or b"").decode("utf-8", errors="replace").splitlines()[-n:]

    async def _write_group_log(self, group: ServiceGroup) -> None:
        """At a job's end the campaign's ``logs/<group>.log`` becomes the whole server log
        of every job of the group (lines missed while the coordinator was away included)."""
        parts: list[bytes] = []
        try:
            for n in range(1, self._next.get(group.id, 1)):
                data = await self.cluster.read_bytes(self.layout.paths(group.id, n).server_log)
                if data:
                    parts.append(data if data.endswith(b"\n") else data + b"\n")
        except self.errors:
            return
        f = self._logs.pop(group.id, None)
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()
        path: Path = self.ctx.layout.log_of(group.id)
        with contextlib.suppress(OSError):
            from specbench_tui.results.files import write_bytes_atomic

            write_bytes_atomic(path, b"".join(parts))

    def _fail_group(self, group: ServiceGroup, reason: str, tail: list[str]) -> None:
        """The group's remaining cells fail with ``reason``; no job is submitted for it again
        in this run."""
        self._given_up.add(group.id)
        hub = self.ctx.hub
        hub.emit(ServiceFailed(group=group.id, reason=reason, log_tail=list(tail)))
        for cell in self.ctx.pending(group):
            attempt = self.ctx.state.cells[cell.id].attempt + 1
            hub.emit(
                CellFailed(
                    cell_id=cell.id,
                    group=group.id,
                    cell=cell.name,
                    attempt=attempt,
                    reason=reason,
                    log_tail=list(tail),
                )
            )
        hub.emit(GroupFinished(group=group.id, status="failed"))

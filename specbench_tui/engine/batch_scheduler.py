"""A batch host's share of a campaign: its service groups as batch jobs, many at once.

The cluster's scheduler decides where and when; this decides what to ask of it and follows
the answers, through the host's ``BatchSystem`` and ``BatchJobs`` (``hosts/batch.py``; which
ones, the backend registry says). Each group with cells to run gets one job at a time, up to
the plan's ``max_jobs`` at once, in plan order. Every second the jobs' event logs and server
logs are read from the shared filesystem, all in one command, and folded into the campaign
(``job_fold.py``); the queue is asked every ``poll``, and with it the jobs' GPU sample files
are listed and the new ones copied. The jobs that left the queue are asked how they ended side
by side, their last files read in one command, and a submission's files are written in one:
under load a round trip to a login node takes seconds, and a job's end is not to wait behind
the others'.

Operator commands map onto the jobs:
- pause: running jobs get ``pause`` in their mailbox (the cell in flight stops and runs again
  whole on resume; the server keeps its GPUs, as on any host), pending ones are held, and
  nothing new is submitted; resume undoes each;
- skip and retry_group: the mailbox of the job that runs the cell or group;
- abort: pending jobs are cancelled, running ones stopped (SIGTERM to the tool, which stops
  its server and keeps what it measured, as anywhere); a job still there after the grace is
  cancelled outright.
A job that ends with cells of its share left (node failure, preemption, time limit, a crash)
is requeued (the same job and directory, so the tool resumes there and runs only the rest);
after ``max_requeues`` ends in a row with no cell finished, the rest fail with the reason. A
job stopped by its time limit (the signal the job asks for before it, or the system's
time-limit state) in the first cell of its run fails that cell once, "longer than the time
limit", takes it out of the job's ``job.json`` and requeues the job for the rest: the cells
never tried stay queued and run there. A job cancelled outside the campaign fails the rest of
its cells (the operator meant it). A coordinator that starts finds the jobs of earlier runs
again, by the directories on the shared filesystem and the comments the queue shows, folds
what they wrote and follows the ones still queued or running: no group is submitted twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import IO

from specbench_tui import __version__
from specbench_tui.engine.batch_endings import JobEndings
from specbench_tui.engine.context import RunContext
from specbench_tui.engine.job_fold import JobFolder, JobRun
from specbench_tui.engine.run_control import StorageFailed
from specbench_tui.hosts.backends import backend
from specbench_tui.hosts.batch import BatchError, BatchJobs, BatchSystem
from specbench_tui.hosts.batch_jobs import JobPaths, JobSpec
from specbench_tui.hosts.lines import LineSplitter
from specbench_tui.hosts.options import HostOptions
from specbench_tui.plan.job_files import job_files
from specbench_tui.results.cells import ServiceGroup
from specbench_tui.results.events import (
    BatchJobChanged,
    Event,
)

log = logging.getLogger(__name__)

#: Seconds between reads of the jobs' files (their events and server logs).
FILE_POLL_S = 1.0
#: Seconds before a submission the cluster refused for a passing reason is tried again.
RETRY_SUBMIT_S = 30.0
#: How long an abort waits, past the stop grace, for jobs to end before cancelling them.
ABORT_WAIT_S = 30.0


class BatchScheduler(JobEndings):
    """The service groups of one batch host, each run as batch jobs (see the module)."""

    def __init__(
        self,
        ctx: RunContext,
        groups: list[ServiceGroup],
        host: str,
        options: HostOptions | None = None,
        *,
        cluster: BatchSystem | None = None,
    ) -> None:
        self.ctx = ctx
        self.groups = groups
        self.host = host
        hs = ctx.spec.hosts[host]
        entry = backend(hs.kind)
        assert entry.batch_jobs and entry.batch_system, f"host {host} runs no batch jobs"
        self.cluster: BatchSystem = cluster or entry.batch_system(
            hs, host, options or HostOptions()
        )
        self.layout: BatchJobs = entry.batch_jobs(hs, ctx.spec.campaign.name)
        jobs = self.layout
        self.limits = jobs.limits
        self.campaign = ctx.spec.campaign.name
        self.key = jobs.key
        self.states = self.cluster.states
        self.errors = self.cluster.errors
        self.folder = JobFolder(ctx, self.cluster.read_bytes)
        self.jobs: dict[str, JobRun] = {}  # the one live job of each group that has one
        self.submitted: list[JobRun] = []  # submissions of this run, in order (for tests)
        self._next: dict[str, int] = {}
        self._written: dict[str, int] = {}  # the submission whose files are on the cluster
        self._requeues: dict[str, int] = {}  # ends in a row without a finished cell
        self._given_up: set[str] = set()
        self._retry_at: dict[str, float] = {}
        self._abort_at: float | None = None
        self._queue_at = 0.0
        self._said: set[str] = set()
        self._logs: dict[str, IO[str]] = {}

    # --- the loop -------------------------------------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not await self._adopted():
                if self.ctx.control.aborted:
                    return
                await asyncio.sleep(RETRY_SUBMIT_S / 6)
            while True:
                if self.ctx.control.storage_failed is not None:
                    raise StorageFailed(self.ctx.control.storage_failed)
                live = list(self.jobs.values())
                await self._read(live)
                ending = any(j.tool_exit is not None and j.state == "RUNNING" for j in live)
                if live and (loop.time() >= self._queue_at or ending):
                    await self._refresh_queue(live)
                    self._queue_at = loop.time() + self.limits.poll_s
                await self._relay()
                for job in [j for j in self.jobs.values() if j.ended]:
                    await self._settle(job)
                if self.ctx.control.aborted:
                    if not self.jobs or await self._abort_waited():
                        break
                else:
                    await self._submit_more()
                    if not self.jobs and not any(self._wants(g) for g in self.groups):
                        break
                await asyncio.sleep(FILE_POLL_S)
        finally:
            for job in self.jobs.values():
                if job.handle is not None:
                    self.ctx.control.leave(job.group)
            for f in self._logs.values():
                with contextlib.suppress(OSError):
                    f.close()
            try:
                await self.cluster.close()
            except (*self.errors, OSError) as e:  # the jobs go on without the login link
                self._say("close", f"could not close the link to the cluster: {e}", "info")

    def _wants(self, group: ServiceGroup) -> bool:
        return group.id not in self._given_up and bool(self.ctx.pending(group))

    def _say(self, key: str, text: str, level: str = "warning") -> None:
        """A notice once per key (a login node that stays unreachable is said once)."""
        if key not in self._said:
            self._said.add(key)
            self.ctx.hub.notice(f"{self.host}: {text}", level)

    # --- finding earlier jobs -------------------------------------------------------------

    async def _adopted(self) -> bool:
        """Find the jobs of earlier runs; False (said once) when the cluster did not answer,
        to be tried again from scratch (folding is idempotent, following is not doubled)."""
        try:
            await self._adopt()
        except self.errors as e:
            for job in list(self.jobs.values()):
                self._deactivate(job)
            self._say("adopt", f"cannot look for the jobs of earlier runs yet ({e}); trying again")
            return False
        return True

    async def _adopt(self) -> None:
        """Jobs of earlier runs: fold what each wrote, follow those still queued or running,
        so nothing is submitted twice."""
        subs = await self.cluster.submissions(self.layout.groups_dir)
        queue = await self.cluster.queue()
        live: dict[tuple[str, int], str] = {}
        for info in queue.values():
            parsed = self.layout.parse_comment(info.comment)
            if parsed is not None and parsed[0] == self.key and info.active:
                live[(parsed[1], parsed[2])] = info.job_id
        for group in self.groups:
            ns = subs.get(group.id, [])
            self._next[group.id] = max(ns, default=0) + 1
            for n in ns:
                paths = self.layout.paths(group.id, n)
                job = JobRun(group, n, paths, adopted=True)
                job.cells = await self._job_cells(paths)
                job.job_id = live.get((group.id, n), "")
                if not job.job_id:  # ended: its id, for the names its notices carry
                    with contextlib.suppress(BatchError):
                        known = await self.cluster.read_bytes(paths.job_id)
                        job.job_id = (known or b"").decode(errors="replace").strip()
                    live_id = ""
                else:
                    live_id = job.job_id
                if live_id and group.id in self.jobs:  # two live jobs for one group
                    await self.cluster.cancel(live_id)
                    self.ctx.hub.notice(
                        f"{group.id}: cancelled job {live_id}, a second one for the group",
                        "warning",
                    )
                    live_id = ""
                if live_id:
                    info = queue[job.job_id]
                    job.state, job.node, job.reason = info.state, info.node, info.reason
                    job.held = info.held
                    self._activate(job)
                    self._changed(job)
                    self.ctx.hub.notice(
                        f"{group.id}: job {job.job_id} of an earlier run is {info.state}; "
                        "following it"
                    )
                await self._drain(job)
                await self._telemetry([job])
                job.paused = job.log_paused  # an earlier run may have left it paused

    async def _drain(self, job: JobRun) -> None:
        """Fold everything a job wrote so far (its server log is followed from here on)."""
        while True:
            before = job.events_offset
            if not await self._read([job], follow_log=False):
                raise BatchError(f"cannot read {job.paths.events} on {self.cluster}")
            if job.events_offset == before:
                return

    async def _job_cells(self, paths: JobPaths) -> tuple[str, ...]:
        try:
            data = await self.cluster.read_bytes(paths.spec)
            return JobSpec.from_json(json.loads(data or b"{}")).cells
        except (ValueError, BatchError):
            return ()

    # --- reading the jobs' files ----------------------------------------------------------

    async def _read(self, jobs: list[JobRun], *, follow_log: bool = True) -> bool:
        """Fold what the jobs' logs gained since the last read (a fold that fails is tried
        again at the next) and pass their server log lines on. False when the files could
        not be read."""
        if not jobs:
            return True
        files: list[tuple[str, int]] = []
        for j in jobs:
            files.append((j.paths.events, j.events_offset))
            files.append((j.paths.server_log, j.log_offset))
        try:
            chunks = await self.cluster.read_new(files)
        except self.errors as e:
            self._say("read", f"cannot read the jobs' files: {e}")
            return False
        self._said.discard("read")
        for i, job in enumerate(jobs):
            events, lines = chunks[2 * i], chunks[2 * i + 1]
            if events:
                job.events_offset += len(events)
                job.events_buf += events
            await self._fold_lines(job)
            if lines:
                job.log_offset += len(lines)
                if follow_log:
                    self._log_lines(job, lines)
                else:
                    job.log_lines = LineSplitter()
        return True

    async def _fold_lines(self, job: JobRun) -> None:
        while b"\n" in job.events_buf:
            raw, rest = job.events_buf.split(b"\n", 1)
            try:
                obj = json.loads(raw)
            except ValueError:
                job.events_buf = rest
                continue
            if isinstance(obj, dict):
                try:
                    await self.folder.fold(job, Event.from_json(obj))
                except self.errors as e:  # tried again at the next read
                    self._say("fold", f"cannot copy the rows of {job.group.id}: {e}")
                    return
            job.events_buf = rest

    def _log_lines(self, job: JobRun, data: bytes) -> None:
        lines = job.log_lines.feed(data)
        if not lines:
            return
        on_line = self.ctx.log_lines.on_line(job.group.id)
        f = self._log_file(job.group)
        for raw in lines:
            text = raw.decode("utf-8", errors="replace").rstrip("\r")
            on_line(text)
            if f is not None:
                f.write(text + "\n")
        if f is not None:
            f.flush()

    def _log_file(self, group: ServiceGroup) -> IO[str] | None:
        f = self._logs.get(group.id)
        if f is None:
            try:
                f = open(self.ctx.layout.log_of(group.id), "a", encoding="utf-8")  # noqa: SIM115
            except OSError:
                return None
            self._logs[group.id] = f
        return f

    # --- the queue ------------------------------------------------------------------------

    async def _refresh_queue(self, live: list[JobRun]) -> None:
        try:
            queue = await self.cluster.queue()
        except self.errors as e:
            self._say("queue", f"cannot ask {self.cluster.queue_command}: {e}")
            return
        self._said.discard("queue")
        over: list[JobRun] = []
        gone: list[JobRun] = []
        for job in live:
            info = queue.get(job.job_id)
            if info is None:  # left the queue: the controller or accounting may still say how
                gone.append(job)
                continue
            # A pending requeued job shows no node: the one it ran on is kept, and no
            # event is emitted for an unchanged job each poll.
            node = info.node or job.node
            changed = (info.state, node, info.reason) != (job.state, job.node, job.reason)
            job.state, job.node, job.reason = info.state, node, info.reason
            if changed:
                self._changed(job)
            if not info.active:
                over.append(job)
        if gone:  # all asked at once: one slow answer does not hold up the others' ends
            try:
                ends = await self.cluster.ended_all([j.job_id for j in gone])
            except self.errors:
                ends = []
            for job, end in zip(gone, ends, strict=False):
                job.state, job.node = end.state, end.node or job.node
                self._changed(job)
                over.append(job)
        await self._telemetry([j for j in live if j.starts])
        if over and await self._read(over):  # what they wrote last, in one read
            for job in over:
                job.ended = True

    async def _telemetry(self, jobs: list[JobRun]) -> None:
        """The jobs' GPU sample files not copied yet, into the campaign's telemetry."""
        if not jobs:
            return
        try:
            listed = await self.cluster.list_dirs(
                [str(j.paths.layout.telemetry_parts) for j in jobs]
            )
            for job, names in zip(jobs, listed, strict=True):
                await self.folder.telemetry(job, names)
        except self.errors as e:
            self._say("telemetry", f"cannot copy the jobs' GPU samples: {e}")
            return
        self._said.discard("telemetry")

    def _changed(self, job: JobRun) -> None:
        self.ctx.hub.emit(
            BatchJobChanged(
                group=job.group.id,
                system=self.layout.label,
                host=self.host,
                job_id=job.job_id,
                submission=job.submission,
                state=job.state,
                node=job.node,
                reason=job.reason,
                dir=job.paths.dir,
            )
        )

    def _comment(self, job: JobRun) -> str:
        """The comment its submission gave the job: what proves an id is still ours."""
        return self.layout.comment(job.group.id, job.submission)

    def _activate(self, job: JobRun) -> None:
        self.jobs[job.group.id] = job
        job.handle = self.ctx.control.enter(job.group)

    def _deactivate(self, job: JobRun) -> None:
        if self.jobs.get(job.group.id) is job:
            del self.jobs[job.group.id]
        if job.handle is not None:
            self.ctx.control.leave(job.group)
            job.handle = None

    # --- submitting -----------------------------------------------------------------------

    async def _submit_more(self) -> None:
        control = self.ctx.control
        if control.paused or control.storage_error is not None:
            return
        now = asyncio.get_running_loop().time()
        for group in self.groups:
            if len(self.jobs) >= self.limits.max_jobs:
                return
            if group.id in self.jobs or not self._wants(group):
                continue
            if self._retry_at.get(group.id, 0.0) > now:
                continue
            try:
                await self._submit(group)
            except BatchError as e:
                cmd = self.cluster.submit_command
                if e.transient:
                    self._retry_at[group.id] = now + RETRY_SUBMIT_S
                    self._say(f"submit-{group.id}", f"{cmd} failed, trying again: {e.reason}")
                else:
                    self._fail_group(group, f"{cmd} refused the job: {e.reason}", [])
            except self.errors as e:
                self._retry_at[group.id] = now + RETRY_SUBMIT_S
                self._say(f"submit-{group.id}", f"cannot submit {group.id}: {e.reason}")

    async def _submit(self, group: ServiceGroup) -> None:
        n = self._next.get(group.id, 1)
        paths = self.layout.paths(group.id, n)
        cells = tuple(c.id for c in self.ctx.pending(group))
        spec = JobSpec(
            campaign=self.campaign,
            group=group.id,
            submission=n,
            cells=cells,
            plan_hash=self.ctx.plan.hash,
            tool_version=__version__,
        )
        if self._written.get(group.id) != n:
            # Written once per submission: a retry must not empty the mailbox of a job that
            # an ambiguous submission did submit.
            files = {f"{paths.dir}/{rel}": text for rel, text in job_files(self.ctx.plan).items()}
            files[paths.spec] = spec.dumps()
            files[paths.script] = self.layout.script(group, n)
            files[paths.mailbox] = ""
            await self.cluster.write_files(files)
            self._written[group.id] = n
        try:
            job_id = await self.cluster.submit(
                self.layout.submit_argv(paths.script),
                comment=self.layout.comment(group.id, n),
                id_file=paths.job_id,
            )
        except BatchError as e:
            # Transient (a controller's timeout, which may have submitted) or a lost reply:
            # the retry keeps this submission and its comment, and ``submit`` looks the job
            # up by that comment before it submits again, so one group never gets two jobs.
            if not e.transient:
                self._next[group.id] = n + 1
            raise
        self._next[group.id] = n + 1
        job = JobRun(group, n, paths, cells=cells, job_id=job_id, state=self.states.pending)
        job.reason = "submitted"
        self.submitted.append(job)
        self._activate(job)
        self._changed(job)

    # --- commands -------------------------------------------------------------------------

    async def _mail(self, job: JobRun, action: str, target: str | None = None) -> None:
        line = json.dumps({"action": action, "target": target, "by": "coordinator"})
        try:
            await self.cluster.append_line(job.paths.mailbox, line)
        except self.errors as e:
            self._say(f"mail-{job.group.id}", f"cannot reach job {job.job_id}'s mailbox: {e}")

    def _started(self, job: JobRun) -> bool:
        """The tool runs in it (or did): the mailbox is read."""
        return job.starts > 0 or job.state in self.states.running

    async def _relay(self) -> None:
        control = self.ctx.control
        jobs = list(self.jobs.values())
        if control.aborted:
            if self._abort_at is None:
                self._abort_at = asyncio.get_running_loop().time()
                for job in jobs:
                    with contextlib.suppress(*self.errors):
                        if self._started(job):
                            await self.cluster.stop(job.job_id, comment=self._comment(job))
                        else:
                            await self.cluster.cancel(job.job_id, comment=self._comment(job))
            return
        paused = control.paused
        for job in jobs:
            # Each job as the campaign is: a running one paused or not through its mailbox
            # (one found paused or held by an earlier run is set right too), a waiting one
            # held or released.
            if self._started(job):
                if job.paused != paused:
                    await self._mail(job, "pause" if paused else "resume")
                    job.paused = paused
            elif job.held != paused:
                with contextlib.suppress(*self.errors):
                    if paused:
                        await self.cluster.hold([job.job_id])
                    else:
                        await self.cluster.release([job.job_id])
                job.held = paused
        for job in jobs:
            h = job.handle
            if h is None:
                continue
            if h.restart:
                h.restart = False
                h.stop = None
                await self._mail(job, "retry_group", job.group.id)
            elif h.stop == "skip" and h.cell is not None:
                h.stop = None
                job.skip_sent.add(h.cell.id)
                await self._mail(job, "skip", h.cell.id)
            for cid in job.cells:  # pending cells the operator skipped here
                c = self.ctx.state.cells.get(cid)
                if (
                    c is not None
                    and c.status == "skipped"
                    and cid not in job.ended_cells
                    and cid not in job.skip_sent
                ):
                    job.skip_sent.add(cid)
                    await self._mail(job, "skip", cid)

    async def _abort_waited(self) -> bool:
        """After an abort: True once waiting for the jobs to end is over (they were
        cancelled outright past the grace)."""
        assert self._abort_at is not None
        waited = asyncio.get_running_loop().time() - self._abort_at
        grace = self.ctx.options.stop_grace_s + ABORT_WAIT_S
        if waited < grace:
            return False
        for job in list(self.jobs.values()):
            with contextlib.suppress(*self.errors):
                await self.cluster.cancel(job.job_id, comment=self._comment(job))
        if waited < 2 * grace:
            return False
        names = ", ".join(j.job_id for j in self.jobs.values())
        self.ctx.hub.notice(
            f"{self.host}: jobs {names} did not end after the abort; check them with "
            f"{self.cluster.queue_command}",
            "error",
        )
        return True


__all__ = ["BatchScheduler"]

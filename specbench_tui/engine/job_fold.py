"""Folding a batch job's event log into the campaign's own, exactly once.

A job's tool writes the usual ``events.jsonl`` on the cluster; the coordinator reads it as it
grows and publishes what it says as the campaign's events, so the reducer, the console, the
views and the report see one campaign whatever ran where. Rules:

- A folded event keeps the job's timestamp (when it happened, on the node). The pair (event,
  subject, timestamp) is its key: the campaign's log itself records what was folded, so a
  coordinator that died and came back reads the job's log from the start again and skips
  every event it already has. No bookkeeping file can disagree with the log.
- Attempts are the campaign's: a job numbers its attempts from its own log (a fresh
  submission starts at 1), so a job's ``cell_started`` becomes the campaign's next attempt of
  that cell, and the job's later events of that attempt map to it.
- A cell's rows (``parts/<cell>.a<k>.parquet``, and its output texts) are copied into the
  campaign's ``parts/`` under the campaign's attempt, durable before the ``cell_finished``
  that counts them, as the store's contract wants.
- Only what the campaign still wants is folded: a start only for a cell the campaign has
  pending, an end only for the attempt the campaign saw start. A job that restarted (the system
  requeued it, or it was killed) leaves its running cells queued again, as a crash does.
- What a time limit needs is kept on the job (``JobRun``): when its tool's run started,
  whether SIGTERM stopped it (the system's signal before the limit), and how long a cell set aside
  had run when it was the run's first (no other cell ended before it there), so the
  coordinator can tell a cell that cannot fit the limit: the system may signal up to a minute
  early, but it does so in every run alike, so a cell that had a run to itself and did not
  finish never will.
- Job-level events stay with the job (its own campaign start and end, pause, abort); its
  group, service, state-leak verdict, telemetry and warning events are the campaign's too.
  A cell's ``cell_energy`` (the node measured it) is the campaign's under the campaign's
  attempt, as its other events are.
- The job's GPU samples (its ``telemetry/<n>.parquet``, each written whole, once) are copied
  into the campaign's ``telemetry/`` as ``job.<group>.<submission>.<n>.parquet``: that name
  is what makes a copy happen once, whichever coordinator reads it. Their rows go to the
  console as samples (late by a flush of the job's store, at most a minute).
  The greedy check is the campaign's: a job has only its own group's outputs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from specbench_tui.engine.cell_runner import durably, request_done_event
from specbench_tui.engine.context import RunContext
from specbench_tui.engine.run_control import GroupHandle
from specbench_tui.hosts.batch_jobs import JobPaths
from specbench_tui.hosts.lines import LineSplitter
from specbench_tui.results.cells import ServiceGroup
from specbench_tui.results.events import (
    Aborted,
    CampaignFinished,
    CampaignStarted,
    CellEnergy,
    CellFailed,
    CellFinished,
    CellQueued,
    CellSkipped,
    CellStarted,
    CheckVerdict,
    Event,
    GpuSample,
    GpusUnverified,
    GroupFinished,
    GroupStarted,
    Notice,
    Paused,
    Resumed,
    ServiceFailed,
    ServiceReady,
    TelemetryChosen,
    iso_utc,
)
from specbench_tui.results.files import (
    TMP_PREFIX,
    StorageError,
    write_bytes_atomic,
    write_parquet_atomic,
)
from specbench_tui.results.records import REQUEST_COLUMNS, RequestRecord
from specbench_tui.results.state import INTERRUPTIONS

Fetch = Callable[[str], Awaitable[bytes | None]]
Key = tuple[str, str, str]
_PASS_THROUGH = (
    GroupStarted,
    ServiceReady,
    ServiceFailed,
    GroupFinished,
    GpusUnverified,
    TelemetryChosen,
)
_CELL_ENDS = (CellFinished, CellFailed, CellSkipped)


def event_key(ev: Event) -> Key:
    """What makes a folded event the same event in the campaign's log."""
    subject = ""
    for name in ("cell_id", "group", "host", "config", "text"):
        value = getattr(ev, name, None)
        if value:
            subject = str(value)[:200]
            break
    return ev.name, subject, iso_utc(ev.ts)


@dataclass
class JobRun:
    """One submission of a group as the coordinator follows it."""

    group: ServiceGroup
    submission: int
    paths: JobPaths
    cells: tuple[str, ...] = ()  # what job.json asked it to run
    job_id: str = ""
    state: str = "PENDING"
    node: str = ""
    reason: str = ""
    handle: GroupHandle | None = None
    events_offset: int = 0
    events_buf: bytes = b""
    log_offset: int = 0
    # The server log's lines, the one in progress kept (each at most 1 MiB: hosts/lines.py).
    log_lines: LineSplitter = field(default_factory=LineSplitter)
    starts: int = 0  # runs of the tool seen in its log (a requeue starts one more)
    tool_exit: int | None = None  # the last run's exit status, when it ended by itself
    finished_since_start: int = 0  # cells it finished since its tool last started
    ended_cells: set[str] = field(default_factory=set)  # ended in the job's own log
    skip_sent: set[str] = field(default_factory=set)
    paused: bool = False  # its tool was told to pause (or was found paused)
    log_paused: bool = False  # its log's last word on pausing
    held: bool = False  # waiting in the queue on hold (a paused campaign)
    ended: bool = False  # the batch system says it is over
    adopted: bool = False  # found when the coordinator started, not submitted by it
    run_started: float | None = None  # when its tool's last run started (the job's clock)
    signalled: float | None = None  # when SIGTERM stopped that run (the system's, before the limit)
    cell_starts: dict[str, float] = field(default_factory=dict)  # running in that run: start
    run_ended: int = 0  # cells that ended in that run
    # Set aside in that run before any other cell ended there (it had the run to itself):
    # the seconds it ran.
    cut: dict[str, float] = field(default_factory=dict)
    telemetry_parts: set[str] = field(default_factory=set)  # its sample files copied so far


class JobFolder:
    """Folds the events of every job of one batch host into the campaign."""

    def __init__(self, ctx: RunContext, fetch: Fetch) -> None:
        self.ctx = ctx
        self.fetch = fetch
        self.seen: dict[Key, Event] = {event_key(ev): ev for ev in ctx.store.opening_events}
        # (job directory, cell id, the job's attempt) -> the campaign's attempt
        self.attempts: dict[tuple[str, str, int], int] = {}
        self.notices: set[str] = set()  # warning texts of jobs already passed on

    def _emit(self, ev: Event) -> None:
        self.seen[event_key(ev)] = ev
        self.ctx.hub.emit(ev)

    def _status(self, cell_id: str) -> tuple[str, int]:
        c = self.ctx.state.cells.get(cell_id)
        return (c.status, c.attempt) if c is not None else ("unknown", 0)

    async def fold(self, job: JobRun, ev: Event) -> None:
        """Fold one event of ``job``'s log (in log order), on the campaign's disk when this
        returns. Raises what a copy raises (the transport's error, StorageFailed): the caller
        tries the same event again later."""
        await self._fold(job, ev)
        await self.ctx.hub.durable()

    async def _fold(self, job: JobRun, ev: Event) -> None:
        if isinstance(ev, CampaignStarted):
            job.starts += 1
            job.tool_exit = None
            job.finished_since_start = 0
            self.interrupted(job)
            job.run_started, job.signalled, job.run_ended = ev.ts, None, 0
            job.cell_starts.clear()
            job.cut.clear()
            return
        if isinstance(ev, Aborted):  # the job's own; SIGTERM is the system's (or a signal by hand)
            if ev.by == "SIGTERM" and job.signalled is None:
                job.signalled = ev.ts
            return
        if isinstance(ev, CampaignFinished):
            job.tool_exit = ev.exit_code
            self.interrupted(job)
            return
        if isinstance(ev, Paused | Resumed):  # the job's own: the campaign has its pause
            job.log_paused = isinstance(ev, Paused)
            return
        if isinstance(ev, CellStarted | CellQueued | CellFinished | CellFailed | CellSkipped):
            if isinstance(ev, _CELL_ENDS):
                job.ended_cells.add(ev.cell_id)
            else:
                job.ended_cells.discard(ev.cell_id)
            self._timing(job, ev)
            await self._cell(job, ev)
            return
        if isinstance(ev, Notice):
            if ev.level in ("warning", "error"):
                self._notice(job, ev)
            return
        key = event_key(ev)
        if key in self.seen:
            return
        if isinstance(ev, CellEnergy):  # the campaign's attempt, or none it knows: left out
            a = self.attempts.get((job.paths.dir, ev.cell_id, ev.attempt))
            if a is not None:
                self._emit(_with(ev, attempt=a))
            return
        if isinstance(ev, TelemetryChosen):  # every job says it; the campaign needs it once
            old = self.ctx.state.telemetry.get(ev.host)
            if old is not None and (old.source, old.text) == (ev.source, ev.text):
                return
        if isinstance(ev, _PASS_THROUGH) or (
            isinstance(ev, CheckVerdict) and ev.check in ("state_leak", "noise_floor")
        ):
            self._emit(ev)

    @staticmethod
    def _timing(job: JobRun, ev: Any) -> None:
        """How long the cell that had the job's current run to itself ran before it was set
        aside (a cell after others may fit a run of its own: it is not judged)."""
        if isinstance(ev, CellStarted):
            job.cell_starts[ev.cell_id] = ev.ts
            return
        t0 = job.cell_starts.pop(ev.cell_id, None)
        if isinstance(ev, _CELL_ENDS):
            job.run_ended += 1
        elif t0 is not None and ev.by in INTERRUPTIONS and not job.run_ended:
            job.cut[ev.cell_id] = max(0.0, ev.ts - t0)

    def _notice(self, job: JobRun, ev: Notice) -> None:
        """A job's warning, said as the campaign's with the job named; the same warning
        from every job (no GPU telemetry on the nodes) is said once."""
        if ev.text in self.notices:
            return
        self.notices.add(ev.text)
        where = f"{job.group.id} (job {job.job_id or job.submission})"
        ours = Notice(level=ev.level, text=f"{where}: {ev.text}", ts=ev.ts)
        if event_key(ours) not in self.seen:
            self._emit(ours)

    async def _cell(self, job: JobRun, ev: Any) -> None:
        key = event_key(ev)
        status, attempt = self._status(ev.cell_id)
        mine = (job.paths.dir, ev.cell_id)
        if isinstance(ev, CellStarted):
            if key in self.seen:
                self.attempts[(*mine, ev.attempt)] = self.seen[key].attempt  # type: ignore[attr-defined]
                self._running(job, ev.cell_id)
                return
            if status != "pending":
                return  # skipped meanwhile (the job is told), or ended by an earlier job
            a = attempt + 1
            self.attempts[(*mine, ev.attempt)] = a
            self._emit(
                CellStarted(
                    cell_id=ev.cell_id,
                    group=ev.group,
                    cell=ev.cell,
                    attempt=a,
                    requests=ev.requests,
                    ts=ev.ts,
                )
            )
            self._running(job, ev.cell_id)
            return
        if key in self.seen:
            return
        job_attempt = ev.attempt - 1 if isinstance(ev, CellQueued) else ev.attempt
        a = self.attempts.get((*mine, job_attempt))
        if a is None:
            # Ended without a start in this job: a group whose server never came up fails
            # its pending cells that way.
            if isinstance(ev, CellFailed) and status == "pending":
                self._emit(_with(ev, attempt=attempt + 1))
            return
        if attempt != a or status not in ("running", "pending"):
            return  # the campaign moved on (a rerun, a skip)
        self._stopped(job, ev.cell_id)
        if isinstance(ev, CellQueued):
            self._emit(_with(ev, attempt=a + 1))
            return
        if isinstance(ev, CellFinished):
            if not await self._copy_rows(job, ev.cell_id, job_attempt, a):
                self._emit(
                    CellFailed(
                        cell_id=ev.cell_id,
                        group=ev.group,
                        cell=ev.cell,
                        attempt=a,
                        reason="finished in its job, but its request rows are missing or "
                        f"unreadable on the cluster ({job.paths.part(ev.cell_id, job_attempt)})",
                        ts=ev.ts,
                    )
                )
                return
            job.finished_since_start += 1
        self._emit(_with(ev, attempt=a))
        if isinstance(ev, CellFinished):
            self.ctx.store.refresh_views(self.ctx.state, after=self.ctx.hub.durable)

    def _running(self, job: JobRun, cell_id: str) -> None:
        c = self.ctx.state.cells.get(cell_id)
        if job.handle is not None and c is not None and c.status == "running":
            job.handle.cell, job.handle.stop = c.cell, None

    def _stopped(self, job: JobRun, cell_id: str) -> None:
        h = job.handle
        if h is not None and h.cell is not None and h.cell.id == cell_id:
            h.cell, h.stop = None, None

    def interrupted(self, job: JobRun) -> None:
        """The job's tool (re)started or ended: a cell the campaign saw it start and never
        saw end was cut short (the process died), and is queued again, as on a resume."""
        for (d, cell_id, _), a in list(self.attempts.items()):
            if d != job.paths.dir:
                continue
            status, attempt = self._status(cell_id)
            if status == "running" and attempt == a:
                self._stopped(job, cell_id)
                t0 = job.cell_starts.pop(cell_id, None)
                if t0 is not None and not job.run_ended:  # no word: it ran until about now
                    job.cut[cell_id] = max(0.0, time.time() - t0)
                c = self.ctx.state.cells[cell_id]
                self._emit(
                    CellQueued(
                        cell_id=cell_id, group=c.group, cell=c.name, attempt=a + 1, by="interrupted"
                    )
                )

    async def telemetry(self, job: JobRun, names: Iterable[str]) -> int:
        """Copy the job's sample files not copied yet (``names``: what its ``telemetry/``
        holds) into the campaign's telemetry, and their samples to the console; returns how
        many were copied. A file that cannot be read now is tried at the next call."""
        here = self.ctx.layout.telemetry_parts
        copied = 0
        for name in sorted(names):
            if (
                name in job.telemetry_parts
                or not name.endswith(".parquet")
                or name.startswith(TMP_PREFIX)
            ):
                continue
            dest = here / f"job.{job.group.id}.{job.submission}.{name}"
            if dest.exists():  # an earlier coordinator copied it
                job.telemetry_parts.add(name)
                continue
            data = await self.fetch(f"{job.paths.layout.telemetry_parts}/{name}")
            if data is None:
                continue
            try:
                df = pl.read_parquet(io.BytesIO(data))
            except Exception:  # not a parquet file of the job's store: nothing to take
                job.telemetry_parts.add(name)
                continue
            try:  # samples are what a full disk may cost, as for the campaign's own
                await asyncio.to_thread(write_parquet_atomic, df, dest)
            except StorageError:
                continue
            job.telemetry_parts.add(name)
            copied += 1
            for row in df.iter_rows(named=True):
                self.ctx.hub.emit(GpuSample.from_row(row))
        return copied

    async def _copy_rows(self, job: JobRun, cell_id: str, job_attempt: int, a: int) -> bool:
        """The attempt's rows and texts into the campaign's parts, under its attempt; False
        when the job's part is not there. Its requests go to the console as they would from
        a cell run here (late, but the live plots are the campaign's)."""
        layout = self.ctx.layout
        data = await self.fetch(job.paths.part(cell_id, job_attempt))
        if data is None:
            return False
        try:
            df = pl.read_parquet(io.BytesIO(data))
        except Exception:  # a torn or foreign file: the cell's rows are not there
            return False
        if "attempt" in df.columns:
            df = df.with_columns(pl.lit(a, dtype=df.schema["attempt"]).alias("attempt"))
        await durably(self.ctx, lambda: write_parquet_atomic(df, layout.part_path(cell_id, a)))
        rows = df.to_dicts()
        for i, row in enumerate(rows, start=1):
            rec = RequestRecord(**{k: v for k, v in row.items() if k in REQUEST_COLUMNS})
            self.ctx.hub.emit(request_done_event(rec, i, len(rows)))
        texts = await self.fetch(job.paths.texts(cell_id, job_attempt))
        if texts:
            await durably(
                self.ctx, lambda: write_bytes_atomic(layout.texts_path(cell_id, a), texts)
            )
        return True


def _with(ev: Any, **changes: Any) -> Event:
    """The event as the campaign's, with the campaign's attempt, same time."""
    return dataclasses.replace(ev, **changes)

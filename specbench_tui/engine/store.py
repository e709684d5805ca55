"""The crash-safe results store.

What is true, and what is derived:
- ``events.jsonl`` is appended in order and fsynced: the record of what happened. A running
  campaign writes it from one thread (engine/event_writer.py), a batch per fsync, so the
  event loop never waits on the disk; the hub says when an event is durable.
- A cell's request rows are written whole to ``parts/<cell>.a<attempt>.parquet`` (temp file,
  fsync, rename) *before* its ``cell_finished`` event. A cell counts as finished only when
  both exist, so a crash mid-cell reruns that cell whole and never repeats a finished one; a
  part whose attempt the log never ended is set aside in ``parts/interrupted/``, never deleted.
- GPU samples go to ``telemetry/<n>.parquet``, one new file per flush, so a ten-hour run
  never rewrites what it already wrote; losing the last minute of samples to a crash is fine.
- ``cells.parquet``, ``requests.parquet`` and ``telemetry.parquet`` are views computed from the
  above (results/views.py), written in a worker thread so the event loop the console shares
  never waits on them. They are never read back: a damaged view is set aside and rebuilt.
  ``cells.parquet`` (one row per planned cell) is rewritten when a cell ends; the two that
  concatenate every part only at the end of a run and every ``WHOLE_VIEWS_EVERY_S``, so
  what a cell costs does not grow with what the campaign measured before it. Readers that
  need the rows now read the parts, as the report does.

Writes that fail raise ``StorageError``: the engine decides whether to wait for space.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from specbench_tui.engine.event_writer import EventWriter, Report
from specbench_tui.engine.run_control import StorageFailed
from specbench_tui.errors import InputError
from specbench_tui.results.damaged import (
    BAD_LINES,
    UNREADABLE,
    move_aside,
    set_aside_bad_lines,
    unreadable_part,
)
from specbench_tui.results.events import CellFailed, CellFinished, CellQueued, CellSkipped, Event
from specbench_tui.results.files import (
    NotAFile,
    StorageError,
    crash_point,
    event_line,
    own_file,
    read_event_log,
    read_events,
    read_json_object,
    remove_torn,
    write_bytes_atomic,
    write_parquet_atomic,
)
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.records import RequestRecord
from specbench_tui.results.schema import REQUEST_SCHEMA, TELEMETRY_SCHEMA
from specbench_tui.results.state import CampaignState
from specbench_tui.results.views import (
    cells_frame,
    concat_requests,
    concat_telemetry,
    part_files,
    telemetry_files,
)

#: Seconds between telemetry flushes; each flush is one new small file.
TELEMETRY_FLUSH_S = 60.0
#: Samples that force a flush before the interval is up (a big host, a fast interval).
TELEMETRY_FLUSH_ROWS = 20_000
#: Seconds between rebuilds of ``requests.parquet`` and ``telemetry.parquet`` during a run
#: (each reads every part written so far); they are rebuilt at the end of a run in any case.
WHOLE_VIEWS_EVERY_S = 600.0


def _no_follow(path: str, flags: int) -> int:
    """``open``'s opener for the tool's own files: a link at their name is never followed."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)


class ResultsStore:
    """One campaign's results directory, owned by one running engine at a time (flock)."""

    def __init__(self, layout: ResultsLayout) -> None:
        self.layout = layout
        self._events_file: Any = None
        self._writer: EventWriter | None = None
        self._lock_fd: int | None = None
        self._telemetry: list[dict[str, Any]] = []
        self._telemetry_flushed = time.monotonic()
        self._telemetry_seq = 0
        self._whole_views_at = time.monotonic()  # the request and telemetry views' last rebuild
        self._views_lock = threading.Lock()
        self._views_task: asyncio.Task[None] | None = None
        self._views_again = False
        self.opening_events: list[Event] = []  # the log as it was when this run opened it
        self.notices: list[str] = []  # what opening found and did, for the operator

    # -- opening ---------------------------------------------------------------------------

    @staticmethod
    def move_aside(layout: ResultsLayout) -> Path | None:
        """``--fresh``: keep the old directory under a dated name; never delete results."""
        if not layout.root.exists():
            return None
        try:
            own_file(layout.lock)
        except NotAFile as exc:
            raise InputError(str(exc)) from None
        if layout.lock.exists():
            with open(layout.lock) as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise InputError(
                        f"{layout.root}: a campaign is running here; --fresh would move it "
                        f"away under its feet (attach with --attach {layout.root})"
                    ) from None
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        target = layout.root.with_name(f"{layout.root.name}.{stamp}")
        n = 1
        while target.exists():
            target = layout.root.with_name(f"{layout.root.name}.{stamp}.{n}")
            n += 1
        try:
            layout.root.rename(target)
        except OSError as exc:
            raise InputError(
                f"{layout.root}: --fresh cannot move the old results aside to {target.name} "
                f"({exc.strerror or exc}); fix the directory's permissions or pick another "
                "with --results"
            ) from None
        return target

    def open(self, plan_text: str, plan_hash: str) -> list[Event]:
        """Lock the directory, keep the plan as run, and read the log; returns its events.

        Bad input ends here with InputError (exit 2): a directory that cannot be written, a
        campaign already running in it.
        """
        root = self.layout.root
        try:
            for d in (root, self.layout.logs, self.layout.parts, self.layout.telemetry_parts):
                d.mkdir(parents=True, exist_ok=True)
            probe = root / ".write-probe"
            write_bytes_atomic(probe, b"ok\n")
            probe.unlink()
        except (OSError, StorageError) as exc:
            raise InputError(
                f"{root}: the results directory cannot be written ({exc.strerror or exc}); "
                "free space, fix its permissions or pick another with --results"
            ) from None
        try:
            for own in (self.layout.lock, self.layout.events):
                own_file(own)
        except NotAFile as exc:
            raise InputError(str(exc)) from None
        self._lock_fd = os.open(
            self.layout.lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
        )
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = self.layout.lock.read_text().strip() or "another process"
            os.close(self._lock_fd)
            self._lock_fd = None
            raise InputError(
                f"{root}: a campaign is already running here (pid {owner}); "
                f"attach to it with --attach {root}"
            ) from None
        os.ftruncate(self._lock_fd, 0)
        os.write(self._lock_fd, str(os.getpid()).encode())
        self._keep_plan(plan_text)
        for d in (root, self.layout.parts, self.layout.telemetry_parts):
            for p in remove_torn(d):
                self.notices.append(f"removed {p.name}, a temporary file a crash left behind")
        self._read_log()
        self._set_aside_interrupted_parts()
        self._set_aside_unreadable_parts()
        self._check_views()
        self._telemetry_seq = len(telemetry_files(self.layout))
        self._events_file = open(self.layout.events, "a", encoding="utf-8", opener=_no_follow)  # noqa: SIM115
        return self.opening_events

    def _keep_plan(self, plan_text: str) -> None:
        old = self.layout.plan.read_text() if self.layout.plan.exists() else None
        if old == plan_text:
            return
        if old is not None:  # a changed plan: the one earlier results were measured with stays
            keep = self.layout.root / f"plan.{hashlib.sha256(old.encode()).hexdigest()[:16]}.toml"
            if not keep.exists():
                shutil.copy2(self.layout.plan, keep)
        write_bytes_atomic(self.layout.plan, plan_text.encode())
        crash_point("plan")

    def _read_log(self) -> None:
        """The log's events; lines that are not events are copied to ``unreadable/`` and
        said, and a last line a crash cut short gets its end of line, so the next event
        starts a line of its own instead of joining the torn one."""
        log = read_event_log(self.layout.events)
        self.opening_events = log.events
        if log.bad:
            set_aside_bad_lines(self.layout, log)
            self.notices.append(
                f"{log.summary(self.layout.events)}; the lines are copied to "
                f"{self.layout.set_aside.name}/{BAD_LINES}"
            )
        if log.torn:
            try:
                with open(self.layout.events, "ab") as f:
                    f.write(b"\n")
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as exc:
                raise StorageError(self.layout.events, exc) from exc

    def _set_aside_unreadable_parts(self) -> None:
        """A part of an ended attempt that cannot be read (cut short, garbled, foreign) is
        moved to ``unreadable/`` with its texts: the reducer then finds the attempt's rows
        missing, so a finished cell is pending again and runs again, and every other cell
        keeps its rows."""
        names = {e.cell_id: e.cell for e in self.opening_events if isinstance(e, CellFinished)}
        for part in part_files(self.layout):
            why = unreadable_part(part)
            if not why:
                continue
            key = self.layout.part_key(part)
            target = move_aside(self.layout, part)
            if key is not None and self.layout.texts_path(*key).exists():
                move_aside(self.layout, self.layout.texts_path(*key))
            cell = names.get(key[0], key[0]) if key is not None else part.name
            self.notices.append(
                f"parts/{part.name} could not be read ({why}); moved to "
                f"{target.relative_to(self.layout.root)}; cell {cell} runs again"
            )

    def _check_views(self) -> None:
        """Views are rebuilt, never read back; one that is damaged is moved aside first (and
        said), so nothing a reader might still want is overwritten in silence. A telemetry
        view written before telemetry had parts becomes the first part."""
        for view in (self.layout.cells, self.layout.requests, self.layout.telemetry):
            if not view.exists():
                continue
            try:
                if view == self.layout.cells:  # one row per planned cell: read it whole
                    pl.read_parquet(view)
                else:  # can be gigabytes: its footer (a torn or foreign file has none)
                    pl.read_parquet_schema(view)
            except UNREADABLE as exc:
                target = move_aside(self.layout, view)
                self.notices.append(
                    f"{view.name} could not be read ({type(exc).__name__}); moved to "
                    f"{target.relative_to(self.layout.root)} and rebuilt from the event log "
                    "and parts"
                )
        if self.layout.telemetry.exists() and not telemetry_files(self.layout):
            os.replace(self.layout.telemetry, self.layout.telemetry_parts / "000000.parquet")

    def close(self) -> None:
        """Write what is queued for the log, flush the samples, and let the directory go."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        with contextlib.suppress(StorageError):  # samples: what a full disk may cost
            self.flush_telemetry(force=True)
        if self._events_file is not None:
            with contextlib.suppress(OSError):
                self._events_file.close()
            self._events_file = None
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- events ----------------------------------------------------------------------------

    def event_writer(self, report: Report) -> EventWriter:
        """The log's writer thread (started on the first call; ``report`` is called from
        it). Raises StorageError when the log cannot be opened."""
        if self._writer is None:
            try:
                self._writer = EventWriter(self.layout.events, report)
            except OSError as exc:
                raise StorageError(self.layout.events, exc) from exc
        return self._writer

    def append_event(self, event: Event) -> None:
        """One durable event, on disk before this returns, behind whatever the writer thread
        still has queued. Raises StorageError."""
        if not event.durable or self._events_file is None:
            return
        if self._writer is not None:
            self._writer.drain()
        try:
            self._events_file.write(event_line(event))
            self._events_file.flush()
            os.fsync(self._events_file.fileno())
        except OSError as exc:
            self._reopen_events()
            raise StorageError(self.layout.events, exc) from exc
        crash_point(f"event:{event.name}")

    def _reopen_events(self) -> None:
        """After a failed write the file object may hold a half line in its buffer; drop it
        and cut the file back to its last whole line, so the next write starts clean."""
        with contextlib.suppress(OSError):
            self._events_file.close()
        path = self.layout.events
        try:
            with open(path, "rb+") as f:
                data = f.read()
                end = data.rfind(b"\n") + 1
                if end != len(data):
                    f.truncate(end)
        except OSError:
            pass
        self._events_file = open(path, "a", encoding="utf-8", opener=_no_follow)  # noqa: SIM115

    @staticmethod
    def read_events(path: Path) -> list[Event]:
        return read_events(path)

    def state(self) -> CampaignState:
        """The log as it was when this run opened it, reduced (resume starts from this)."""
        return CampaignState.from_events(self.opening_events, self.layout.rows_exist)

    def _set_aside_interrupted_parts(self) -> None:
        """A part file with no event ending its attempt was written by a process that died
        before saying the cell ended: that attempt runs again, so its rows must not count
        twice. They are moved, not deleted."""
        ended: set[tuple[str, int]] = set()
        for ev in self.opening_events:
            if isinstance(ev, CellFinished | CellFailed | CellSkipped):
                ended.add((ev.cell_id, ev.attempt))
            elif isinstance(ev, CellQueued):
                ended.add((ev.cell_id, ev.attempt - 1))
        for part in part_files(self.layout):
            key = self.layout.part_key(part)
            if key is not None and key not in ended:
                self.layout.interrupted_parts.mkdir(exist_ok=True)
                os.replace(part, self.layout.interrupted_parts / part.name)
                texts = self.layout.texts_path(*key)
                if texts.exists():
                    os.replace(texts, self.layout.interrupted_parts / texts.name)

    # -- request rows ------------------------------------------------------------------------

    def write_cell_requests(
        self, cell_id: str, attempt: int, records: Iterable[RequestRecord]
    ) -> pl.DataFrame:
        """The attempt's rows, durable when this returns. Raises StorageError."""
        rows = [r.to_row() for r in records]
        df = (
            pl.DataFrame(rows, schema=REQUEST_SCHEMA, orient="row")
            if rows
            else pl.DataFrame(schema=REQUEST_SCHEMA)
        )
        path = self.layout.part_path(cell_id, attempt)
        write_parquet_atomic(df, path)
        crash_point("part")
        return df

    def write_cell_texts(self, cell_id: str, attempt: int, texts: dict[str, Any]) -> None:
        """Outputs by request key, for the greedy-equivalence check (the rows keep only hashes)."""
        data = json.dumps(texts, ensure_ascii=False).encode()
        write_bytes_atomic(self.layout.texts_path(cell_id, attempt), data)
        crash_point("texts")

    def record_manifest(self, group: str, entry: dict[str, Any]) -> None:
        """One group's manifest into ``manifest.json`` (the others' kept): written whole, so
        a reader or a crash sees the file before or after, never half of it."""
        with self._views_lock:
            manifest = read_json_object(self.layout.manifest)
            groups = manifest.get("groups")
            manifest = {
                "manifest": 1,
                "groups": {**(groups if isinstance(groups, dict) else {}), group: entry},
            }
            data = json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=False).encode()
            write_bytes_atomic(self.layout.manifest, data)
        crash_point("manifest")

    def read_cell_texts(self, cell_id: str, attempt: int) -> dict[str, Any]:
        """The texts of one attempt; empty when there are none."""
        return read_json_object(self.layout.texts_path(cell_id, attempt))

    # -- views -------------------------------------------------------------------------------

    def write_views(self, state: CampaignState) -> None:
        """Compute and write every view now (at the end of a run, off the event loop: the
        caller must not change ``state`` meanwhile)."""
        self._write_views(cells_frame(state), whole=True)

    def _write_views(self, cells: pl.DataFrame, *, whole: bool) -> None:
        """The cells view always (one row per planned cell: its cost does not grow with the
        rows measured); the request and telemetry views, which concatenate every part
        written so far, only when ``whole``: at the end of a run and every
        ``WHOLE_VIEWS_EVERY_S`` in between, so a long campaign's cost per cell stays flat.
        Readers take rows from the parts (report/inputs.py), never from a view that may lag."""
        with self._views_lock:
            if whole:
                frames = [pl.read_parquet(p) for p in part_files(self.layout)]
                write_parquet_atomic(concat_requests(frames), self.layout.requests)
                crash_point("views:requests")
            write_parquet_atomic(cells, self.layout.cells)
            crash_point("views:cells")
            if whole:
                tel = [pl.read_parquet(p) for p in telemetry_files(self.layout)]
                write_parquet_atomic(concat_telemetry(tel), self.layout.telemetry)
                crash_point("views:telemetry")
                self._whole_views_at = time.monotonic()

    @classmethod
    def rebuild_views(cls, layout: ResultsLayout) -> list[str] | None:
        """``--report`` on a campaign no process runs: every view written again from the log
        and the parts, since a run killed mid-way left the request and telemetry views up to
        ``WHOLE_VIEWS_EVERY_S`` behind; returns the notices (a view moved aside). None,
        writing nothing, while a campaign holds the directory (its run writes them) or when
        it has no parts (a copy of the views alone: those are all there is). Raises OSError
        (StorageError when a view cannot be written) and PolarsError (a foreign part)."""
        if not layout.events.exists() or not layout.parts.is_dir():
            return None
        try:
            own_file(layout.lock)
            fd = os.open(layout.lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except NotAFile:
            raise
        except OSError as exc:
            raise StorageError(layout.lock, exc) from exc
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None
            store = cls(layout)
            store._read_log()
            store._set_aside_unreadable_parts()
            store._check_views()
            store.write_views(store.state())
            return store.notices
        finally:
            os.close(fd)  # and with it the lock

    def refresh_views(
        self, state: CampaignState, after: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Rewrite the views in a worker thread, at most one at a time; a refresh asked for
        while one runs is done once after it, from the state as it is then. The cells view
        is computed here, on the loop that owns ``state`` (a few hundred rows); the writing
        happens in the thread, once ``after()`` returned (the hub's durable point: a view
        never says more than the log). Failures are left to the final write."""
        self._views_again = True
        if self._views_task is not None and not self._views_task.done():
            return
        self._views_task = asyncio.ensure_future(self._refresh_loop(state, after))

    async def _refresh_loop(
        self, state: CampaignState, after: Callable[[], Awaitable[None]] | None
    ) -> None:
        while self._views_again:
            self._views_again = False
            whole = time.monotonic() - self._whole_views_at >= WHOLE_VIEWS_EVERY_S
            cells = cells_frame(state)
            try:
                if after is not None:
                    await after()
                await asyncio.to_thread(self._write_views, cells, whole=whole)
            except (OSError, pl.exceptions.PolarsError, StorageFailed):
                return

    async def settle_views(self) -> None:
        """Wait for a refresh in flight (before the final write)."""
        task = self._views_task
        if task is not None and not task.done():
            self._views_again = False
            await task

    # -- telemetry ---------------------------------------------------------------------------

    def add_telemetry(self, sample: dict[str, Any]) -> None:
        self._telemetry.append({k: sample.get(k) for k in TELEMETRY_SCHEMA})
        if len(self._telemetry) >= TELEMETRY_FLUSH_ROWS or (
            time.monotonic() - self._telemetry_flushed >= TELEMETRY_FLUSH_S
        ):
            rows, self._telemetry = self._telemetry, []
            self._telemetry_flushed = time.monotonic()
            path = self._next_telemetry_part()
            asyncio.get_running_loop().run_in_executor(None, self._write_telemetry, rows, path)

    def flush_telemetry(self, *, force: bool = False) -> None:
        """Write buffered samples now (at the end of a run). Raises StorageError."""
        if not self._telemetry or not force:
            return
        rows, self._telemetry = self._telemetry, []
        self._telemetry_flushed = time.monotonic()
        self._write_telemetry(rows, self._next_telemetry_part())

    def _next_telemetry_part(self) -> Path:
        self._telemetry_seq += 1
        return self.layout.telemetry_parts / f"{self._telemetry_seq:06d}.parquet"

    @staticmethod
    def _write_telemetry(rows: list[dict[str, Any]], path: Path) -> None:
        with contextlib.suppress(StorageError):  # samples: what a full disk may cost
            write_parquet_atomic(pl.DataFrame(rows, schema=TELEMETRY_SCHEMA, orient="row"), path)
            crash_point("telemetry")

"""The crash-safe results store.

Durability rules, in order of what a crash may cost:
- ``events.jsonl`` is appended and fsynced line by line: the record of what happened.
- A cell's request rows are written whole to ``parts/<cell>.a<attempt>.parquet`` (temp file,
  fsync, rename) *before* its ``cell_finished`` event. A cell counts as finished only when both
  exist, so a crash mid-cell reruns that cell whole and never repeats a finished one.
- ``requests.parquet`` and ``cells.parquet`` are rebuilt from the parts after each cell, by
  atomic replace; they are views, and can always be rebuilt from ``parts/`` and the events.
- Telemetry is buffered and flushed every few seconds: losing seconds of GPU samples is fine.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from specbench_tui.errors import InputError
from specbench_tui.results.cells import Cell
from specbench_tui.results.events import (
    CellFailed,
    CellFinished,
    CellQueued,
    CellSkipped,
    CellStarted,
    Event,
)
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.records import REQUEST_COLUMNS, RequestRecord

REQUEST_SCHEMA: dict[str, Any] = {
    "campaign": pl.String,
    "cell_id": pl.String,
    "attempt": pl.Int64,
    "group": pl.String,
    "host": pl.String,
    "config": pl.String,
    "tp": pl.Int64,
    "workload": pl.String,
    "kind": pl.String,
    "prompt_set": pl.String,
    "prompt_id": pl.String,
    "max_tokens": pl.Int64,
    "concurrency": pl.Int64,
    "session": pl.Int64,
    "turn": pl.Int64,
    "repeat": pl.Int64,
    "started_at": pl.Float64,
    "ttft_s": pl.Float64,
    "e2e_s": pl.Float64,
    "tpot_s": pl.Float64,
    "itl_s": pl.List(pl.Float64),
    "output_tokens": pl.Int64,
    "prompt_tokens": pl.Int64,
    "cached_tokens": pl.Int64,
    "chunks": pl.Int64,
    "output_tok_s": pl.Float64,
    "spec_verify_ct": pl.Int64,
    "accept_length": pl.Float64,
    "finish_reason": pl.String,
    "output_sha256": pl.String,
    "error": pl.String,
    "decode_tok_s": pl.Float64,
    "e2e_tok_s": pl.Float64,
    "chunk_tokens": pl.List(pl.Int64),
}
assert tuple(REQUEST_SCHEMA) == REQUEST_COLUMNS, "request schema and record drifted apart"

TELEMETRY_SCHEMA: dict[str, Any] = {
    "time": pl.Float64,
    "host": pl.String,
    "gpu": pl.Int64,
    "util_pct": pl.Float64,
    "mem_used_mib": pl.Float64,
    "mem_total_mib": pl.Float64,
    "power_w": pl.Float64,
    "temp_c": pl.Float64,
}

CELL_IDENTITY = (
    "cell_id",
    "name",
    "group",
    "host",
    "config",
    "tp",
    "workload",
    "kind",
    "prompt_set",
    "max_tokens",
    "concurrency",
)


@dataclass
class CellHistory:
    """What the event log says about one cell."""

    attempts: int = 0
    status: str = "pending"  # pending | running | done | failed | skipped
    reason: str = ""
    summary: dict[str, Any] = field(default_factory=dict)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_parquet_atomic(df: pl.DataFrame, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    df.write_parquet(tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


class ResultsStore:
    """One campaign's results directory, owned by one running engine at a time (flock)."""

    def __init__(self, layout: ResultsLayout) -> None:
        self.layout = layout
        self._events_file: Any = None
        self._lock_fd: int | None = None
        self._telemetry: list[dict[str, Any]] = []
        self._telemetry_flushed = time.monotonic()
        self._cell_rows: dict[str, dict[str, Any]] = {}
        # Views are rebuilt from these after every cell; each part file is read only once.
        self._part_frames: dict[Path, pl.DataFrame] = {}
        self._telemetry_all: pl.DataFrame | None = None
        self._opening_events: list[Event] = []  # the log as it was when this run opened it

    # -- opening ---------------------------------------------------------------------------

    @staticmethod
    def move_aside(layout: ResultsLayout) -> Path | None:
        """``--fresh``: keep the old directory under a dated name; never delete results."""
        if not layout.root.exists():
            return None
        lock = layout.root / ".lock"
        if lock.exists():
            with open(lock) as f:
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
        layout.root.rename(target)
        return target

    def open(self, plan_text: str, plan_hash: str) -> None:
        root = self.layout.root
        try:
            root.mkdir(parents=True, exist_ok=True)
            self.layout.logs.mkdir(exist_ok=True)
            self.layout.parts.mkdir(exist_ok=True)
        except OSError as exc:
            raise InputError(f"{root}: cannot create the results directory: {exc}") from None
        self._lock_fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = Path(root / ".lock").read_text().strip() or "another process"
            os.close(self._lock_fd)
            self._lock_fd = None
            raise InputError(
                f"{root}: a campaign is already running here (pid {owner}); "
                f"attach to it with --attach {root}"
            ) from None
        os.ftruncate(self._lock_fd, 0)
        os.write(self._lock_fd, str(os.getpid()).encode())
        old = self.layout.plan.read_text() if self.layout.plan.exists() else None
        if old != plan_text:
            if old is not None:  # a changed plan: the one results were measured with stays
                keep = root / f"plan.{hashlib.sha256(old.encode()).hexdigest()[:16]}.toml"
                if not keep.exists():
                    shutil.copy2(self.layout.plan, keep)
            tmp = root / ".plan.toml.tmp"
            tmp.write_text(plan_text)
            os.replace(tmp, self.layout.plan)
        self._opening_events = self.read_events(self.layout.events)
        self._events_file = open(self.layout.events, "a", encoding="utf-8")  # noqa: SIM115
        self._set_aside_interrupted_parts()
        self._cell_rows = {r["cell_id"]: r for r in self._read_cell_rows()}

    def close(self) -> None:
        self.flush_telemetry(force=True)
        if self._events_file is not None:
            self._events_file.close()
            self._events_file = None
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- events ----------------------------------------------------------------------------

    def append_event(self, event: Event) -> None:
        if not event.durable or self._events_file is None:
            return
        self._events_file.write(json.dumps(event.to_json(), separators=(",", ":")) + "\n")
        self._events_file.flush()
        os.fsync(self._events_file.fileno())

    @staticmethod
    def read_events(path: Path) -> list[Event]:
        """All events of a log; a torn last line (crash mid-write) is ignored."""
        out: list[Event] = []
        if not path.exists():
            return out
        with path.open(encoding="utf-8") as f:
            for line in f:
                try:
                    out.append(Event.from_json(json.loads(line)))
                except (json.JSONDecodeError, TypeError, ValueError):
                    continue
        return out

    def history(self) -> dict[str, CellHistory]:
        """Each cell's state as the event log (when this run opened it) and the part files
        say."""
        hist: dict[str, CellHistory] = {}
        for ev in self._opening_events:
            cid = getattr(ev, "cell_id", None)
            if cid is None:
                continue
            h = hist.setdefault(cid, CellHistory())
            if isinstance(ev, CellStarted):
                h.attempts = max(h.attempts, ev.attempt)
                h.status = "running"
            elif isinstance(ev, CellFinished):
                if self.part_path(cid, ev.attempt).exists():
                    h.status, h.summary = "done", ev.to_json()
            elif isinstance(ev, CellFailed):
                h.status, h.reason = "failed", ev.reason
                h.attempts = max(h.attempts, ev.attempt)
            elif isinstance(ev, CellSkipped):
                h.status, h.reason = "skipped", ev.reason
            elif isinstance(ev, CellQueued):
                h.status = "pending"
        for h in hist.values():
            if h.status == "running":  # the process died mid-cell: it runs again, whole
                h.status = "pending"
        return hist

    def _set_aside_interrupted_parts(self) -> None:
        """A part file with no event ending its attempt was written by a process that died
        before saying the cell ended: that attempt runs again, so its rows must not count
        twice. They are moved, not deleted."""
        ended: set[tuple[str, int]] = set()
        for ev in self._opening_events:
            if isinstance(ev, CellFinished | CellFailed | CellSkipped):
                ended.add((ev.cell_id, ev.attempt))
            elif isinstance(ev, CellQueued):
                ended.add((ev.cell_id, ev.attempt - 1))
        aside = self.layout.parts / "interrupted"
        for part in self.layout.parts.glob("*.parquet"):
            cid, _, att = part.stem.rpartition(".a")
            if att.isdigit() and (cid, int(att)) not in ended:
                aside.mkdir(exist_ok=True)
                os.replace(part, aside / part.name)

    # -- request rows ------------------------------------------------------------------------

    def part_path(self, cell_id: str, attempt: int) -> Path:
        return self.layout.parts / f"{cell_id}.a{attempt}.parquet"

    def write_cell_requests(
        self, cell_id: str, attempt: int, records: Iterable[RequestRecord]
    ) -> Path:
        rows = [r.to_row() for r in records]
        df = (
            pl.DataFrame(rows, schema=REQUEST_SCHEMA, orient="row")
            if rows
            else pl.DataFrame(schema=REQUEST_SCHEMA)
        )
        path = self.part_path(cell_id, attempt)
        write_parquet_atomic(df, path)
        self._part_frames[path] = df
        return path

    def texts_path(self, cell_id: str, attempt: int) -> Path:
        return self.layout.parts / f"{cell_id}.a{attempt}.texts.json"

    def write_cell_texts(self, cell_id: str, attempt: int, texts: dict[str, str]) -> None:
        """Outputs by prompt, for the greedy-equivalence check (the rows keep only hashes)."""
        path = self.texts_path(cell_id, attempt)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(texts, ensure_ascii=False))
        os.replace(tmp, path)

    def read_cell_texts(self, cell_id: str) -> dict[str, str]:
        """The texts of the attempt that counts for a finished cell; empty when unknown."""
        row = self._cell_rows.get(cell_id)
        if not row or row.get("status") != "done":
            return {}
        try:
            return json.loads(self.texts_path(cell_id, int(row["attempt"])).read_text())
        except (OSError, ValueError):
            return {}

    def record_cell(
        self, cell: Cell, attempt: int, status: str, figures: dict[str, Any], *, simulated: bool
    ) -> None:
        """Keep the cell's row for cells.parquet (latest attempt wins) and rewrite the views."""
        row: dict[str, Any] = {
            k: getattr(cell, "id" if k == "cell_id" else k) for k in CELL_IDENTITY
        }
        row.update({"attempt": attempt, "status": status, "simulated": simulated, **figures})
        self._cell_rows[cell.id] = row
        self.rebuild_views()

    def _read_cell_rows(self) -> list[dict[str, Any]]:
        if not self.layout.cells.exists():
            return []
        try:
            return pl.read_parquet(self.layout.cells).to_dicts()
        except Exception:
            return []

    def rebuild_views(self) -> None:
        for p in self.layout.parts.glob("*.parquet"):
            if p not in self._part_frames:  # from an earlier run of the campaign
                self._part_frames[p] = pl.read_parquet(p)
        frames = [self._part_frames[p] for p in sorted(self._part_frames)]
        req = (
            pl.concat(frames, how="diagonal_relaxed")
            if frames
            else pl.DataFrame(schema=REQUEST_SCHEMA)
        )
        write_parquet_atomic(req, self.layout.requests)
        if self._cell_rows:
            cells = pl.DataFrame(list(self._cell_rows.values()), infer_schema_length=None)
            write_parquet_atomic(cells, self.layout.cells)

    # -- telemetry ---------------------------------------------------------------------------

    def add_telemetry(self, sample: dict[str, Any]) -> None:
        self._telemetry.append({k: sample.get(k) for k in TELEMETRY_SCHEMA})
        self.flush_telemetry()

    def flush_telemetry(self, *, force: bool = False, every_s: float = 5.0) -> None:
        if not self._telemetry or (
            not force and time.monotonic() - self._telemetry_flushed < every_s
        ):
            return
        self._telemetry_flushed = time.monotonic()
        new = pl.DataFrame(self._telemetry, schema=TELEMETRY_SCHEMA, orient="row")
        self._telemetry.clear()
        path = self.layout.telemetry
        if self._telemetry_all is None:  # samples of earlier runs: read once, then kept
            self._telemetry_all = pl.DataFrame(schema=TELEMETRY_SCHEMA)
            if path.exists():
                with contextlib.suppress(Exception):
                    self._telemetry_all = pl.read_parquet(path)
        self._telemetry_all = pl.concat([self._telemetry_all, new], how="diagonal_relaxed")
        write_parquet_atomic(self._telemetry_all, path)

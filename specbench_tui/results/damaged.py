"""What cannot be read is moved aside, never deleted, and said once; the rest is read without it.

One damaged file must not cost a campaign: a request part that a disk, a copy or a hand cut
short loses its own cell's rows (the cell runs again), and a line of the event log that is
not an event loses that line. Everything set aside lands in ``unreadable/`` (the layout's
``set_aside``) under its own name and the time it was moved, so the report can name it and
nothing measured is overwritten.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from specbench_tui.results.files import BadLine, EventLog, fsync_dir
from specbench_tui.results.layout import ResultsLayout

#: Lines of ``events.jsonl`` that are not events, copied here (one JSON object a line:
#: ``{"line": N, "why": ..., "text": ...}``); the log itself is append-only and keeps them.
BAD_LINES = "events.bad-lines.jsonl"
#: Columns without which a part's rows cannot be told apart or counted.
PART_COLUMNS = ("cell_id", "attempt")

#: What reading a torn, truncated or foreign Parquet file raises: polars says it in several
#: ways (ComputeError, InvalidOperationError, ...: all PolarsError), the file system in one.
UNREADABLE: tuple[type[Exception], ...] = (OSError, pl.exceptions.PolarsError)


def unreadable_part(path: Path) -> str:
    """Why a part file cannot be read ("" when it can): read whole, as the views read it."""
    try:
        df = pl.read_parquet(path)
    except UNREADABLE as exc:
        return f"{type(exc).__name__}: {_first_line(exc)}"
    missing = [c for c in PART_COLUMNS if c not in df.columns]
    return f"no {' or '.join(missing)} column" if missing else ""


def move_aside(layout: ResultsLayout, path: Path) -> Path:
    """Move ``path`` into ``unreadable/`` under its name and the time; returns where."""
    layout.set_aside.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = layout.set_aside / f"{path.name}.{stamp}"
    n = 1
    while target.exists():
        target = layout.set_aside / f"{path.name}.{stamp}.{n}"
        n += 1
    os.replace(path, target)
    fsync_dir(layout.set_aside)
    return target


def set_aside_bad_lines(layout: ResultsLayout, log: EventLog) -> list[BadLine]:
    """Copy the log's bad lines not copied before into ``unreadable/events.bad-lines.jsonl``
    (the log is append-only, so a line number always names the same line); returns the new
    ones."""
    path = layout.set_aside / BAD_LINES
    seen = {b.number for b in read_bad_lines(path)}
    new = [b for b in log.bad if b.number not in seen]
    if new:
        layout.set_aside.mkdir(exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            for b in new:
                f.write(json.dumps(b.to_json(), ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
    return new


def read_bad_lines(path: Path) -> list[BadLine]:
    out: list[BadLine] = []
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            obj = json.loads(line)
            out.append(BadLine(int(obj["line"]), str(obj.get("text", "")), str(obj.get("why", ""))))
        except (ValueError, KeyError, TypeError, RecursionError):
            continue
    return out


def set_aside_notes(layout: ResultsLayout) -> list[str]:
    """One line per file in ``unreadable/``, for the report: what was set aside and left out."""
    if not layout.set_aside.is_dir():
        return []
    notes = []
    for p in sorted(layout.set_aside.iterdir()):
        name = p.relative_to(layout.root)
        if p.name == BAD_LINES:
            n = len(read_bad_lines(p))
            notes.append(f"{name} holds {n} line(s) of events.jsonl that are not events: left out")
        else:
            notes.append(f"{name} could not be read and was set aside: left out")
    return notes


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else "no detail"

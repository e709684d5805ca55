"""The server's own view of each group, from the log lines the campaign kept
(``logs/<group>.log``): accept length and generation throughput of every stats line, placed in
time and assigned to the cell that was running then, so that a group's figures can be read per
workload kind and never over the idle time or warm-up between cells.

Placing a line in time: servers print local wall-clock time to the second, each engine in its
own form (``EngineAdapter.log_stamp``), while the events are UTC. Each
server start in the kept log begins with the campaign's own header (``----- <UTC ISO time>
starting ...``), so the offset of the server's clock is the difference to the first stamped
line after it, rounded to a quarter hour (time zones); a log without headers is taken as UTC.
A line is assigned to a cell when it falls within the cell's start and end, widened by a
second for the stamps' resolution.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from specbench_tui.bench.logparse import LogParser
from specbench_tui.engines.registry import adapters
from specbench_tui.report.inputs import Inputs

_ENGINES = adapters()
_HEADER = re.compile(r"^----- (\S+) starting ")
_QUARTER_H = 900.0
#: Stats keys of the log parsers that the server view reads (one naming for both engines).
ACCEPT_KEY = "accept_len"
THROUGHPUT_KEY = "gen_throughput"

StatsParser = Callable[[str], "dict[str, float] | None"]


@dataclass(frozen=True)
class Window:
    cell_id: str
    kind: str
    start: float
    end: float


def _stamp(line: str, year: int) -> float | None:
    """The line's own time stamp as naive seconds (its clock's wall time read as UTC)."""
    for engine in _ENGINES:
        when = engine.log_stamp(line, year)
        if when is not None:
            try:
                return datetime(*when, tzinfo=UTC).timestamp()
            except ValueError:
                return None
    return None


def _header_time(line: str) -> float | None:
    m = _HEADER.match(line)
    if not m:
        return None
    try:
        return datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def stats_parser(engine: str) -> StatsParser:
    """The stats parser for a group's engine: every engine's lines give ``accept_len`` and
    ``gen_throughput`` (bench/logparse.py offers each line to every engine's parser)."""
    return LogParser().parse


def read_log(path: Path, parse: StatsParser) -> list[tuple[float, dict[str, float]]]:
    """(UTC time, stats) of every stats line with a usable time stamp, in file order."""
    out: list[tuple[float, dict[str, float]]] = []
    try:
        f = path.open(encoding="utf-8", errors="replace")
    except OSError:
        return out
    offset = 0.0
    anchor: float | None = None  # the last header's UTC time, until a stamped line follows
    year = datetime.now(UTC).year
    with f:
        for line in f:
            if line.startswith("-----"):
                t = _header_time(line)
                if t is not None:
                    anchor = t
                    year = datetime.fromtimestamp(t, UTC).year
                continue
            interesting = "batch" in line or "throughput" in line or "acceptance" in line
            if not interesting and anchor is None:
                continue  # cheap skip; only a line right after a header is read for its clock
            stamp = _stamp(line, year)
            if stamp is None:
                continue
            if anchor is not None:
                offset = round((stamp - anchor) / _QUARTER_H) * _QUARTER_H
                anchor = None
            stats = parse(line)
            if not stats:
                continue
            if stats.get("decode") and not stats.get("running_req", 1):
                continue  # an idle decode line says nothing about a measurement
            out.append((stamp - offset, stats))
    return out


def cell_windows(inp: Inputs, group: str) -> list[Window]:
    out = []
    for cid in inp.state.groups[group].cells if group in inp.state.groups else []:
        c = inp.state.cells.get(cid)
        if c is None or c.status != "done" or c.started_at is None or c.ended_at is None:
            continue
        out.append(Window(c.id, c.kind, c.started_at - 1.0, c.ended_at + 1.0))
    return sorted(out, key=lambda w: w.start)


def assign(
    lines: Iterable[tuple[float, dict[str, float]]], windows: list[Window]
) -> list[dict[str, object]]:
    """Rows (cell_id, kind, accept_len, gen_throughput) for the lines inside a cell window."""
    rows: list[dict[str, object]] = []
    if not windows:
        return rows
    i = 0
    for t, stats in sorted(lines, key=lambda x: x[0]):
        while i < len(windows) and windows[i].end < t:
            i += 1
        if i >= len(windows):
            break
        w = windows[i]
        if w.start <= t <= w.end:
            rows.append(
                {
                    "cell_id": w.cell_id,
                    "kind": w.kind,
                    "accept_len": stats.get(ACCEPT_KEY),
                    "gen_throughput": stats.get(THROUGHPUT_KEY),
                }
            )
    return rows


def log_figures(inp: Inputs) -> pl.DataFrame:
    """Per cell: the mean accept length and generation throughput of the stats lines its
    group's server logged while the cell ran, and how many lines they are."""
    if "server_log" in inp.cache:
        return inp.cache["server_log"]
    rows: list[dict[str, object]] = []
    for gid, g in inp.state.groups.items():
        path = inp.layout.log_of(gid)
        if not path.exists():
            continue
        windows = cell_windows(inp, gid)
        if not windows:
            continue
        for r in assign(read_log(path, stats_parser(g.engine)), windows):
            rows.append({"group": gid, **r})
    schema = {
        "group": pl.String,
        "cell_id": pl.String,
        "kind": pl.String,
        "accept_len": pl.Float64,
        "gen_throughput": pl.Float64,
    }
    df = pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
    out = df.group_by("group", "cell_id", "kind").agg(
        pl.col("accept_len").mean().alias("log_accept_len"),
        pl.col("gen_throughput").mean().alias("log_gen_throughput"),
        pl.len().alias("log_lines"),
    )
    inp.cache["server_log"] = out
    return out

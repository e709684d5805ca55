"""The server's own view of each group, from the log lines the campaign kept
(``logs/<group>.log``): accept length and generation throughput of the stats lines, each
placed in time and given to a cell only when the whole stretch it describes lies inside that
cell, pooled per cell by the tokens behind each line.

What a line describes: engines print their statistics over the stretch since their previous
line of the same kind (every so many decode steps, or every so many seconds of activity, as
the engine's adapter says: ``stats_lines_name``, ``stats_interval``), and that stretch
may hold idle time or another cell's requests. So a line counts for a cell only when the
previous line of its kind and the line itself both fall inside the cell's window (its
``cell_started`` to ``cell_finished``), the stamps' resolution (a second) taken off the window.
A short cell may get no line at all: then it has no log figure, rather than a neighbour's.

Placing a line in time: servers print local wall-clock time, each engine in its own form
(``EngineAdapter.log_stamp``: ``[2026-01-01 12:00:00 TP0]``, or ``INFO 01-01 12:00:00``
without a year), while the events are UTC. The
server's clock is measured at each start: each start in the kept log begins with the
campaign's own header (``----- <UTC ISO time> starting ...``), and the time zone is the
difference to the first stamped line after it, rounded to a quarter hour; beyond the zone,
the server's clock may be off: its ready line (or the last stamped line before it) against the
``service_ready`` event of that start says by how much, taken when it exceeds what the two can
resolve (two seconds). A log without headers is taken as UTC.

Pooling (``engines/<engine>.py`` ``log_window``): each line gives the tokens, verify steps and
seconds of its stretch where it can; a cell's log accept length is its lines' tokens over their
steps and its log throughput their tokens over their seconds, never a plain mean of lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from specbench_tui.bench.logparse import LogParser
from specbench_tui.engines.registry import adapter, adapters, log_window
from specbench_tui.report.inputs import Inputs

_ENGINES = adapters()
_HEADER = re.compile(r"^----- (\S+) starting ")
_QUARTER_H = 900.0
#: How far a server's clock may seem off from what its ready line and the ready event can
#: resolve (a stamp to the second, a health poll behind the line) before it is corrected.
SKEW_RESOLVED_S = 2.0
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


@dataclass(frozen=True)
class Spans:
    """The stretches (UTC stamps of the line before and of the line) of a cell's pooled log
    lines: those that gave verify steps (``accept``) and those that gave seconds of
    generation (``speed``); ``res``: the stamps' resolution (a stamp to the second says the
    line came within that second)."""

    accept: list[tuple[float, float]]
    speed: list[tuple[float, float]]
    res: float = 1.0

    def union(self, kind: str) -> list[tuple[float, float]]:
        """The ``kind`` stretches merged where they touch or overlap (consecutive lines share
        an end, so a cell's lines make one stretch, whose length is good to a stamp's
        resolution however short each line's), each placed at the middle of what its
        stamps allow."""
        out: list[tuple[float, float]] = []
        half = self.res / 2
        for a, b in sorted(getattr(self, kind)):
            a, b = a + half, b + half
            if out and a <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
        return out


@dataclass(frozen=True)
class StatsLine:
    """One stats line on the UTC clock: the stretch it describes runs from ``since`` (the
    previous line of its kind; None for the first after a start) to ``at``, each stamp good
    to ``res`` seconds."""

    since: float | None
    at: float
    res: float
    stats: dict[str, float]


def _stamp(line: str, year: int) -> tuple[float, float] | None:
    """The line's own time stamp as naive seconds (its clock's wall time read as UTC), and
    the stamp's resolution, in whichever engine's form it is (``EngineAdapter.log_stamp``)."""
    for engine in _ENGINES:
        found = engine.log_stamp(line, year)
        if found is not None:
            when, res = found
            return when.replace(tzinfo=UTC).timestamp(), res
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
    """The stats parser for a group's engine: both produce ``accept_len`` and
    ``gen_throughput`` (bench/logparse.py offers every line to both engines' parsers)."""
    return LogParser().parse


def _family(stats: dict[str, float]) -> str | None:
    """Which periodic line this is, so that a line's stretch starts at the previous line of
    the same kind: a speculative-counts line apart from an engine's throughput line."""
    if "accepted_tokens" in stats or "drafted_tokens" in stats:
        return "spec"
    if THROUGHPUT_KEY in stats or ACCEPT_KEY in stats:
        return "decode"
    return None


def read_log(
    path: Path,
    parse: StatsParser,
    ready_at: Sequence[float] = (),
    ready_line: str | None = None,
) -> list[StatsLine]:
    """The stats lines of a kept log with a usable time stamp, in file order, on the UTC
    clock. ``ready_at``: the UTC times of the group's ``service_ready`` events, one per start
    that became ready, in order (they measure the server clock's skew). ``ready_line``: the
    group engine's own ready line; any engine's when None. It matters: an engine may also
    print the line another engine is ready on (its web server's ``Application startup
    complete``) seconds before its own, and taking both used up two starts' ready events on
    one, putting the next start's lines an hour out."""
    own = ready_line.rstrip("!.") if ready_line else None
    out: list[StatsLine] = []
    try:
        f = path.open(encoding="utf-8", errors="replace")
    except OSError:
        return out
    offset = 0.0
    anchor: float | None = None  # the last header's UTC time, until a stamped line follows
    last_stamp: float | None = None  # the server's last stamp, for its ready line
    ready = list(ready_at)
    year = datetime.now(UTC).year
    previous: dict[str, float] = {}  # family -> the last line's UTC time since the start
    with f:
        for line in f:
            if line.startswith("-----"):
                t = _header_time(line)
                if t is not None:
                    anchor = t
                    year = datetime.fromtimestamp(t, UTC).year
                    previous.clear()
                    ready = [r for r in ready if r >= t]
                continue
            interesting = "batch" in line or "throughput" in line or "acceptance" in line
            is_ready = (own in line) if own else LogParser.is_ready(line)
            if not interesting and anchor is None and not is_ready:
                continue  # cheap skip; only a line right after a header is read for its clock
            got = _stamp(line, year)
            if got is None:
                if is_ready and last_stamp is not None:
                    offset = _skewed(offset, last_stamp, ready)
                continue
            stamp, res = got
            last_stamp = stamp
            if anchor is not None:
                offset = round((stamp - anchor) / _QUARTER_H) * _QUARTER_H
                anchor = None
            if is_ready:
                offset = _skewed(offset, stamp, ready)
            stats = parse(line)
            family = _family(stats) if stats else None
            if stats is None or family is None:
                continue
            at = stamp - offset
            since = previous.get(family)
            previous[family] = at
            if stats.get("decode") and not stats.get("running_req", 1):
                continue  # an idle decode line says nothing about a measurement
            out.append(StatsLine(since, at, res, stats))
    return out


def _skewed(zone: float, ready_stamp: float, ready: list[float]) -> float:
    """The offset once the ready line is seen: the zone, plus the clock's skew where the
    start's ready event says it beyond what can be resolved."""
    zone = round(zone / _QUARTER_H) * _QUARTER_H
    if not ready:
        return zone
    skew = (ready_stamp - zone) - ready.pop(0)
    return zone + skew if abs(skew) > SKEW_RESOLVED_S else zone


def cell_windows(inp: Inputs, group: str) -> list[Window]:
    out = []
    for cid in inp.state.groups[group].cells if group in inp.state.groups else []:
        c = inp.state.cells.get(cid)
        if c is None or c.status != "done" or c.started_at is None or c.ended_at is None:
            continue
        out.append(Window(c.id, c.kind, c.started_at, c.ended_at))
    return sorted(out, key=lambda w: w.start)


def assign(lines: Iterable[StatsLine], windows: list[Window]) -> list[tuple[Window, StatsLine]]:
    """Each line whose whole stretch lies inside a cell's window, with that window."""
    out: list[tuple[Window, StatsLine]] = []
    if not windows:
        return out
    for ln in lines:
        if ln.since is None:
            continue  # the first line after a start: its stretch has no known beginning
        for w in windows:
            if w.start <= ln.since and ln.at + ln.res <= w.end:
                out.append((w, ln))
                break
    return out


def log_figures(inp: Inputs) -> pl.DataFrame:
    """Per cell: the server log's accept length and generation throughput over the lines
    whose stretch lay inside the cell, pooled by their tokens, and how many lines they are;
    with the sums behind the two ratios (``log_accept_tokens`` over ``log_steps``,
    ``log_speed_tokens`` over ``log_seconds``) so that a view over several cells pools them
    the same way rather than averaging ratios."""
    if "server_log" in inp.cache:
        return inp.cache["server_log"]
    rows: list[dict[str, object]] = []
    every_span: dict[str, Spans] = {}
    read = 0  # stats lines in the kept logs, given to a cell or not
    for gid, g in inp.state.groups.items():
        path = inp.layout.log_of(gid)
        if not path.exists():
            continue
        windows = cell_windows(inp, gid)
        if not windows:
            continue
        ready = [r for r, _ in g.windows]
        engine = g.engine or (g.group.engine if g.group is not None else "")
        pooled: dict[str, list[float]] = {}
        kinds: dict[str, str] = {}
        own = adapter(engine).ready_line if engine else None
        lines = read_log(path, stats_parser(engine), ready, own)
        read += len(lines)
        for w, ln in assign(lines, windows):
            counts = log_window(engine, ln.stats, ln.at - (ln.since or ln.at))
            acc = pooled.setdefault(w.cell_id, [0.0, 0.0, 0.0, 0.0, 0.0])
            kinds[w.cell_id] = w.kind
            acc[4] += 1
            if counts is None:
                continue
            stretch = (ln.since if ln.since is not None else ln.at, ln.at)
            cell_spans = every_span.setdefault(w.cell_id, Spans([], [], ln.res))
            if counts.steps:
                acc[0] += counts.tokens
                acc[1] += counts.steps
                cell_spans.accept.append(stretch)
            if counts.seconds:
                acc[2] += counts.tokens
                acc[3] += counts.seconds
                cell_spans.speed.append(stretch)
        for cid, (atok, steps, ttok, secs, n) in pooled.items():
            rows.append(
                {
                    "group": gid,
                    "cell_id": cid,
                    "kind": kinds[cid],
                    "log_accept_len": atok / steps if steps else None,
                    "log_gen_throughput": ttok / secs if secs else None,
                    "log_lines": int(n),
                    "log_accept_tokens": atok if steps else None,
                    "log_steps": steps or None,
                    "log_speed_tokens": ttok if secs else None,
                    "log_seconds": secs or None,
                }
            )
    schema = {
        "group": pl.String,
        "cell_id": pl.String,
        "kind": pl.String,
        "log_accept_len": pl.Float64,
        "log_gen_throughput": pl.Float64,
        "log_lines": pl.Int64,
        "log_accept_tokens": pl.Float64,
        "log_steps": pl.Float64,
        "log_speed_tokens": pl.Float64,
        "log_seconds": pl.Float64,
    }
    out = pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
    inp.cache["server_log"] = out
    inp.cache["server_log_read"] = read
    inp.cache["server_log_spans"] = every_span
    return out


def log_spans(inp: Inputs) -> dict[str, Spans]:
    """Per cell: the stretches its pooled log lines describe (:func:`log_figures` keeps
    them), so that the client's figures can be taken over the same stretches."""
    log_figures(inp)
    return inp.cache.get("server_log_spans", {})


def stats_lines_read(inp: Inputs) -> int:
    """How many stats lines the kept logs of finished cells' groups hold, whether or not a
    cell got them (:func:`log_figures` counts them)."""
    log_figures(inp)
    return int(inp.cache.get("server_log_read", 0))


def share_inside(start: float, end: float, stretches: Sequence[tuple[float, float]]) -> float:
    """The share (0 to 1) of ``start``..``end`` that lies inside the stretches (which do not
    overlap: a cell's lines of one kind follow each other). A zero-length window counts as
    inside when its instant is."""
    if end <= start:
        return 1.0 if any(a <= start <= b for a, b in stretches) else 0.0
    inside = sum(max(0.0, min(end, b) - max(start, a)) for a, b in stretches)
    return min(1.0, inside / (end - start))

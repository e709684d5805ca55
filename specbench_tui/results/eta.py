"""Time left, and its range, from the estimate a run recorded corrected by what it measured.

The engine records the dry-run estimate when a run starts (``estimate_recorded``: each cell's
predicted seconds from plan/estimate.py, each group's start-up, tail and start in the
schedule). What is left is a list of items, each with the estimate's seconds: every cell still
to run, the start-up of every server still to start, the tail of every group still running
(its time besides start-up and cells: gaps between cells, probes, stop; what this run's
finished groups took beyond the estimate's tails is added to each) and the campaign's end
(its last checks, each host closed: as measured in an earlier run, else a group's tail on
each host). The console (header, health pane) and the headless printer (its done lines) show
the same figures: pure arithmetic on the reducer's state, no clock of its own, no textual
import.

**Correction.** A cell is predicted at its estimate times the geometric mean of measured over
estimated of the cells finished in this run that are most like it (``cell_keys``): same
config, TP, kind, max_tokens and level; else same config, TP and kind; else same config and
TP (the same server); else borrowed from other servers: same TP, kind, tokens and level; same
TP and kind; same kind; any. The estimate already knows how cells differ (requests, lengths,
levels); what it does not know is how far off its rates are, and that is what a ratio says.
Averaging durations per workload kind instead made the ETA swing 2x as the first TP4 or
high-concurrency cells came in. A start-up is corrected by the start-ups measured in this run
(same config and TP, else any), a group's tail by its own cells' correction (its probes are
requests like theirs).

**Range.** An item's log ratio has two errors: its own scatter, independent from item to item
(the pooled spread of this run's ratios around their class means), and an error every item
left shares: the class mean's own uncertainty (scatter over the root of the cells measured),
a drift (``DRIFT``: a machine's load changes while the campaign runs) and, where the ratio is
borrowed from another server or nothing was measured yet, the spread of the constants
themselves (the measured ones' as the estimate recorded it; the defaults' ``UNMEASURED``).
Shared errors add up linearly, scatter in quadrature; the range is the middle times
exp(±Z·sigma), Z for 90 %. So it narrows as cells are measured (n grows, fewer items borrow),
never below the drift, and moves only when the work left moves: a group that failed takes its
cells with it, a rerun queued adds one.

**Parallelism.** Groups run side by side (packed, several hosts), so the items' seconds are
not wall time: a host's sum is divided by the parallelism the schedule predicted for the
groups it has left (their seconds over the span of their slots: a packed host's last groups
may run fewer at a time than its first), never less than its longest group's own remainder;
the campaign ends with its slowest host.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from specbench_tui.results.cells import Cell
from specbench_tui.results.events import EstimateRecorded
from specbench_tui.results.progress import format_clock
from specbench_tui.results.state import CampaignState, CellState, GroupState

#: How far off the plan's default constants may be (x0.5 to x2), before anything is measured.
UNMEASURED = (0.5, 2.0)
#: The range's width in standard deviations: 90 % two-sided.
Z = 1.645
#: The spread of the default constants, as a standard deviation of the log ratio.
ASSUMED_SD = math.log(UNMEASURED[1]) / Z
#: How far a ratio measured now may be off later in the same run (the machine's load drifts).
DRIFT = 0.10
#: How far constants measured in an earlier run may be off in this one (another day, load).
RUN_TO_RUN = 0.25
#: ``cell_keys`` before this index share the cell's server (config and TP): its own class.
OWN = 3

Key = tuple[object, ...]


def cell_keys(config: str, tp: int, kind: str, tokens: int | None, level: int) -> list[Key]:
    """From the most alike to any cell: the classes a cell's ratio is looked up by."""
    return [
        (config, tp, kind, tokens, level),
        (config, tp, kind),
        (config, tp),
        (tp, kind, tokens, level),
        (tp, kind),
        (kind,),
        (),
    ]


def planned_keys(c: Cell) -> list[Key]:
    level = (c.concurrency or 1) if c.kind == "concurrency" else 1
    return cell_keys(c.config, c.tp, c.kind, c.max_tokens, level)


def state_keys(c: CellState) -> list[Key]:
    if c.cell is None:  # a cell the log names but never planned
        return cell_keys(c.config, c.tp, c.kind, None, 1)
    return planned_keys(c.cell)


@dataclass(frozen=True)
class Hit:
    """A class found for an item: the mean log of its values, how many, whether its own."""

    mean: float
    n: int
    own: bool


@dataclass
class ClassLogs:
    """Logs of measured values (ratios, seconds) per class; a value joins every class of its
    keys. Its ``scatter`` is the pooled spread around the finest classes' means."""

    logs: dict[Key, list[float]] = field(default_factory=dict)
    finest: set[Key] = field(default_factory=set)
    count: int = 0  # values added
    _scatter: tuple[float | None] | None = field(default=None, repr=False)  # cached

    def add(self, keys: Sequence[Key], value: float) -> None:
        if value <= 0 or not keys:
            return
        x = math.log(value)
        self.count += 1
        self._scatter = None
        self.finest.add(keys[0])
        for k in keys:
            self.logs.setdefault(k, []).append(x)

    def look(self, keys: Sequence[Key], own: int) -> Hit | None:
        """The first class of ``keys`` with values; own when among the first ``own`` keys."""
        for i, k in enumerate(keys):
            xs = self.logs.get(k)
            if xs:
                return Hit(sum(xs) / len(xs), len(xs), i < own)
        return None

    def scatter(self) -> float | None:
        """The pooled standard deviation around the finest classes' means (None: no class
        holds two values yet)."""
        if self._scatter is None:
            self._scatter = (self._pooled(),)
        return self._scatter[0]

    def _pooled(self) -> float | None:
        ss, dof = 0.0, 0
        for k in self.finest:
            xs = self.logs[k]
            if len(xs) > 1:
                m = sum(xs) / len(xs)
                ss += sum((x - m) ** 2 for x in xs)
                dof += len(xs) - 1
        return math.sqrt(ss / dof) if dof else None

    def range(self) -> tuple[float, float]:
        """The lowest and highest geometric mean of the finest classes (1, 1 with none)."""
        means = [math.exp(sum(xs) / len(xs)) for k in self.finest if (xs := self.logs[k])]
        return (min(means), max(means)) if means else (1.0, 1.0)


@dataclass(frozen=True)
class Eta:
    seconds: float
    low: float
    high: float
    measured: int  # finished cells of this run the correction rests on (0: the plan's estimate)


@dataclass
class _Sum:
    """Seconds left over some items, with the errors they share and their own."""

    seconds: float = 0.0
    shared: float = 0.0  # sum of seconds x shared sd
    own2: float = 0.0  # sum of (seconds x own sd)^2

    def add(self, seconds: float, shared_sd: float, own_sd: float) -> None:
        self.seconds += seconds
        self.shared += seconds * shared_sd
        self.own2 += (seconds * own_sd) ** 2

    def merge(self, other: _Sum) -> None:
        self.seconds += other.seconds
        self.shared += other.shared
        self.own2 += other.own2

    def sigma(self) -> float:
        return math.sqrt(self.shared**2 + self.own2) / self.seconds if self.seconds > 0 else 0.0


@dataclass
class _Context:
    """What the estimate and this run's measurements say, gathered once per reading."""

    est: EstimateRecorded
    cells: ClassLogs
    startups: ClassLogs
    tail_extra: float  # what finished groups' tails took beyond the estimate's, on average
    tail_mean: float  # what finished groups' tails took, on average
    startup_each: float  # a log without per-group start-ups: its total over the groups
    prior_shared: float  # before anything like an item was measured in this run
    prior_own: float
    borrowed: float  # added where a ratio comes from another server

    @classmethod
    def of(cls, p: CampaignState, est: EstimateRecorded) -> _Context:
        cells = ClassLogs()
        for c in p.cells.values():
            e = est.per_cell_s.get(c.id, 0.0)
            if c.status == "done" and not c.resumed and c.duration_s and e > 0:
                cells.add(state_keys(c), c.duration_s / e)
        each = est.startup_s / max(len(p.groups), 1)
        startups = ClassLogs()
        extra: list[float] = []  # each finished group's tail beyond the estimate's
        tails: list[float] = []
        for g in p.groups.values():
            up, tail = group_took(p, g)
            e = est.group_startup_s.get(g.id, each)
            if up is not None and e > 0:
                startups.add([(g.config, g.tp), ()], up / e)
            if tail is not None:
                hit = cells.look([(g.config, g.tp), ()], 1)
                f = math.exp(hit.mean) if hit is not None else 1.0
                extra.append(tail - est.group_tail_s.get(g.id, 0.0) * f)
                tails.append(tail)
        mean = (sum(extra) / len(extra), sum(tails) / len(tails)) if tails else (0.0, 0.0)
        if est.measured_from:
            spread = max(est.spread, DRIFT)
            return cls(est, cells, startups, *mean, each, RUN_TO_RUN, spread, spread)
        return cls(est, cells, startups, *mean, each, ASSUMED_SD, 0.0, ASSUMED_SD)

    def add(
        self,
        out: _Sum,
        seconds: float,
        hit: Hit | None,
        logs: ClassLogs,
        ran: float = 0.0,
        extra: float = 0.0,
    ) -> None:
        """One item of ``seconds`` estimated, corrected by ``hit`` (and ``extra`` seconds
        measured beyond it), less what it has had."""
        if hit is None:
            out.add(max(seconds + extra - ran, 0.0), self.prior_shared, self.prior_own)
            return
        noise = logs.scatter()
        if noise is None:
            noise = max(self.prior_own, DRIFT)
        shared = math.sqrt(noise**2 / hit.n + DRIFT**2 + (0.0 if hit.own else self.borrowed**2))
        out.add(max(seconds * math.exp(hit.mean) + extra - ran, 0.0), shared, noise)


def group_took(p: CampaignState, g: GroupState) -> tuple[float | None, float | None]:
    """(start-up, tail) of a group's latest start: from its start until its server was ready,
    and from then until it finished less its cells' seconds in this run; None for what it has
    not done (a server never ready has neither)."""
    if g.started_at is None or not g.windows or g.windows[-1][0] < g.started_at:
        return None, None
    ready = g.windows[-1][0]
    if g.ended_at is None or g.ended_at < ready:
        return ready - g.started_at, None
    cells = (p.cells.get(cid) for cid in g.cells)
    ran = sum(c.duration_s for c in cells if c is not None and c.duration_s and not c.resumed)
    return ready - g.started_at, max(g.ended_at - ready - ran, 0.0)


def _to_run(c: CellState | None) -> bool:
    return c is not None and ((c.status == "pending" and c.selected) or c.status == "running")


def _group_sum(p: CampaignState, g: GroupState, ctx: _Context, now: float) -> _Sum:
    est = ctx.est
    out = _Sum()
    waiting = running = False
    last_end = 0.0
    for cid in g.cells:
        c = p.cells.get(cid)
        if c is not None and c.ended_at is not None and c.status != "pending":
            last_end = max(last_end, c.ended_at)
        if c is None or not _to_run(c):
            continue
        waiting = waiting or c.status == "pending"
        running = running or c.status == "running"
        ran = now - c.started_at if c.status == "running" and c.started_at is not None else 0.0
        hit = ctx.cells.look(state_keys(c), OWN)
        ctx.add(out, est.per_cell_s.get(cid, 0.0), hit, ctx.cells, ran)
    if (g.server == "pending" and waiting) or g.server == "starting":
        ran = now - g.started_at if g.server == "starting" and g.started_at is not None else 0.0
        hit = ctx.startups.look([(g.config, g.tp), ()], 1)
        ctx.add(out, est.group_startup_s.get(g.id, ctx.startup_each), hit, ctx.startups, ran)
    tail = est.group_tail_s.get(g.id, 0.0)
    if (tail > 0 or ctx.tail_extra > 0) and (
        waiting or running or g.server in ("starting", "ready")
    ):
        # after its last cell, the tail has had what went since
        ran = now - last_end if not (waiting or running) and last_end else 0.0
        hit = ctx.cells.look([(g.config, g.tp), ()], 1)
        ctx.add(out, tail, hit, ctx.cells, ran, ctx.tail_extra)
    return out


def _eta(s: _Sum, seconds: float, measured: int) -> Eta:
    w = math.exp(Z * s.sigma())
    return Eta(seconds, seconds / w, seconds * w, measured)


def group_left(p: CampaignState, gid: str, now: float) -> Eta | None:
    """What one group still needs (its cells one after another, its start-up if its server
    has not started, its tail); None without a recorded estimate."""
    if gid not in p.groups or p.estimate is None:
        return None
    ctx = _Context.of(p, p.estimate)
    s = _group_sum(p, p.groups[gid], ctx, now)
    return _eta(s, s.seconds, ctx.cells.count)


def _serial(est: EstimateRecorded, g: GroupState, each: float) -> float:
    """A group's seconds in the estimate: start-up, cells and tail."""
    cells = sum(est.per_cell_s.get(cid, 0.0) for cid in g.cells)
    return est.group_startup_s.get(g.id, each) + cells + est.group_tail_s.get(g.id, 0.0)


def _parallel(est: EstimateRecorded, left: list[tuple[str, float]], serial: float) -> float:
    """How many of the groups ``left`` (id, estimated seconds) the schedule runs at once: their
    seconds over the span of their slots (a packed host's last groups may run fewer at a time
    than its first). A log without the schedule: the whole plan's ``serial`` over its wall."""
    at = est.group_at_s
    if all(gid in at for gid, _ in left):
        span = max(at[g] + d for g, d in left) - min(at[g] for g, _ in left)
        return max(sum(d for _, d in left) / span, 1.0) if span > 0 else 1.0
    return max(serial / est.total_s, 1.0) if est.total_s > 0 else 1.0


def campaign_left(p: CampaignState, now: float) -> Eta | None:
    """The campaign's time left; None without a recorded estimate (a log from before the
    engine recorded one: then the caller falls back to per-kind means)."""
    if p.finished:
        return Eta(0.0, 0.0, 0.0, 0)
    est = p.estimate
    if est is None or not est.per_cell_s:
        return None
    ctx = _Context.of(p, est)
    # Hosts run side by side; a log without the schedule: every group in one pool.
    pools: dict[str, list[tuple[str, float, _Sum]]] = {}
    for g in p.groups.values():
        pool = pools.setdefault(g.host if est.group_at_s else "", [])
        pool.append((g.id, _serial(est, g, ctx.startup_each), _group_sum(p, g, ctx, now)))
    total = _Sum()
    seconds = 0.0
    for pool in pools.values():
        left = [(gid, d) for gid, d, s in pool if s.seconds > 0]
        if not left:
            continue
        parallel = _parallel(est, left, sum(d for _, d, _ in pool))
        sums = [s for _, _, s in pool]
        seconds = max(seconds, sum(s.seconds for s in sums) / parallel, *(s.seconds for s in sums))
        for s in sums:
            total.merge(s)
    # The end (the last checks, each host closed): as measured in an earlier run, else a
    # group's tail on each host; what the checks judge and the load make it vary 2x either way.
    end = est.end_s or ctx.tail_mean * len(pools)
    if end > 0:
        total.add(end, ASSUMED_SD, 0.0)
        seconds += end
    return _eta(total, seconds, ctx.cells.count)


def eta_text(eta: Eta | None, fallback: float | None, dash: str = "–") -> tuple[str, str]:
    """(the ETA, its range) as the panes show them: ``0:39`` and ``0:30–0:52``; the
    per-kind mean ``fallback`` with no range where no estimate was recorded."""
    if eta is None:
        return (format_clock(fallback) if fallback is not None else "—"), ""
    low, high = format_clock(eta.low), format_clock(eta.high)
    return format_clock(eta.seconds), (f"{low}{dash}{high}" if low != high else "")


def eta_words(p: CampaignState, now: float) -> str:
    """`` ETA 0:15 (0:12-0:20)``, the time left and its range, for a line of text; "" where
    the log recorded no estimate."""
    eta = campaign_left(p, now)
    if eta is None:
        return ""
    shown, span = eta_text(eta, None, "-")
    return f" ETA {shown}" + (f" ({span})" if span else "")

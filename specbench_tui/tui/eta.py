"""Time left, from the plan's estimate corrected by what this run measured.

The engine records the dry-run estimate when a run starts (``estimate_recorded``: each cell's
predicted seconds from plan/estimate.py, the model ``--dry-run`` prints). Each cell still to
run is predicted at its own estimate times a correction: the ratio measured/estimated of the
cells already finished that are most like it (same TP, kind, max_tokens and concurrency
level; else same TP and kind; else same TP; else any). Averaging durations per workload kind
instead made the ETA swing 2x as the first TP4 or high-concurrency cells came in, since a
TP1 single cell and a TP4 c64 cell have nothing in common but their kind; the estimate
already knows how they differ, and the measurement only says how far off its rates are.

The range is the spread of the ratios the correction rests on (at least ±10 %); before any
cell was measured it is the estimate itself, ×0.5 to ×2 (its rates are defaults).

Groups run side by side (packed, several hosts), so the cells' seconds are not wall time:
the sum left is divided by the parallelism the estimate's schedule predicted (its cells'
serial seconds over its wall time), and is never less than the longest group's own
remainder (a group's cells run one after another). No textual import: pure arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specbench_tui.results.progress import CampaignProgress, format_clock
from specbench_tui.results.state import CellState

#: The narrowest range the correction claims, as a ratio either side.
MIN_SPREAD = 0.10
#: Before anything was measured: how far off the plan's default rates may be.
UNMEASURED = (0.5, 2.0)


@dataclass(frozen=True)
class Eta:
    seconds: float
    low: float
    high: float
    measured: int  # finished cells of this run the correction rests on (0: the plan's estimate)


def _classes(c: CellState) -> list[tuple[object, ...]]:
    """From the most alike to any cell: the keys a cell's correction is looked up by."""
    spec = c.cell
    tokens = spec.max_tokens if spec is not None else None
    level = (spec.concurrency or 1) if spec is not None and c.kind == "concurrency" else 1
    return [(c.tp, c.kind, tokens, level), (c.tp, c.kind), (c.tp,), ()]


@dataclass
class _Ratios:
    """measured/estimated per class of cells finished in this run."""

    by_class: dict[tuple[object, ...], list[float]]

    @classmethod
    def of(cls, p: CampaignProgress, per_cell: dict[str, float]) -> _Ratios:
        by: dict[tuple[object, ...], list[float]] = {}
        for c in p.cells.values():
            est = per_cell.get(c.id, 0.0)
            if c.status != "done" or c.resumed or not c.duration_s or est <= 0:
                continue
            r = c.duration_s / est
            for key in _classes(c):
                by.setdefault(key, []).append(r)
        return cls(by)

    def correction(self, c: CellState) -> tuple[float, float, float]:
        """(ratio, low, high) for a cell: the geometric mean of its closest class's ratios."""
        for key in _classes(c):
            rs = self.by_class.get(key)
            if rs:
                mid = math.exp(sum(math.log(r) for r in rs) / len(rs))
                lo = min(min(rs), mid * (1 - MIN_SPREAD))
                hi = max(max(rs), mid * (1 + MIN_SPREAD))
                return mid, lo, hi
        return 1.0, *UNMEASURED

    @property
    def count(self) -> int:
        return len(self.by_class.get((), []))


def _cell_left(
    c: CellState, est: float, ratios: _Ratios, now: float
) -> tuple[float, float, float] | None:
    """(expected, low, high) seconds a cell still needs; None for one not to run."""
    if not ((c.status == "pending" and c.selected) or c.status == "running"):
        return None
    mid, lo, hi = ratios.correction(c)
    ran = now - c.started_at if c.status == "running" and c.started_at is not None else 0.0
    return tuple(max(est * r - ran, 0.0) for r in (mid, lo, hi))  # type: ignore[return-value]


def _startup(p: CampaignProgress) -> tuple[float, float, float]:
    """One server start-up: measured in this run where one was, else the estimate's."""
    measured = [g.startup_s for g in p.groups.values() if g.startup_s]
    if measured:
        mid = sum(measured) / len(measured)
        return mid, min(measured), max(measured)
    est = p.estimate.startup_s / max(len(p.groups), 1) if p.estimate else 0.0
    return est, est * UNMEASURED[0], est * UNMEASURED[1]


def group_left(p: CampaignProgress, gid: str, now: float) -> Eta | None:
    """What one group still needs (its cells one after another, and its start-up if its
    server has not started); None without a recorded estimate."""
    if gid not in p.groups or p.estimate is None:
        return None
    return _group_left(p, gid, _Ratios.of(p, p.estimate.per_cell_s), now)


def _group_left(p: CampaignProgress, gid: str, ratios: _Ratios, now: float) -> Eta:
    g = p.groups[gid]
    assert p.estimate is not None
    per_cell = p.estimate.per_cell_s
    total = [0.0, 0.0, 0.0]
    pending = False
    for cid in g.cells:
        c = p.cells.get(cid)
        left = _cell_left(c, per_cell.get(cid, 0.0), ratios, now) if c is not None else None
        if left is None:
            continue
        pending = pending or c.status == "pending"  # type: ignore[union-attr]
        total = [a + b for a, b in zip(total, left, strict=True)]
    if g.server == "pending" and pending:
        total = [a + b for a, b in zip(total, _startup(p), strict=True)]
    return Eta(total[0], total[1], total[2], ratios.count)


def campaign_left(p: CampaignProgress, now: float) -> Eta | None:
    """The campaign's time left; None without a recorded estimate (a log from before the
    engine recorded one: then the caller falls back to per-kind means)."""
    if p.finished:
        return Eta(0.0, 0.0, 0.0, 0)
    est = p.estimate
    if est is None or not est.per_cell_s:
        return None
    serial = sum(est.per_cell_s.values()) + est.startup_s
    parallel = max(serial / est.total_s, 1.0) if est.total_s > 0 else 1.0
    sums = [0.0, 0.0, 0.0]
    longest = [0.0, 0.0, 0.0]
    ratios = _Ratios.of(p, est.per_cell_s)
    for gid in p.groups:
        left = _group_left(p, gid, ratios, now)
        for i, v in enumerate((left.seconds, left.low, left.high)):
            sums[i] += v
            longest[i] = max(longest[i], v)
    mid, lo, hi = (max(s / parallel, m) for s, m in zip(sums, longest, strict=True))
    return Eta(mid, lo, hi, ratios.count)


def eta_text(eta: Eta | None, fallback: float | None) -> tuple[str, str]:
    """(the ETA, its range) as the panes show them: ``0:39`` and ``0:30–0:52``; the
    per-kind mean ``fallback`` with no range where no estimate was recorded."""
    if eta is None:
        return (format_clock(fallback) if fallback is not None else "—"), ""
    low, high = format_clock(eta.low), format_clock(eta.high)
    return format_clock(eta.seconds), (f"{low}–{high}" if low != high else "")

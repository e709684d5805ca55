"""Which concurrency levels a ``kind = "capacity"`` search tries: bracketed bisection.

The plan's ``levels`` are the bracket (their lowest and highest) and the points tried first.
The search assumes that the share of requests meeting the SLO falls as concurrency grows, so
one level's verdict settles every level on its side: a pass settles those below it, a fail
those above. It keeps the highest passing level and the lowest failing one, and tries next

1. the lowest listed level, then the highest (a fail at the bottom or a pass at the top ends
   the search: the capacity is below the bracket, or at least its top);
2. the listed level in the middle (by position in the list) of those still open between the
   two, so a list such as [1, 2, 4, 8, 16, 32] is searched in its own steps first;
3. once no listed level is open, the integer midpoint of the bracket,

until the bracket closes (its two ends are neighbours) or ``max_points`` levels were tried.
The search is pure (no I/O): the workload driver (``bench/workloads.py``) runs each level it
asks for, and the estimate of the dry run plays it against an assumed capacity.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from specbench_tui.plan.model import PlanSpec
from specbench_tui.plan.slo import fewest_requests
from specbench_tui.table_types import PlanError


@dataclass
class CapacitySearch:
    """One search's state: what was tried, and what to try next."""

    levels: Sequence[int]
    max_points: int
    tried: dict[int, bool] = field(default_factory=dict)  # level -> passed, in the order tried

    def __post_init__(self) -> None:
        self.listed = sorted(set(self.levels))
        if len(self.listed) < 2:
            raise ValueError("a capacity search needs at least two levels (its bracket)")

    @property
    def passed(self) -> int | None:
        """The highest level that passed (the capacity found so far)."""
        ok = [lv for lv, p in self.tried.items() if p]
        return max(ok) if ok else None

    @property
    def failed(self) -> int | None:
        """The lowest level that failed."""
        bad = [lv for lv, p in self.tried.items() if not p]
        return min(bad) if bad else None

    def record(self, level: int, passed: bool) -> None:
        self.tried[level] = passed

    def next_level(self) -> int | None:
        """The next level to try; None when the search is over."""
        if len(self.tried) >= self.max_points:
            return None
        lo, hi = self.listed[0], self.listed[-1]
        if lo not in self.tried:
            return lo
        if not self.tried[lo]:
            return None  # below the bracket
        if hi not in self.tried:
            return hi
        if self.tried[hi]:
            return None  # at least the top
        a, b = self.passed, self.failed
        assert a is not None and b is not None
        open_listed = [lv for lv in self.listed if a < lv < b and lv not in self.tried]
        if open_listed:
            return open_listed[(len(open_listed) - 1) // 2]
        if b - a <= 1:
            return None
        return (a + b) // 2

    @property
    def note(self) -> str:
        """How the search ended, in words."""
        lo, hi = self.listed[0], self.listed[-1]
        if self.tried.get(lo) is False:
            return f"below the bracket: the lowest level, {lo}, failed"
        if self.tried.get(hi):
            return f"at least the top of the bracket: the highest level, {hi}, passed"
        a, b = self.passed, self.failed
        if a is not None and b is not None and b - a <= 1:
            return "bracket closed"
        if len(self.tried) >= self.max_points:
            return f"stopped at max_points = {self.max_points}, bracket open"
        return "search not finished"


def search(levels: Sequence[int], max_points: int, passes: Callable[[int], bool]) -> CapacitySearch:
    """Run a whole search against ``passes`` (a level's verdict): for tests and the estimate."""
    s = CapacitySearch(levels, max_points)
    while (level := s.next_level()) is not None:
        s.record(level, passes(level))
    return s


def check_capacity(spec: PlanSpec) -> list[PlanError]:
    """A capacity workload needs ``[slo]``, and enough requests per level that a level can
    pass at all (16 requests, every one good, show a share of at least 0.81, never 0.9)."""
    errs: list[PlanError] = []
    for wname, w in spec.workloads.items():
        if w.kind != "capacity":
            continue
        if spec.slo is None:
            errs.append(
                PlanError(
                    ("workloads", wname, "kind"),
                    'a capacity search needs an [slo] table (e.g. [slo] tpot = "50ms")',
                )
            )
            continue
        need = fewest_requests(spec.slo.target)
        if w.requests < need:
            errs.append(
                PlanError(
                    ("workloads", wname, "requests"),
                    f"requests = {w.requests} can never show a share of {spec.slo.target:g} "
                    f"at 95% (all good still leaves the interval's lower bound below it); "
                    f"use at least {need}, or a lower [slo] target",
                )
            )
    return errs

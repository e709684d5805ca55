"""The estimate's constants measured in an earlier results directory of the same plan
(``--estimate-from DIR``; by default the newest results of the same campaign name under the
plan's results root), read through the one reducer of the event log (results/state.py).

What is measured, in real seconds (a simulated host's seconds times its speed then):
- each finished cell's time, from its start to its end, held against what the plan's model
  gives it (plan/estimate.py) as a ratio per class of cell: config, TP, kind, max_tokens and
  level, then coarser classes (results/eta.py ``cell_keys``, the classes the ETA corrects by).
  A ratio on the model, rather than a decode rate, a prefill rate and an overhead each: a
  cell's time is all of them at once plus what no rate models (warm-up, client, log reads),
  the model already knows how cells of a class differ (requests, lengths, levels), and the
  ETA corrects by the same classes, so the dry run and the ETA agree;
- each group's server start-up, from its start until ready (GPU wait included), by host,
  config and TP, else config and TP, else TP, else any group;
- each group's tail, its time besides its start-up and its cells (the gaps between cells, the
  checks' probes, the stop), by host, config and TP, else config and TP (a tail with probes
  is nothing like one without);
- each group that failed to start: with the same command it is counted as failing again
  after the same time (fixing its config changes its command: then it is estimated like any);
- the end, after the last group until the campaign finished (the last checks).

Only cells and groups that ran in the directory's latest run have times (the reducer keeps
no durations of earlier runs).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from specbench_tui.errors import InputError
from specbench_tui.results.cells import Cell, ServiceGroup
from specbench_tui.results.eta import DRIFT, ClassLogs, Key, group_took, planned_keys
from specbench_tui.results.files import NotAFile, read_events
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.state import CampaignState, GroupState


@dataclass(frozen=True)
class MeasuredCell:
    cell: Cell
    speculative: bool
    seconds: float


@dataclass(frozen=True)
class MeasuredGroup:
    id: str
    host: str
    config: str
    tp: int
    command: tuple[str, ...]
    startup_s: float | None = None  # start until ready
    tail_s: float | None = None  # besides its start-up and cells until it finished
    failed_s: float | None = None  # start until it failed, where it never got ready


def _group_keys(host: str, config: str, tp: int) -> list[Key]:
    return [(host, config, tp), (config, tp), (tp,), ()]


@dataclass
class Learned:
    """Measurements held against the plan's model: what the estimate takes from them."""

    source: Path
    ratios: ClassLogs  # measured / modelled per class of cell
    startups: ClassLogs = field(default_factory=ClassLogs)  # seconds per group class
    tails: ClassLogs = field(default_factory=ClassLogs)
    failing: dict[str, tuple[tuple[str, ...], float]] = field(default_factory=dict)
    end_s: float = 0.0

    @property
    def cells(self) -> int:
        return self.ratios.count

    @property
    def spread(self) -> float:
        """The scatter of the cells' ratios around their classes (at least the drift)."""
        return max(self.ratios.scatter() or 0.0, DRIFT)

    def cell_factor(self, c: Cell) -> tuple[float, bool]:
        """(measured/modelled for a cell's class, whether from its own server's cells)."""
        hit = self.ratios.look(planned_keys(c), 3)
        return (math.exp(hit.mean), hit.own) if hit is not None else (1.0, False)

    def startup_s(self, g: ServiceGroup) -> float | None:
        hit = self.startups.look(_group_keys(g.host, g.config, g.tp), 4)
        return math.exp(hit.mean) if hit is not None else None

    def tail_s(self, g: ServiceGroup) -> float | None:
        hit = self.tails.look(_group_keys(g.host, g.config, g.tp)[:2], 2)
        return math.exp(hit.mean) if hit is not None else None

    def fails_s(self, g: ServiceGroup) -> float | None:
        """Seconds to fail, for a group that failed to start there with the same command."""
        was = self.failing.get(g.id)
        return was[1] if was is not None and was[0] == g.command else None


@dataclass(frozen=True)
class Measured:
    """What an earlier results directory measured, in real seconds."""

    source: Path
    cells: tuple[MeasuredCell, ...]
    groups: tuple[MeasuredGroup, ...]
    end_s: float | None = None

    def learn(self, model: Callable[[Cell, bool], float]) -> Learned:
        """The ratios per class against ``model`` (a cell's modelled real seconds; a cell the
        model cannot price, raising KeyError or ValueError, is left out)."""
        ratios = ClassLogs()
        for m in self.cells:
            try:
                t = model(m.cell, m.speculative)
            except (KeyError, ValueError):
                continue
            if t > 0:
                ratios.add(planned_keys(m.cell), m.seconds / t)
        out = Learned(self.source, ratios, end_s=self.end_s or 0.0)
        for g in self.groups:
            keys = _group_keys(g.host, g.config, g.tp)
            if g.startup_s:
                out.startups.add(keys, g.startup_s)
            if g.tail_s:
                out.tails.add(keys[:2], g.tail_s)
            if g.failed_s is not None:
                out.failing[g.id] = (g.command, g.failed_s)
        return out


def _group(p: CampaignState, g: GroupState, speed: float) -> MeasuredGroup | None:
    """A group's times in its directory's latest run; None for one that did not start there."""
    if g.started_at is None or g.ended_at is None or g.group is None:
        return None
    base = MeasuredGroup(g.id, g.host, g.config, g.tp, tuple(g.group.command))
    up, tail = group_took(p, g)
    if up is None:  # never ready in its latest start
        failed = (g.ended_at - g.started_at) * speed
        return replace(base, failed_s=failed) if g.server == "failed" else None
    return replace(
        base,
        startup_s=up * speed,
        tail_s=tail * speed if tail is not None and g.status == "done" else None,
    )


def load_measured(source: Path, speeds: dict[str, float] | None = None) -> Measured | None:
    """What ``source`` measured; None where it holds no finished cell of its latest run.
    ``speeds``: each host's speed where the log recorded none (the plan's, for a log from
    before the engine recorded its estimate)."""
    layout = ResultsLayout(source)
    try:
        events = read_events(layout.events)
    except (NotAFile, OSError) as exc:
        raise InputError(f"{source}: its event log cannot be read ({exc})") from None
    st = CampaignState.from_events(events, layout.rows_exist)
    recorded = st.estimate.host_speeds if st.estimate is not None else {}

    def speed(host: str) -> float:
        return recorded.get(host) or (speeds or {}).get(host, 1.0)

    ran = [
        c
        for c in st.cells.values()
        if c.status == "done" and not c.resumed and c.duration_s and c.cell is not None
    ]
    if not ran:
        return None
    spec = {g.id: g.speculative for g in st.groups.values()}
    cells = tuple(
        MeasuredCell(c.cell, spec.get(c.group, False), (c.duration_s or 0.0) * speed(c.host))
        for c in ran
        if c.cell is not None
    )
    groups = [m for g in st.groups.values() if (m := _group(st, g, speed(g.host))) is not None]
    ends = [g.ended_at for g in st.groups.values() if g.ended_at is not None]
    end = None
    if st.finished and st.finished_at is not None and ends:
        end = max(st.finished_at - max(ends), 0.0) * max(speed(h) for h in st.hosts or [""])
    return Measured(source, cells, tuple(groups), end)


def _candidates(layout: ResultsLayout) -> list[Path]:
    """The campaign's own directory, then the ones ``--fresh`` moved aside, newest first."""
    root = layout.root
    aside = sorted(root.parent.glob(f"{root.name}.2*"), reverse=True)  # dated: .20260101T...
    return [root, *(p for p in aside if p.is_dir())]


def find_measured(
    layout: ResultsLayout, given: Path | None, speeds: dict[str, float]
) -> Measured | None:
    """The measurements the estimate takes: from ``given`` (``--estimate-from``: it must hold
    finished cells), else from the newest results of the campaign that hold some (its own
    directory, else one ``--fresh`` moved aside), else none."""
    if given is not None:
        if not ResultsLayout(given).events.is_file():
            raise InputError(f"--estimate-from {given}: not a results directory (no events.jsonl)")
        found = load_measured(given, speeds)
        if found is None:
            raise InputError(f"--estimate-from {given}: no finished cell to measure from")
        return found
    for path in _candidates(layout):
        if ResultsLayout(path).events.is_file():
            found = load_measured(path, speeds)
            if found is not None:
                return found
    return None

"""GPU board energy of a cell, defined once: the engine computes it from the samples it
reads live and records it in a ``cell_energy`` event, whose figures are the cell's
``cells.parquet`` columns, the headless line and the report's energy table.

Why one computation in the engine and not one in each reader: a cell ends before the
telemetry sample that closes its window arrives (samples come once a second, and parts of
``telemetry.parquet`` are written once a minute), and only the live samples carry the
processes on each GPU, which the "another process" rule needs. So the engine waits for the
sample after the window, computes the figures here, and every view reads that record; none
integrates anything of its own.

What is measured: the energy of the group's GPUs (the boards, as NVML and nvidia-smi
report them: no CPU, memory or fans) over exactly the cell's measured window
(``figures.measured_window``: the request span of a concurrency cell, each request's own
span of a sequential one; warm-up and the gaps between requests are outside it).

- **nvml_counter**: where every sample of every GPU around the window has NVML's total
  energy counter (mJ since the driver loaded), the counter's rise over each span, read
  between the two samples around each edge as a straight line (the board's own average
  power between them). Exact at the samples, and blind to how often power was read.
- **power_integral**: otherwise (nvidia-smi has no counter; the counter went back, which a
  driver reload does), the trapezoidal integral of the power readings over the spans.

``energy_valid`` is false, with the reason in ``energy_note``, when a gap between two of a
GPU's samples in the window is over ``MAX_GAP_S`` (the integral would guess across it), when
a GPU has fewer than ``MIN_SAMPLES`` samples inside the window and the counter was not read
within ``EDGE_STEP_S`` of each edge ("low confidence": a short cell is mostly its edges; the
agent's reads of the counter alone between samples, ``energy_trace``, pin the edges), or
when a process other than the group's own server used one of its GPUs during the window (its
energy is on the same board). Where the samples do not reach
past both edges of the window, there is no figure at all.

The idle floor is the group's power with its server up and no request in flight: the mean
power of each of its GPUs over the samples between the server's ready line and its first
cell (before any warm-up), summed over the GPUs. ``j_per_output_token_above_idle`` takes
that floor times the window off the energy: what the tokens cost beyond keeping the server
up.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from specbench_tui.bench.conditions import GpuCondition
from specbench_tui.results.records import ENERGY_COLUMNS

#: A gap between two samples of one GPU, inside a window, over which no figure is trusted.
MAX_GAP_S = 3.0
#: Fewer samples per GPU inside the window than this is "low confidence", unless the energy
#: counter was read within ``EDGE_STEP_S`` of every edge (the agent's ``energy_trace``): then
#: the counter's rise is exact to that step whatever the window's length.
MIN_SAMPLES = 20
EDGE_STEP_S = 0.25

__all__ = ["ENERGY_COLUMNS", "CellEnergy", "PowerSample", "cell_energy", "idle_power"]

Method = Literal["nvml_counter", "power_integral"]


@dataclass(frozen=True)
class PowerSample:
    """One GPU's reading: ``t`` on the clock of the window it is held against, power in W,
    NVML's energy counter in mJ (None without one), and the processes on the GPU."""

    t: float
    gpu: int
    power_w: float | None
    energy_mj: float | None = None
    pids: frozenset[int] = field(default_factory=frozenset)
    # Its clocks, temperature, power limit and throttle reasons (bench/conditions.py).
    cond: GpuCondition | None = None


@dataclass(frozen=True)
class CellEnergy:
    """A cell's GPU board energy and what it rests on (see the module docstring)."""

    gpu_energy_j: float | None
    j_per_output_token: float | None
    j_per_output_token_above_idle: float | None
    avg_power_w: float | None
    idle_power_w: float | None
    energy_method: Method | None
    energy_valid: bool
    energy_note: str
    energy_samples: int  # the fewest samples any of the group's GPUs had inside the window
    # What the figures per token and the mean power are over (a report pools cells by
    # summing these, never by averaging their ratios).
    energy_window_s: float = 0.0
    energy_output_tokens: int = 0

    def figures(self) -> dict[str, Any]:
        """The ``cells.parquet`` columns, rounded as stored."""

        def r(v: float | None, nd: int) -> float | None:
            return None if v is None else round(v, nd)

        return {
            "gpu_energy_j": r(self.gpu_energy_j, 3),
            "j_per_output_token": r(self.j_per_output_token, 6),
            "j_per_output_token_above_idle": r(self.j_per_output_token_above_idle, 6),
            "avg_power_w": r(self.avg_power_w, 2),
            "idle_power_w": r(self.idle_power_w, 2),
            "energy_method": self.energy_method,
            "energy_valid": self.energy_valid,
            "energy_note": self.energy_note,
            "energy_samples": self.energy_samples,
            "energy_window_s": round(self.energy_window_s, 4),
            "energy_output_tokens": self.energy_output_tokens,
        }


def merge_spans(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The spans sorted, with overlapping ones joined (concurrent requests share time)."""
    out: list[tuple[float, float]] = []
    for a, b in sorted((a, b) for a, b in spans if b > a):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _by_gpu(samples: Iterable[PowerSample], gpus: Sequence[int]) -> dict[int, list[PowerSample]]:
    wanted = set(gpus)
    out: dict[int, list[PowerSample]] = {g: [] for g in gpus}
    for s in samples:
        if s.gpu in wanted:
            out[s.gpu].append(s)
    for g, ss in out.items():
        ss.sort(key=lambda s: s.t)
        out[g] = [s for i, s in enumerate(ss) if i == 0 or s.t > ss[i - 1].t]
    return out


def _around(ts: list[float], a: float, b: float) -> tuple[int, int] | None:
    """Indices of the last sample at or before ``a`` and the first at or after ``b``."""
    i = bisect.bisect_right(ts, a) - 1
    j = bisect.bisect_left(ts, b)
    if i < 0 or j >= len(ts):
        return None
    return i, j


def _interp(t0: float, v0: float, t1: float, v1: float, x: float) -> float:
    return v0 if t1 <= t0 else v0 + (v1 - v0) * (x - t0) / (t1 - t0)


def _counter_at(ss: Sequence[PowerSample], ts: list[float], x: float) -> float:
    """The counter (mJ) at ``x``, on the straight line between the samples around it."""
    j = min(max(bisect.bisect_left(ts, x), 1), len(ss) - 1)
    a, b = ss[j - 1], ss[j]
    assert a.energy_mj is not None and b.energy_mj is not None
    return _interp(a.t, a.energy_mj, b.t, b.energy_mj, x)


def _edge_step(
    per: dict[int, list[PowerSample]], gpus: Sequence[int], window: Sequence[tuple[float, float]]
) -> float:
    """The widest step between the two energy-counter reads around any edge of the window on
    any GPU: how far the counter is interpolated at the edges (the agent's ``energy_trace``
    reads it every 0.05 s, so a short cell is as exact as a long one)."""
    worst = 0.0
    for g in gpus:
        ts = [s.t for s in per[g] if s.energy_mj is not None]
        for x in (x for span in window for x in span):
            j = bisect.bisect_left(ts, x)
            if 0 < j < len(ts):
                worst = max(worst, ts[j] - ts[j - 1])
            elif not (j < len(ts) and ts[j] == x):
                return math.inf
    return worst


def _power_integral(points: Sequence[tuple[float, float]], a: float, b: float) -> float:
    """Joules: the trapezoidal integral over [a, b] of the power through ``points``."""
    total = 0.0
    for (t0, p0), (t1, p1) in itertools.pairwise(points):
        lo, hi = max(a, t0), min(b, t1)
        if hi <= lo:
            continue
        v0, v1 = _interp(t0, p0, t1, p1, lo), _interp(t0, p0, t1, p1, hi)
        total += (hi - lo) * (v0 + v1) / 2.0
    return total


def idle_power(
    samples: Iterable[PowerSample], start: float, end: float, gpus: Sequence[int]
) -> tuple[float | None, int]:
    """The idle floor (W, the group's GPUs together) from the samples in [start, end]: each
    GPU's mean power there, summed; None unless every GPU has a reading. Also the fewest
    readings any GPU had."""
    per = _by_gpu((s for s in samples if start <= s.t <= end), gpus)
    means, fewest = [], math.inf
    for ss in per.values():
        watts = [s.power_w for s in ss if s.power_w is not None]
        fewest = min(fewest, len(watts))
        if watts:
            means.append(math.fsum(watts) / len(watts))
    n = 0 if fewest is math.inf else int(fewest)
    if not gpus or len(means) < len(gpus):
        return None, n
    return math.fsum(means), n


def _used(
    per: dict[int, list[PowerSample]], gpus: Sequence[int], window: list[tuple[float, float]]
) -> tuple[dict[int, list[PowerSample]], list[str]]:
    """Each GPU's samples from before to after each span of the window, and the GPUs whose
    samples do not reach past both edges of some span."""
    uncovered: list[str] = []
    used: dict[int, list[PowerSample]] = {}
    for g in gpus:
        ss = per[g]
        ts = [s.t for s in ss]
        keep: dict[int, PowerSample] = {}
        for a, b in window:
            edge = _around(ts, a, b)
            if edge is None:
                uncovered.append(str(g))
                break
            for k in range(edge[0], edge[1] + 1):
                keep[k] = ss[k]
        used[g] = [keep[k] for k in sorted(keep)]
    return used, uncovered


def _gap_problem(
    per: dict[int, list[PowerSample]],
    gpus: Sequence[int],
    window: list[tuple[float, float]],
    max_gap_s: float,
) -> list[str]:
    """The widest gap between one GPU's samples inside the window, where over ``max_gap_s``."""
    worst_gap, worst_gpu = 0.0, gpus[0]
    for g in gpus:
        ts = [s.t for s in per[g]]
        for a, b in window:
            edge = _around(ts, a, b)
            assert edge is not None
            for k in range(edge[0], edge[1]):
                if ts[k + 1] - ts[k] > worst_gap:
                    worst_gap, worst_gpu = ts[k + 1] - ts[k], g
    if worst_gap <= max_gap_s:
        return []
    return [
        f"a {worst_gap:.1f} s gap between GPU {worst_gpu}'s samples in the window "
        f"(over {max_gap_s:g} s)"
    ]


def _foreign_problem(
    used: dict[int, list[PowerSample]], gpus: Sequence[int], own_pids: Collection[int] | None
) -> list[str]:
    """Another process than the group's own server on its GPUs during the window."""
    if own_pids is None:
        return []
    own = set(own_pids)
    foreign = sorted({(g, p) for g in gpus for s in used[g] for p in s.pids if p not in own})
    if not foreign:
        return []
    said = ", ".join(f"pid {p} on GPU {g}" for g, p in foreign[:3])
    more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
    return [f"another process on the group's GPUs ({said}{more})"]


def _counter_energy(
    per: dict[int, list[PowerSample]],
    used: dict[int, list[PowerSample]],
    gpus: Sequence[int],
    window: list[tuple[float, float]],
    notes: list[str],
) -> float | None:
    """Joules by the energy counter at the window's edges, where every GPU's counter was read
    throughout and never went back; None (said in ``notes``) where the power integral must
    serve."""
    if not all(s.energy_mj is not None for g in gpus for s in used[g]):
        if any(s.energy_mj is not None for g in gpus for s in used[g]):
            missing = sorted({g for g in gpus for s in used[g] if s.energy_mj is None})
            notes.append(
                f"no energy counter on GPU {', '.join(map(str, missing))} for the whole window: "
                "power integral used"
            )
        return None
    went_back = [
        (g, (a.energy_mj or 0.0) - (b.energy_mj or 0.0))
        for g in gpus
        for a, b in itertools.pairwise(used[g])
        if (b.energy_mj or 0.0) < (a.energy_mj or 0.0)
    ]
    if went_back:
        g, drop = went_back[0]
        notes.append(
            f"GPU {g}'s energy counter went back by {drop / 1000.0:.1f} J (a driver "
            "reload?): power integral used"
        )
        return None
    total_mj = 0.0
    for g in gpus:
        ss = per[g]
        ts = [s.t for s in ss]
        total_mj += math.fsum(_counter_at(ss, ts, b) - _counter_at(ss, ts, a) for a, b in window)
    return total_mj / 1000.0


def _integral_energy(
    per: dict[int, list[PowerSample]],
    gpus: Sequence[int],
    window: list[tuple[float, float]],
    problems: list[str],
) -> float:
    """Joules by the integral of the one-second power samples over the window."""
    total = 0.0
    for g in gpus:
        pts = [(s.t, s.power_w) for s in per[g] if s.power_w is not None]
        if len(pts) < 2:
            problems.append(f"GPU {g} has no power readings")
            continue
        total += math.fsum(_power_integral(pts, a, b) for a, b in window)
    return total


def cell_energy(
    samples: Iterable[PowerSample],
    spans: Iterable[tuple[float, float]],
    gpus: Sequence[int],
    output_tokens: int,
    *,
    idle_power_w: float | None = None,
    own_pids: Collection[int] | None = None,
    max_gap_s: float = MAX_GAP_S,
    min_samples: int = MIN_SAMPLES,
) -> CellEnergy:
    """A cell's GPU board energy over ``spans`` (its measured window, on the samples' clock)
    on ``gpus``, and the figures per output token (see the module docstring).

    ``own_pids``: the processes of the group's own server (None: not known, not checked);
    ``idle_power_w``: the group's idle floor (None: no figure above idle)."""
    window = merge_spans(spans)
    per = _by_gpu(samples, gpus)
    notes: list[str] = []
    if not gpus or not window:
        why = "no GPUs" if not gpus else "no measured window"
        return CellEnergy(None, None, None, None, idle_power_w, None, False, why, 0)
    window_s = math.fsum(b - a for a, b in window)
    fewest = min(
        sum(1 for s in per[g] if s.power_w is not None and any(a <= s.t <= b for a, b in window))
        for g in gpus
    )
    used, uncovered = _used(per, gpus, window)
    if uncovered:
        why = (
            f"the samples of GPU {', '.join(uncovered)} do not reach past both edges of the window"
        )
        return CellEnergy(None, None, None, None, idle_power_w, None, False, why, fewest)
    problems = _gap_problem(per, gpus, window, max_gap_s) + _foreign_problem(used, gpus, own_pids)
    energy = _counter_energy(per, used, gpus, window, notes)
    method: Method = "nvml_counter"
    if energy is None:
        method, energy = "power_integral", _integral_energy(per, gpus, window, problems)
    edges = _edge_step(per, gpus, window) if method == "nvml_counter" else math.inf
    if fewest < min_samples and edges > EDGE_STEP_S:
        problems.append(
            f"low confidence: {fewest} sample{'s' * (fewest != 1)} per GPU in the window "
            f"(fewer than {min_samples}) and no energy-counter read within {EDGE_STEP_S:g} s "
            "of each edge"
        )
    if idle_power_w is None:
        notes.append("no idle floor (no samples between ready and the first cell)")
    per_token = energy / output_tokens if output_tokens > 0 else None
    above = (
        (energy - idle_power_w * window_s) / output_tokens
        if output_tokens > 0 and idle_power_w is not None
        else None
    )
    if above is not None and above < 0:  # the floor drew more than the cell did: not a floor
        above = None
        notes.append(
            f"idle floor unreliable: {idle_power_w:.0f} W idle against "
            f"{energy / window_s:.0f} W over the window; no figure above idle"
        )
    return CellEnergy(
        gpu_energy_j=energy,
        j_per_output_token=per_token,
        j_per_output_token_above_idle=above,
        avg_power_w=energy / window_s if window_s > 0 else None,
        idle_power_w=idle_power_w,
        energy_method=method,
        energy_valid=not problems,
        energy_note="; ".join(problems + notes),
        energy_samples=fewest,
        energy_window_s=window_s,
        energy_output_tokens=output_tokens,
    )

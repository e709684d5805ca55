"""How far the dry-run estimate (plan/estimate.py) was off: the estimate the campaign recorded
when it started (``estimate_recorded`` in its log), set against the time the cells and groups
actually took; and the ``[estimate]`` table these results suggest, so that a results
directory seeds the next plan's estimate."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import polars as pl

from specbench_tui.report.frames import baseline, requests
from specbench_tui.report.inputs import Inputs
from specbench_tui.report.sections.common import compared


@dataclass
class KindError:
    kind: str
    cells: int
    estimated_s: float
    actual_s: float

    @property
    def ratio(self) -> float | None:
        return self.actual_s / self.estimated_s if self.estimated_s > 0 else None


@dataclass
class EstimateCheck:
    planned_s: float  # the whole plan's estimate
    wall_s: float | None  # the runs' wall time (campaign_finished), None while running
    done_estimated_s: float  # estimate of what was done: finished cells and started servers
    done_actual_s: float
    startup_estimated_s: float
    startup_actual_s: float | None  # mean server start-up
    kinds: list[KindError] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        """Actual over estimated, for what was done (1.0: spot on; 2.0: took twice as long)."""
        return self.done_actual_s / self.done_estimated_s if self.done_estimated_s > 0 else None


def check_estimate(inp: Inputs) -> EstimateCheck | None:
    """None (with a note) when the campaign recorded no estimate, or nothing is done yet."""
    st = inp.state
    est = st.estimate
    groups = [g.group for g in st.groups.values() if g.group is not None]
    if not groups or not st.cells:
        return None
    if est is None:
        inp.notes.append(
            "the dry-run estimate cannot be checked: this campaign's log does not record it"
        )
        return None
    done = [c for c in st.cells.values() if c.status == "done" and c.duration_s is not None]
    started = [g for g in st.groups.values() if g.startup_s is not None]
    if not done:
        return None
    per_kind: dict[str, KindError] = {}
    for c in done:
        k = per_kind.setdefault(c.kind, KindError(c.kind, 0, 0.0, 0.0))
        k.cells += 1
        k.estimated_s += est.per_cell_s.get(c.id, 0.0)
        k.actual_s += c.duration_s or 0.0
    startup_each = est.startup_s / len(groups)
    startups = [g.startup_s for g in started if g.startup_s is not None]
    done_est = sum(k.estimated_s for k in per_kind.values()) + startup_each * len(started)
    done_act = sum(k.actual_s for k in per_kind.values()) + sum(startups)
    return EstimateCheck(
        planned_s=est.total_s,
        wall_s=st.wall_s if st.finished and st.wall_s else None,
        done_estimated_s=done_est,
        done_actual_s=done_act,
        startup_estimated_s=startup_each,
        startup_actual_s=sum(startups) / len(startups) if startups else None,
        kinds=sorted(per_kind.values(), key=lambda k: k.kind),
    )


def seed_estimate(inp: Inputs) -> dict[str, str]:
    """An ``[estimate]`` table measured from this campaign, to seed the next plan's dry run:
    the baseline's decode tok/s per TP, the speculative configs' speed-up (geometric mean),
    the share of max_tokens generated and the mean server start-up, in real time (a simulated
    host's speed-up taken out). Keys without data are left out."""
    st = inp.state
    speeds = st.estimate.host_speeds if st.estimate is not None else {}
    # Rows with no decode window measured give nothing to seed from.
    cmp = compared(inp).filter((pl.col("kind") == "single") & ~pl.col("untimed"))
    base = baseline(inp)
    out: dict[str, str] = {}
    if cmp.height and base:
        rates: dict[int, list[float]] = {}
        ups: list[float] = []
        for r in cmp.to_dicts():
            speed = speeds.get(r["host"], 1.0)
            if r["config"] == base:
                rates.setdefault(r["tp"], []).append(r["decode_tok_s"] / speed)
            elif r["speedup"] and not (r["failed_check"] or r["why"]):
                ups.append(r["speedup"])
        if rates:
            out["tok_s"] = (
                "{ "
                + ", ".join(f"{tp} = {sum(v) / len(v):.1f}" for tp, v in sorted(rates.items()))
                + " }"
            )
        if ups:
            out["spec_speedup"] = f"{math.exp(sum(math.log(u) for u in ups) / len(ups)):.2f}"
    single = requests(inp).filter(pl.col("kind") == "single").select("output_tokens", "max_tokens")
    if single.height:
        frac = single.select(
            (pl.col("output_tokens").cast(pl.Float64) / pl.col("max_tokens")).mean()
        ).item()
        if frac:
            out["output_fraction"] = f"{min(max(frac, 0.01), 1.0):.2f}"
    starts = [
        g.startup_s * speeds.get(g.host, 1.0) for g in st.groups.values() if g.startup_s is not None
    ]
    if starts:
        out["startup"] = f'"{sum(starts) / len(starts):.0f}s"'
    return out

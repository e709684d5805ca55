"""Wall-time estimate for a plan, with the assumptions shown so a user can judge and override
them (``[estimate]`` in the plan). Deliberately simple: decode rate per TP size, a speed-up for
speculative configs, a share of max_tokens actually generated, prefill rate, server start-ups."""

from __future__ import annotations

from dataclasses import dataclass

from specbench_tui.hosts.backends import batch_kind
from specbench_tui.plan.capacity import search
from specbench_tui.plan.model import EstimateSpec, PlanSpec
from specbench_tui.plan.packing import Schedule, simulate
from specbench_tui.plan.probes import (
    LEAK_RUNS,
    floor_probe_size,
    group_probes,
    runs_floor_probe,
    runs_leak_probe,
)
from specbench_tui.plan.prompt_sets import PromptLibrary
from specbench_tui.results.cells import Cell, ServiceGroup, planned_requests
from specbench_tui.results.events import EstimateRecorded

PROMPT_TOKENS = 400  # typical prompt length for prefill time; agentic context grows on top


@dataclass(frozen=True)
class Estimate:
    total_s: float  # wall time as the plan runs: hosts side by side, packed if it packs
    unpacked_s: float  # the same hosts side by side, one group at a time on each
    schedule: Schedule  # when and where each group is predicted to run
    startup_s: float
    requests: int
    per_group_s: dict[str, float]
    per_cell_s: dict[str, float]
    per_cell_requests: dict[str, int]  # measured requests (warm-up left out)
    assumptions: list[str]


def host_speeds(spec: PlanSpec, *, sim: bool) -> dict[str, float]:
    """How much faster than real time each host runs: a sim host, or a real host rehearsed
    with ``--sim``, at its simulator speed (HostSpec.sim_speed); a real host at 1."""
    return {h: (s.sim_speed if s.sim or sim else 1.0) for h, s in spec.hosts.items()}


def _rate(est: EstimateSpec, tp: int) -> float:
    table = {int(k): v for k, v in est.tok_s.items()}
    if tp in table:
        return table[tp]
    # Between known sizes: the nearest smaller one (conservative).
    smaller = [k for k in table if k <= tp]
    return table[max(smaller)] if smaller else table[min(table)]


def _batch_s(
    est: EstimateSpec,
    rate: float,
    tp: int,
    requests: int,
    level: int,
    max_tokens: int,
    prompt_tokens: int = PROMPT_TOKENS,
) -> float:
    """``requests`` requests sent ``level`` at a time: each decodes its share of
    ``max_tokens`` and prefills its prompt; throughput grows as level^batch_scaling."""
    decode = max_tokens * est.output_fraction / rate
    prefill = prompt_tokens / (est.prefill_tok_s * tp**0.5)
    return requests * (decode + prefill + est.request_overhead) / (level**est.batch_scaling)


def _probes_s(spec: PlanSpec, g: ServiceGroup) -> float:
    """The checks' probes at the end of group ``g``, in real seconds."""
    est = spec.estimate
    rate = _rate(est, g.tp) * (est.spec_speedup if g.speculative else 1.0)
    return sum(
        _batch_s(
            est,
            rate,
            g.tp,
            run.requests,
            run.concurrency,
            run.max_tokens,
            run.prompt_tokens or PROMPT_TOKENS,
        )
        for run in group_probes(spec, g)
    )


def _probes_said(spec: PlanSpec, groups: list[ServiceGroup]) -> str | None:
    """The estimate's line about the probes, or None when no group runs one."""
    parts = []
    floor = [g for g in groups if runs_floor_probe(spec, g)]
    if floor:
        prompts, batch, max_tokens = floor_probe_size(spec)
        parts.append(
            f"the noise-floor probe on {len(floor)} baseline group{'s' * (len(floor) != 1)} "
            f"({2 * prompts} requests alone and {batch} batched, up to {max_tokens} tokens)"
        )
    leak = [g for g in groups if runs_leak_probe(spec, g)]
    if leak:
        n = sum(run.requests for run in LEAK_RUNS)
        every = "every group" if len(leak) == len(groups) else "every group of the first run"
        parts.append(f"the state-leak probe on {every} ({n} requests)")
    return "checks' probes at the end of groups: " + "; ".join(parts) if parts else None


def capacity_points(cell: Cell) -> list[int]:
    """The levels a capacity search is assumed to try: the search played against a capacity
    at the middle of its bracket (the real one tries as many or fewer, by its results)."""
    lo, hi = min(cell.levels), max(cell.levels)
    middle = (lo + hi) / 2
    return list(search(cell.levels, cell.max_points, lambda lv: lv <= middle).tried)


def cell_requests(cell: Cell, prompts: PromptLibrary) -> tuple[int, int]:
    """(measured, warm-up) requests of a cell, counting the prompt set on disk if needed."""
    if cell.kind == "concurrency":  # warm-up rounds of the level's size
        return planned_requests(cell), cell.warmup * (cell.concurrency or 1)
    if cell.kind != "single":
        return planned_requests(cell), 0
    n = prompts.count(cell.prompt_set or "")
    measured = planned_requests(cell, n)
    return measured, measured // cell.repeats * cell.warmup


def estimate(
    spec: PlanSpec,
    prompts: PromptLibrary,
    groups: list[ServiceGroup],
    cells: list[Cell],
    *,
    speed: dict[str, float] | None = None,
) -> Estimate:
    """``speed``: per host, how much faster than real time it runs (simulated hosts)."""
    est = spec.estimate
    frac = est.output_fraction
    by_group = {g.id: g for g in groups}
    per_cell: dict[str, float] = {}
    per_cell_requests: dict[str, int] = {}
    requests = 0
    for c in cells:
        g = by_group[c.group]
        rate = _rate(est, c.tp) * (est.spec_speedup if g.speculative else 1.0)
        measured, warm = cell_requests(c, prompts)
        requests += measured
        per_cell_requests[c.id] = measured
        n = measured + warm
        if c.kind == "agentic":
            decode = c.max_tokens * frac / rate
            prefill = PROMPT_TOKENS / (est.prefill_tok_s * c.tp**0.5)
            ctx = sum(t * (c.tool_output_tokens + c.max_tokens * frac) for t in range(c.turns))
            prefill_total = c.sessions * (c.turns * prefill + ctx / est.prefill_tok_s)
            t = n * (decode + est.request_overhead) + prefill_total
        elif c.kind == "capacity":
            points = capacity_points(c)
            measured = len(points) * c.requests
            requests += measured - per_cell_requests[c.id]
            per_cell_requests[c.id] = measured
            t = sum(
                _batch_s(est, rate, c.tp, c.requests + c.warmup * lv, lv, c.max_tokens)
                for lv in points
            )
        else:
            level = (c.concurrency or 1) if c.kind == "concurrency" else 1
            t = _batch_s(est, rate, c.tp, n, level, c.max_tokens)
        per_cell[c.id] = t / (speed or {}).get(c.host, 1.0)
    started = [g for g in groups if g.url is None]  # a running server (url) is not started
    per_group = {
        g.id: (est.startup * (g.url is None) + _probes_s(spec, g)) / (speed or {}).get(g.host, 1.0)
        for g in groups
    }
    for c in cells:
        per_group[c.group] += per_cell[c.id]
    startup = sum(est.startup / (speed or {}).get(g.host, 1.0) for g in started)
    rates = ", ".join(
        f"TP{k} {v:g}" for k, v in sorted(est.tok_s.items(), key=lambda kv: int(kv[0]))
    )
    assumptions = [
        f"server start-up {est.startup:g} s per group",
        f"autoregressive decode tok/s per request: {rates}",
        f"speculative configs x{est.spec_speedup:g}",
        f"outputs use {est.output_fraction:.0%} of max_tokens on average",
        f"prefill {est.prefill_tok_s:g} tok/s; concurrency throughput grows as level^"
        f"{est.batch_scaling:g}",
    ]
    if speed and any(v != 1.0 for v in speed.values()):
        assumptions.append(
            "simulated hosts run faster than real time: "
            + ", ".join(f"{h} x{v:g}" for h, v in speed.items())
        )
    probes = _probes_said(spec, groups)
    if probes:
        assumptions.append(probes)
    assumptions.append("override any of these in the plan's [estimate] table")
    host_gpus = {
        name: h.gpu_ids if h.gpu_ids is not None else list(range(h.gpus))
        for name, h in spec.hosts.items()
    }
    jobs: dict[str, int] = {}
    said: set[str] = set()
    for g in groups:
        if (bk := batch_kind(g.host_kind)) is not None:
            jobs[g.host] = bk.max_jobs(spec.hosts[g.host])
            said.add(bk.assumption)
    for line in sorted(said):
        assumptions.insert(-1, line)
    schedule = simulate(groups, per_group, host_gpus, pack=spec.campaign.pack, jobs=jobs)
    unpacked = (
        simulate(groups, per_group, host_gpus, pack=False, jobs=jobs)
        if spec.campaign.pack
        else schedule
    )
    return Estimate(
        total_s=schedule.wall_s,
        unpacked_s=unpacked.wall_s,
        schedule=schedule,
        startup_s=startup,
        requests=requests,
        per_group_s=per_group,
        per_cell_s=per_cell,
        per_cell_requests=per_cell_requests,
        assumptions=assumptions,
    )


def recorded_estimate(
    spec: PlanSpec,
    prompts: PromptLibrary,
    groups: list[ServiceGroup],
    cells: list[Cell],
    *,
    sim: bool,
) -> EstimateRecorded:
    """The estimate a run records when it starts (its hosts at their simulator speeds), for
    the report to hold against what the cells took. Raises KeyError or ValueError as
    :func:`estimate` does."""
    speeds = host_speeds(spec, sim=sim)
    est = estimate(spec, prompts, groups, cells, speed=speeds)
    return EstimateRecorded(
        total_s=round(est.total_s, 3),
        startup_s=round(est.startup_s, 3),
        per_cell_s={k: round(v, 3) for k, v in est.per_cell_s.items()},
        host_speeds=speeds,
    )

"""Wall-time estimate for a plan, with the assumptions shown so a user can judge and override
them (``[estimate]`` in the plan). Deliberately simple: decode rate per TP size, a speed-up for
speculative configs, a share of max_tokens actually generated, prefill rate, server start-ups."""

from __future__ import annotations

from dataclasses import dataclass, field

from specbench_tui.hosts.backends import batch_kind, simulated
from specbench_tui.plan.capacity import search
from specbench_tui.plan.measured import Learned, Measured
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
    # For the ETA (results/eta.py): each group's start-up and tail, its start in the schedule,
    # the time after the last group, the measured constants' scatter and where they came
    # from ("" and 0: assumed).
    group_startup_s: dict[str, float] = field(default_factory=dict)
    group_tail_s: dict[str, float] = field(default_factory=dict)
    group_at_s: dict[str, float] = field(default_factory=dict)
    end_s: float = 0.0
    spread: float = 0.0
    measured_from: str = ""


def host_speeds(spec: PlanSpec, *, sim: bool) -> dict[str, float]:
    """How much faster than real time each host runs: a sim host, or a real host rehearsed
    with ``--sim``, at its simulator speed (HostSpec.sim_speed); a real host at 1."""
    return {h: (s.sim_speed if simulated(s.kind) or sim else 1.0) for h, s in spec.hosts.items()}


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


def cell_model_s(est: EstimateSpec, c: Cell, speculative: bool, prompts: PromptLibrary) -> float:
    """Real seconds the model gives a cell with the plan's constants (no host speed, nothing
    measured)."""
    return _cell_model(est, c, speculative, prompts)[0]


def _cell_model(
    est: EstimateSpec, c: Cell, speculative: bool, prompts: PromptLibrary
) -> tuple[float, int]:
    """(real seconds, measured requests) of a cell by the model."""
    frac = est.output_fraction
    rate = _rate(est, c.tp) * (est.spec_speedup if speculative else 1.0)
    measured, warm = cell_requests(c, prompts)
    n = measured + warm
    if c.kind == "agentic":
        decode = c.max_tokens * frac / rate
        prefill = PROMPT_TOKENS / (est.prefill_tok_s * c.tp**0.5)
        ctx = sum(t * (c.tool_output_tokens + c.max_tokens * frac) for t in range(c.turns))
        prefill_total = c.sessions * (c.turns * prefill + ctx / est.prefill_tok_s)
        return n * (decode + est.request_overhead) + prefill_total, measured
    if c.kind == "capacity":
        points = capacity_points(c)
        t = sum(
            _batch_s(est, rate, c.tp, c.requests + c.warmup * lv, lv, c.max_tokens) for lv in points
        )
        return t, len(points) * c.requests
    level = (c.concurrency or 1) if c.kind == "concurrency" else 1
    return _batch_s(est, rate, c.tp, n, level, c.max_tokens), measured


def _source(est: EstimateSpec, key: str) -> str:
    return "assumed (the plan's [estimate])" if key in est.model_fields_set else "assumed (default)"


def _group_times(
    spec: PlanSpec, g: ServiceGroup, learned: Learned | None
) -> tuple[float, float, bool]:
    """(start-up, tail, fails) of a group in real seconds: measured where ``learned`` has
    them, else the plan's start-up and the model's probes."""
    # A running server (url) is not started, nor is one an interference check rides on.
    started = g.url is None and g.rides is None
    if learned is None:
        return spec.estimate.startup * started, _probes_s(spec, g), False
    fails = learned.fails_s(g)
    if fails is not None:
        return fails, 0.0, True
    up = learned.startup_s(g)
    tail = learned.tail_s(g)
    return (
        (spec.estimate.startup if up is None else up) * started,
        _probes_s(spec, g) if tail is None else tail,
        False,
    )


def estimate(
    spec: PlanSpec,
    prompts: PromptLibrary,
    groups: list[ServiceGroup],
    cells: list[Cell],
    *,
    speed: dict[str, float] | None = None,
    measured: Measured | None = None,
) -> Estimate:
    """``speed``: per host, how much faster than real time it runs (simulated hosts);
    ``measured``: an earlier run's times (plan/measured.py), the constants they replace."""
    est = spec.estimate
    speed = speed or {}
    by_group = {g.id: g for g in groups}
    learned = (
        measured.learn(lambda c, sp: cell_model_s(est, c, sp, prompts))
        if measured is not None
        else None
    )
    times = {g.id: _group_times(spec, g, learned) for g in groups}
    per_cell: dict[str, float] = {}
    per_cell_requests: dict[str, int] = {}
    borrowed = 0
    for c in cells:
        g = by_group[c.group]
        t, per_cell_requests[c.id] = _cell_model(est, c, g.speculative, prompts)
        if learned is not None:
            factor, own = learned.cell_factor(c)
            fails = times[g.id][2]  # its server is counted as failing to start again
            borrowed += not (own or fails)
            t = 0.0 if fails else t * factor
        per_cell[c.id] = t / speed.get(c.host, 1.0)
    startups = {g.id: times[g.id][0] / speed.get(g.host, 1.0) for g in groups}
    tails = {g.id: times[g.id][1] / speed.get(g.host, 1.0) for g in groups}
    per_group = {g.id: startups[g.id] + tails[g.id] for g in groups}
    for c in cells:
        per_group[c.group] += per_cell[c.id]
    assumptions = _assumptions(spec, groups, speed, learned, borrowed)
    host_gpus = {
        name: h.gpu_ids if h.gpu_ids is not None else list(range(h.gpus))
        for name, h in spec.hosts.items()
    }
    jobs: dict[str, int] = {}
    for g in groups:
        if (bk := batch_kind(g.host_kind)) is not None:
            jobs[g.host] = bk.max_jobs(spec.hosts[g.host])
    # A group riding on another's server (an interference check) runs inside that group's
    # time, after its cells: scheduled as part of it.
    served = [g for g in groups if g.rides is None]
    held = dict(per_group)
    for g in groups:
        if g.rides is not None and g.rides in held:
            held[g.rides] += per_group[g.id]
    schedule = simulate(served, held, host_gpus, pack=spec.campaign.pack, jobs=jobs)
    unpacked = (
        simulate(served, held, host_gpus, pack=False, jobs=jobs) if spec.campaign.pack else schedule
    )
    group_at = {slot.group: slot.start_s for slot in schedule.slots}
    for g in groups:
        if g.rides is not None and g.rides in group_at:
            group_at[g.id] = group_at[g.rides] + held[g.rides] - per_group[g.id]
    end = learned.end_s / max(speed.values(), default=1.0) if learned is not None else 0.0
    return Estimate(
        total_s=schedule.wall_s + end,
        unpacked_s=unpacked.wall_s + end,
        schedule=schedule,
        startup_s=sum(startups.values()),
        requests=sum(per_cell_requests.values()),
        per_group_s=per_group,
        per_cell_s=per_cell,
        per_cell_requests=per_cell_requests,
        assumptions=assumptions,
        group_startup_s=startups,
        group_tail_s=tails,
        group_at_s=group_at,
        end_s=end,
        spread=learned.spread if learned is not None else 0.0,
        measured_from=str(learned.source) if learned is not None else "",
    )


def _assumptions(
    spec: PlanSpec,
    groups: list[ServiceGroup],
    speed: dict[str, float],
    learned: Learned | None,
    borrowed: int,
) -> list[str]:
    """The estimate's constants in words, each measured (from where, on how many cells or
    groups) or assumed (the plan's ``[estimate]`` or the default)."""
    est = spec.estimate
    rates = ", ".join(
        f"TP{k} {v:g}" for k, v in sorted(est.tok_s.items(), key=lambda kv: int(kv[0]))
    )
    out: list[str] = []
    if learned is not None:
        where = f"measured (from {learned.source}"
        n = learned.startups.count
        out.append(
            f"server start-up per host, config and TP: {where}, {n} group{'s' * (n != 1)})"
            + (f"; elsewhere {est.startup:g} s, {_source(est, 'startup')}" if n == 0 else "")
        )
        lo, hi = learned.ratios.range()
        out.append(
            f"cell times per config, TP and workload: {where}, {learned.cells} cells): the "
            f"model below times x{lo:.2g} to x{hi:.2g} (its measured/modelled ratios, "
            f"scatter {learned.spread:.0%})"
            + (f"; {borrowed} cells have no like cell there and borrow it" if borrowed else "")
        )
        if learned.tails.count:
            out.append(
                f"group time besides start-up and cells (probes, stop): {where}, "
                f"{learned.tails.count} groups)"
            )
        failing = [g.id for g in groups if learned.fails_s(g) is not None]
        if failing:
            out.append(
                f"failing to start again, as they did there with the same command: "
                f"{', '.join(failing)}"
            )
    else:
        out.append(f"server start-up {est.startup:g} s per group: {_source(est, 'startup')}")
    out += [
        f"autoregressive decode tok/s per request: {rates}: {_source(est, 'tok_s')}",
        f"speculative configs x{est.spec_speedup:g}: {_source(est, 'spec_speedup')}",
        f"outputs use {est.output_fraction:.0%} of max_tokens on average: "
        + _source(est, "output_fraction"),
        f"prefill {est.prefill_tok_s:g} tok/s: {_source(est, 'prefill_tok_s')}",
        f"concurrency throughput grows as level^{est.batch_scaling:g}: "
        + _source(est, "batch_scaling"),
        f"{est.request_overhead:g} s per request: {_source(est, 'request_overhead')}",
    ]
    if speed and any(v != 1.0 for v in speed.values()):
        out.append(
            "simulated hosts run faster than real time: "
            + ", ".join(f"{h} x{v:g}" for h, v in speed.items())
        )
    probes = _probes_said(spec, groups)
    if probes and (learned is None or not learned.tails.count):
        out.append(probes)
    said = {bk.assumption for g in groups if (bk := batch_kind(g.host_kind)) is not None}
    out.extend(sorted(said))
    return out


def recorded_estimate(
    spec: PlanSpec,
    prompts: PromptLibrary,
    groups: list[ServiceGroup],
    cells: list[Cell],
    *,
    sim: bool,
    measured: Measured | None = None,
) -> EstimateRecorded:
    """The estimate a run records when it starts (its hosts at their simulator speeds), for
    the report to hold against what the cells took and for the ETA. Raises KeyError or
    ValueError as :func:`estimate` does."""
    speeds = host_speeds(spec, sim=sim)
    est = estimate(spec, prompts, groups, cells, speed=speeds, measured=measured)

    def rounded(d: dict[str, float]) -> dict[str, float]:
        return {k: round(v, 3) for k, v in d.items()}

    return EstimateRecorded(
        total_s=round(est.total_s, 3),
        startup_s=round(est.startup_s, 3),
        per_cell_s=rounded(est.per_cell_s),
        host_speeds=speeds,
        group_startup_s=rounded(est.group_startup_s),
        group_tail_s=rounded(est.group_tail_s),
        group_at_s=rounded(est.group_at_s),
        end_s=round(est.end_s, 3),
        spread=round(est.spread, 4),
        measured_from=est.measured_from,
    )

"""Plan review (``--dry-run``): the expanded tree, counts and the estimate, as text or JSON.

Touches no host: everything here comes from the plan file and the prompt sets on disk.
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Any

from specbench_tui.durations import format_duration
from specbench_tui.engines.registry import adapter
from specbench_tui.hosts.backends import REHEARSAL, backend, batch_kind, simulated
from specbench_tui.hosts.batch_kind import JobPreview
from specbench_tui.plan.document import Plan
from specbench_tui.plan.estimate import Estimate, estimate, host_speeds
from specbench_tui.plan.expand import Expansion, expand
from specbench_tui.plan.lint import acceptance_warnings
from specbench_tui.plan.measured import Measured
from specbench_tui.plan.packing import Schedule
from specbench_tui.plan.prompt_review import (
    Shown,
    first_prompts,
    prompt_json,
    prompt_lines,
    set_infos,
    set_json,
    set_lines,
)
from specbench_tui.plan.prompt_sets import SetInfo
from specbench_tui.results.cells import Cell, ServiceGroup


@dataclass(frozen=True)
class Review:
    plan: Plan
    expansion: Expansion
    estimate: Estimate
    results_dir: Path
    sim: bool
    # ``--only``: the ids of the cells a run would take, and what was asked (None: all)
    selected: frozenset[str] | None = None
    only: str = ""
    prompts: tuple[Shown, ...] = ()  # each set's first prompt, rendered where it can be
    sets: tuple[SetInfo, ...] = ()  # each set named: source, licence, count per category
    # What makes a config's acceptance other than the real, lossless one (plan/lint.py).
    warnings: tuple[str, ...] = ()

    def is_selected(self, cell_id: str) -> bool:
        return self.selected is None or cell_id in self.selected

    @property
    def selected_s(self) -> float:
        """The estimate for the selected cells: theirs, and a start-up per group they need."""
        if self.selected is None:
            return self.estimate.total_s
        per_cell = self.estimate.per_cell_s
        cells = [c for c in self.expansion.cells if c.id in self.selected]
        groups = {c.group for c in cells}
        in_cells: dict[str, float] = {}  # one pass: a sum per group over every cell is O(n^2)
        for c in self.expansion.cells:
            in_cells[c.group] = in_cells.get(c.group, 0.0) + per_cell[c.id]
        startup = {g: self.estimate.per_group_s[g] - in_cells.get(g, 0.0) for g in groups}
        return sum(per_cell[c.id] for c in cells) + sum(startup.values())


def review(
    plan: Plan,
    results_dir: Path,
    *,
    sim: bool = False,
    select: Callable[[Cell], bool] | None = None,
    only: str = "",
    measured: Measured | None = None,
) -> Review:
    """``select`` (``--only``): which cells a run would take; the tree marks them.
    ``measured``: an earlier run's times, the estimate's constants (plan/measured.py)."""
    exp = expand(plan, sim=sim)
    speed = host_speeds(plan.spec, sim=sim)
    est = estimate(plan.spec, plan.prompts, exp.groups, exp.cells, speed=speed, measured=measured)
    selected = frozenset(c.id for c in exp.cells if select(c)) if select is not None else None
    return Review(
        plan=plan,
        expansion=exp,
        estimate=est,
        results_dir=results_dir,
        sim=sim,
        selected=selected,
        only=only,
        prompts=tuple(first_prompts(plan, exp.groups, exp.cells)),
        sets=tuple(set_infos(plan)),
        warnings=tuple(acceptance_warnings(exp.groups)),
    )


def _slice(cell_name: str, group: str) -> str:
    return cell_name[len(group) + 1 :]


def render_text(r: Review) -> str:
    spec, exp, est = r.plan.spec, r.expansion, r.estimate
    out: list[str] = []
    c = spec.campaign
    out.append(f"Campaign {c.name}" + (f": {c.title}" if c.title else ""))
    out.append(
        f"  plan {r.plan.path} (sha256 {r.plan.hash}), results {r.results_dir}/"
        + ("  [rehearsal on the simulated host]" if r.sim else "")
    )
    if c.baseline:
        out.append(f"  baseline {c.baseline}; seed {c.seed}")
    cells_by_group = {g: list(cs) for g, cs in groupby(exp.cells, key=lambda x: x.group)}
    for host_name, host_groups in groupby(exp.groups, key=lambda g: g.host):
        host = spec.hosts[host_name]
        host_groups = list(host_groups)
        if r.sim and not host.sim:  # a rehearsal of a real host
            where = f"simulated, {host.gpus} GPUs"
        else:
            where = backend(host.kind).describe(host, c.name)
        out.append("")
        out.append(f"host {host_name} ({where})")
        if host.stop_before and not r.sim:
            out.append(
                f"  foreign services stopped when a group needs their GPUs: "
                f"{', '.join(host.stop_before)}"
                + ("; started again at the end" if host.restore_after else "")
            )
        for gi, g in enumerate(host_groups):
            last_g = gi == len(host_groups) - 1
            bar = "   " if last_g else "│  "
            out.append(
                f"{'└─' if last_g else '├─'} {g.id}  {g.label}  TP{g.tp}  GPUs "
                f"{','.join(map(str, g.gpu_ids)) or _no_gpus(g)}  port {g.port}  "
                f"~{format_duration(est.per_group_s[g.id])}"
            )
            served = f", served as {g.served_model_name!r}" if g.served_model_name else ""
            speculation = (
                f"speculative ({g.spec_algorithm or 'unnamed algorithm'})"
                if g.speculative
                else "no speculation"
            ) + (f", forced accept length {g.forced_accept:g}" if g.forced_accept else "")
            eng = adapter(g.engine)
            engine = ("simulated " if simulated(g.host_kind) else "") + eng.label
            api = eng.api_label(g.api, server_renders=g.chat_template_on == "server")
            if g.rides is not None:  # not started: it runs on another group's server
                out.append(
                    f"{bar}   {engine}, {api}, {speculation}{served}: on {g.rides}'s server, "
                    "after its cells, while no other group of the host measures"
                )
            elif g.url is not None:  # not started: what it runs is read from it
                out.append(
                    f"{bar}   running server at {g.url}: measured as it is, never "
                    "started or stopped; its engine, model and speculation are read "
                    f"from it (--dry-run --check asks it now); {api}{served}"
                )
            else:
                out.append(f"{bar}   {engine}, {api}, {speculation}{served}")
                out.append(f"{bar}   $ {shlex.join(g.command)}")
            env = " ".join(f"{k}={v}" for k, v in g.env)
            job = _job(r, g)
            if job is not None:
                env = f"{env} CUDA_VISIBLE_DEVICES=(the job's GPUs)".strip()
            if g.url is None and g.rides is None:
                out.append(f"{bar}   env {env}")
            if job is not None:
                out.append(f"{bar}   batch job (submission 1): $ {shlex.join(job.argv)}")
                out.extend(f"{bar}     | {line}" for line in job.script.splitlines())
                out.extend(f"{bar}   warning: {w}" for w in job.warnings)
            gcells = cells_by_group.get(g.id, [])
            for wname, wcells in groupby(gcells, key=lambda x: x.workload):
                wcells = list(wcells)
                n_req = sum(est.per_cell_requests[x.id] for x in wcells)
                out.append(
                    f"{bar}   {wname} ({wcells[0].kind}, {len(wcells)} cell"
                    f"{'s' if len(wcells) != 1 else ''}, {n_req} requests)"
                )
                for x in wcells:
                    n = est.per_cell_requests[x.id]
                    mark = "" if r.selected is None else ("* " if r.is_selected(x.id) else "  ")
                    out.append(
                        f"{bar}   {mark}  {x.id}  {_slice(x.name, g.id) or wname:<24} "
                        f"{n:>4} req  ~{format_duration(est.per_cell_s[x.id])}"
                    )
    kinds = Counter(x.kind for x in exp.cells)
    out.append("")
    out.append(
        f"{len(exp.groups)} service groups, {len(exp.cells)} cells ("
        + ", ".join(f"{n} {k}" for k, n in kinds.items())
        + f"), {est.requests} requests, "
        + _starts(exp.groups)
        + (
            f" ({spec.campaign.runs} runs: every group {spec.campaign.runs} times, a fresh "
            "server each)"
            if spec.campaign.runs > 1
            else ""
        )
    )
    out.append(
        f"estimated wall time {format_duration(est.total_s)} "
        f"(server start-ups {format_duration(est.startup_s)})"
    )
    side_by_side = len({g.host for g in exp.groups}) > 1  # every host runs at the same time
    batch = any(batch_kind(g.host_kind) for g in exp.groups)
    if (side_by_side or batch) and not spec.campaign.pack:
        out.extend(_schedule_text(est.schedule))
    if spec.campaign.pack:
        ratio = est.total_s / est.unpacked_s if est.unpacked_s else 1.0
        out.append(
            f"  packed: groups side by side on free GPUs; unpacked it would take "
            f"{format_duration(est.unpacked_s)} ({ratio:.0%} of that)"
        )
        out.extend(_schedule_text(est.schedule))
    out.append("  constants (override any in the plan's [estimate] table):")
    out.extend(f"    {line}" for line in est.assumptions)
    if r.warnings:
        out.append("")
        out.extend(f"warning: {w}" for w in r.warnings)
    out.extend(set_lines(list(r.sets)))
    out.extend(prompt_lines(list(r.prompts)))
    if r.selected is not None:
        picked = [x for x in exp.cells if x.id in r.selected]
        groups = {x.group for x in picked}
        out.append("")
        out.append(
            f"--only {r.only!r} selects {len(picked)} of {len(exp.cells)} cells (marked *) in "
            f"{len(groups)} service group{'s' * (len(groups) != 1)}: estimated "
            f"{format_duration(r.selected_s)}; a run also skips cells its results already "
            "finished"
        )
    return "\n".join(out)


def _job(r: Review, g: ServiceGroup) -> JobPreview | None:
    """The first submission of a group's batch job; None for a group on a machine host."""
    bk = batch_kind(g.host_kind)
    if bk is None:
        return None
    spec = r.plan.spec
    return bk.preview(spec.campaign.name, spec.hosts[g.host], g, r.estimate.per_group_s[g.id])


def _schedule_text(schedule: Schedule) -> list[str]:
    """Which groups run together, on which GPUs and ports, when."""
    out = ["", "schedule (predicted; groups whose times overlap run side by side):"]
    width = max((len(s.group) for s in schedule.slots), default=0)
    for s in sorted(schedule.slots, key=lambda s: (s.host, s.start_s, s.group)):
        span = f"{format_duration(s.start_s)} - {format_duration(s.end_s)}"
        out.append(
            f"  {span:>15}  {s.group:<{width}}  GPUs {','.join(map(str, s.gpu_ids)) or 'job':<15} "
            f"port {s.port}"
        )
    return out


def render_json(r: Review) -> dict[str, Any]:
    spec, exp, est = r.plan.spec, r.expansion, r.estimate
    cells = []
    for x in exp.cells:
        d = x.to_json()
        d["requests"] = est.per_cell_requests[x.id]
        d["estimate_s"] = round(est.per_cell_s[x.id], 3)
        d["selected"] = r.is_selected(x.id)
        cells.append(d)
    groups = []
    per_group = Counter(x.group for x in exp.cells)  # counted once: a count per group is O(n^2)
    for g in exp.groups:
        d = g.to_json()
        d["estimate_s"] = round(est.per_group_s[g.id], 3)
        d["cells"] = per_group[g.id]
        job = _job(r, g)
        if job is not None:
            d[g.host_kind] = job.to_json()
        groups.append(d)
    return {
        "campaign": {
            **spec.campaign.model_dump(),
            "plan": str(r.plan.path),
            "plan_hash": r.plan.hash,
            "results_dir": str(r.results_dir),
            "simulated": r.sim,
        },
        "hosts": {
            n: {**h.model_dump(exclude_none=True), "kind": REHEARSAL if r.sim else h.kind}
            for n, h in spec.hosts.items()
        },
        "groups": groups,
        "cells": cells,
        "counts": {
            "groups": len(exp.groups),
            "cells": len(exp.cells),
            "requests": est.requests,
            "server_starts": len(exp.groups),
            "by_kind": dict(Counter(x.kind for x in exp.cells)),
        },
        "foreign_services": {
            n: h.stop_before for n, h in spec.hosts.items() if h.stop_before and not r.sim
        },
        "estimate_s": round(est.total_s, 1),
        "estimate_unpacked_s": round(est.unpacked_s, 1),
        "estimate_from": est.measured_from or None,  # where measured constants came from
        "schedule": [
            {
                "group": s.group,
                "host": s.host,
                "start_s": round(s.start_s, 1),
                "end_s": round(s.end_s, 1),
                "gpu_ids": list(s.gpu_ids),
                "port": s.port,
            }
            for s in est.schedule.slots
        ],
        "selection": None
        if r.selected is None
        else {
            "only": r.only,
            "cells": len(r.selected),
            "estimate_s": round(r.selected_s, 1),
        },
        "assumptions": est.assumptions,
        "warnings": list(r.warnings),
        "prompt_sets": set_json(list(r.sets)),
        "prompts": prompt_json(list(r.prompts)),
    }


def _no_gpus(g: ServiceGroup) -> str:
    """Where a group without GPU ids runs: a running server's are not this tool's to give."""
    return "its own" if g.url is not None else "from the job"


def _starts(groups: list[ServiceGroup]) -> str:
    running = sum(g.url is not None for g in groups)
    riding = sum(g.rides is not None for g in groups)
    said = f"{len(groups) - running - riding} server starts"
    return said + (f", {running} running servers measured as they are" if running else "")

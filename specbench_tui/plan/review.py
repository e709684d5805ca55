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

from specbench_tui.plan.document import Plan
from specbench_tui.plan.durations import format_duration
from specbench_tui.plan.estimate import Estimate, estimate
from specbench_tui.plan.expand import Expansion, expand
from specbench_tui.results.cells import Cell


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

    def is_selected(self, cell_id: str) -> bool:
        return self.selected is None or cell_id in self.selected

    @property
    def selected_s(self) -> float:
        """The estimate for the selected cells: theirs, and a start-up per group they need."""
        if self.selected is None:
            return self.estimate.total_s
        cells = [c for c in self.expansion.cells if c.id in self.selected]
        groups = {c.group for c in cells}
        startup = {
            g.id: self.estimate.per_group_s[g.id]
            - sum(self.estimate.per_cell_s[c.id] for c in self.expansion.cells if c.group == g.id)
            for g in self.expansion.groups
        }
        return sum(self.estimate.per_cell_s[c.id] for c in cells) + sum(startup[g] for g in groups)


def review(
    plan: Plan,
    results_dir: Path,
    *,
    sim: bool = False,
    select: Callable[[Cell], bool] | None = None,
    only: str = "",
) -> Review:
    """``select`` (``--only``): which cells a run would take; the tree marks them."""
    exp = expand(plan, sim=sim)
    speed = {h: (s.speed if s.sim else (50.0 if sim else 1.0)) for h, s in plan.spec.hosts.items()}
    est = estimate(plan.spec, plan.dir, exp.groups, exp.cells, speed=speed)
    selected = frozenset(c.id for c in exp.cells if select(c)) if select is not None else None
    return Review(
        plan=plan,
        expansion=exp,
        estimate=est,
        results_dir=results_dir,
        sim=sim,
        selected=selected,
        only=only,
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
        if r.sim or host.sim:
            where = f"simulated, {host.gpus} GPUs" + (
                f", speed x{host.speed:g}" if host.sim else ""
            )
        elif host.ssh:
            where = f"ssh {host.ssh}, {host.services or 'systemd'}, {host.gpus} GPUs"
        else:
            where = f"local, {host.services or 'process'}, {host.gpus} GPUs"
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
                f"{','.join(map(str, g.gpu_ids))}  port {g.port}  "
                f"~{format_duration(est.per_group_s[g.id])}"
            )
            out.append(f"{bar}   $ {shlex.join(g.command)}")
            env = " ".join(f"{k}={v}" for k, v in g.env)
            out.append(f"{bar}   env {env}")
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
        f"{len(exp.groups)} server starts"
    )
    out.append(
        f"estimated wall time {format_duration(est.total_s)} "
        f"(server start-ups {format_duration(est.startup_s)})"
    )
    out.append("  assuming " + "; ".join(est.assumptions))
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
    for g in exp.groups:
        d = g.to_json()
        d["estimate_s"] = round(est.per_group_s[g.id], 3)
        d["cells"] = sum(1 for x in exp.cells if x.group == g.id)
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
            n: {**h.model_dump(exclude_none=True), "kind": "sim" if r.sim else h.kind}
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
        "selection": None
        if r.selected is None
        else {
            "only": r.only,
            "cells": len(r.selected),
            "estimate_s": round(r.selected_s, 1),
        },
        "assumptions": est.assumptions,
    }

"""How big a plan may grow, checked before it is expanded.

Params multiply (``params = { a = [...], b = [...] }`` is every combination), and configs
multiply with TP sizes, hosts and workload slices, so a few short lists can name more cells
than a machine can hold. The sizes are counted from the lists alone, without expanding
anything, and a plan past the bounds is one located error instead of a process that runs out
of memory in its dry run.
"""

from __future__ import annotations

import math

from specbench_tui.plan.model import ConcurrencyWorkload, PlanSpec, SingleWorkload
from specbench_tui.table_types import PlanError

MAX_CONFIGS = 100_000  # expanded configs of one [configs.NAME]
MAX_GROUPS = 100_000  # service groups (server starts) of a plan
MAX_CELLS = 1_000_000  # cells of a plan


def check_size(spec: PlanSpec) -> list[PlanError]:
    """Upper bounds of the expanded plan (exclusions not subtracted) against the limits."""
    errs: list[PlanError] = []
    configs = 0
    for name, cfg in spec.configs.items():
        n = math.prod(len(v) for v in cfg.params.values())
        if n > MAX_CONFIGS:
            errs.append(
                PlanError(
                    ("configs", name, "params"),
                    f"expands to {n:,} configs (every combination of its lists); at most "
                    f"{MAX_CONFIGS:,}: shorten the lists or split the plan",
                )
            )
        configs += n
    if errs:
        return errs
    hosts = len(spec.matrix.hosts) if spec.matrix.hosts is not None else len(spec.hosts)
    groups = hosts * len(set(spec.matrix.tp)) * configs
    per_group = sum(_cells_per_group(w) for w in spec.workloads.values())
    cells = groups * per_group
    if groups > MAX_GROUPS:
        errs.append(
            PlanError(
                ("matrix",),
                f"names up to {groups:,} service groups ({hosts} host(s) x "
                f"{len(set(spec.matrix.tp))} TP size(s) x {configs:,} configs); at most "
                f"{MAX_GROUPS:,}: split the plan",
            )
        )
    elif cells > MAX_CELLS:
        biggest = max(spec.workloads, key=lambda n: _cells_per_group(spec.workloads[n]))
        errs.append(
            PlanError(
                ("workloads", biggest),
                f"with the other workloads names up to {cells:,} cells ({groups:,} service "
                f"groups x {per_group:,} cells each); at most {MAX_CELLS:,}: fewer prompt "
                "sets, max_tokens or levels, or split the plan",
            )
        )
    return errs


def _cells_per_group(w: object) -> int:
    if isinstance(w, SingleWorkload):
        return len(w.prompts) * len(w.max_tokens)
    if isinstance(w, ConcurrencyWorkload):
        return len(w.levels)
    return 1  # agentic: one cell

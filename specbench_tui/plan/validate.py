"""Checks across tables: names that must exist, TP that must fit, templates that must resolve.

``check_plan`` runs one checker per table, in a fixed order (messages come out in it); each
lives with what it checks: hosts (``check_hosts``), server and configs (``check_configs``,
``check_placeholders``), the matrix, its workloads and the baseline (``check_matrix``),
capacity searches (``capacity``), prompt sets and chat templates (``check_prompts``), a
batch job's files (``job_files``), forced acceptance (``check_forced``). Each problem is a
PlanError with the key path it is about; the loader adds file and line.
"""

from __future__ import annotations

import re

from specbench_tui.plan.capacity import check_capacity
from specbench_tui.plan.check_configs import (
    check_config_tables,
    check_engines,
    check_expanded_names,
    check_model,
    check_programs,
)
from specbench_tui.plan.check_forced import check_forced
from specbench_tui.plan.check_hosts import check_hosts
from specbench_tui.plan.check_matrix import (
    check_baseline,
    check_controls,
    check_matrix,
    check_workloads,
)
from specbench_tui.plan.check_prompts import check_prompt_sets, check_templates
from specbench_tui.plan.check_running import check_running
from specbench_tui.plan.configs import resolve_configs
from specbench_tui.plan.document import Plan
from specbench_tui.plan.job_files import check_job_files
from specbench_tui.plan.log_patterns import compile_pattern
from specbench_tui.plan.model import SAFE_NAME, PlanSpec
from specbench_tui.table_types import PlanError

_SAFE = re.compile(SAFE_NAME)


def check_plan(plan: Plan) -> list[PlanError]:
    """Every problem of a plan that its model alone cannot see, table by table."""
    spec = plan.spec
    errs = check_names(spec) + check_hosts(spec) + check_config_tables(spec)
    if errs:
        return errs  # the rest needs resolvable configs
    configs = resolve_configs(spec)
    return (
        check_engines(spec, configs)
        + check_expanded_names(configs)
        + check_matrix(spec, configs)
        + check_workloads(plan, configs)
        + check_capacity(spec)
        + check_templates(plan, configs)
        + check_prompt_sets(plan)
        + check_job_files(plan)
        + check_baseline(spec, configs)
        + check_controls(spec, configs)
        + check_logs(spec)
        + check_programs(spec)
        + check_model(spec, configs)
        + check_forced(spec, configs)
        + check_running(spec, configs)
    )


def check_names(spec: PlanSpec) -> list[PlanError]:
    """Host, config and workload names end up in file names, unit names and shells."""
    errs: list[PlanError] = []
    for table, names in (
        ("hosts", spec.hosts),
        ("configs", spec.configs),
        ("workloads", spec.workloads),
    ):
        for name in names:
            if not _SAFE.match(name):
                errs.append(
                    PlanError(
                        (table, name),
                        f"name {name!r} has characters that are "
                        "unsafe in a file name, a service unit name or a shell; "
                        "use letters, digits, '_', '.' and '-'",
                    )
                )
    return errs


def check_logs(spec: PlanSpec) -> list[PlanError]:
    """``[logs]``: patterns that compile, with named groups."""
    errs: list[PlanError] = []
    for name, pattern in spec.logs.items():
        try:
            rx = compile_pattern(pattern)
        except ValueError as exc:
            errs.append(PlanError(("logs", name), str(exc)))
            continue
        if not rx.groupindex:
            errs.append(
                PlanError(
                    ("logs", name),
                    "has no named group; write e.g. 'accept len: (?P<accept_len>[0-9.]+)'",
                )
            )
    return errs

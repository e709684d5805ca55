"""Checks of ``[matrix]`` and of the tables that refer to it: ``[workloads]`` and the
campaign's baseline.

Each names configs, hosts, workloads or TP sizes that must exist in the matrix; an unknown
name gets the closest known one as a hint. Each problem is a PlanError at its key path.
"""

from __future__ import annotations

import difflib

from specbench_tui.hosts.backends import simulated
from specbench_tui.plan.configs import ResolvedConfig, names_matching
from specbench_tui.plan.document import Plan
from specbench_tui.plan.model import PlanSpec
from specbench_tui.table_types import PlanError


def matrix_hosts(spec: PlanSpec) -> list[str]:
    """The hosts the matrix runs on: its own list, else every host of the plan."""
    m = spec.matrix
    return m.hosts if m.hosts is not None else list(spec.hosts)


def rehearsal_only(spec: PlanSpec) -> bool:
    """Whether every (known) host of the matrix is simulated: then no engine command is read
    by a real engine, and the simulator's reading of it is what counts."""
    return all(simulated(spec.hosts[h].kind) for h in matrix_hosts(spec) if h in spec.hosts)


def unknown(what: str, name: str, known: object) -> str:
    """The message for a name that is not there, with the closest one (or all) as a hint."""
    names = list(known)  # type: ignore[call-overload]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(names)}"
    return f"no {what} named {name!r}; {hint}"


def check_matrix(spec: PlanSpec, configs: list[ResolvedConfig]) -> list[PlanError]:
    """``[matrix]``: configs and hosts that exist, TP that fits, exclusions that exist."""
    return _check_refs(spec, configs) + _check_tp(spec) + _check_exclusions(spec, configs)


def _check_refs(spec: PlanSpec, configs: list[ResolvedConfig]) -> list[PlanError]:
    """``matrix.configs`` and ``matrix.hosts``: each names something the plan has."""
    errs: list[PlanError] = []
    for i, ref in enumerate(spec.matrix.configs):
        if not names_matching(ref, configs):
            errs.append(PlanError(("matrix", "configs", i), unknown("config", ref, spec.configs)))
    for i, h in enumerate(matrix_hosts(spec)):
        if h not in spec.hosts:
            errs.append(PlanError(("matrix", "hosts", i), unknown("host", h, spec.hosts)))
    return errs


def _check_tp(spec: PlanSpec) -> list[PlanError]:
    """``matrix.tp``: each size fits every known host of the matrix."""
    errs: list[PlanError] = []
    hosts = matrix_hosts(spec)
    for tp in spec.matrix.tp:
        for h in hosts:
            if h in spec.hosts and tp > spec.hosts[h].gpus:
                errs.append(
                    PlanError(
                        ("matrix", "tp"),
                        f"TP {tp} needs {tp} GPUs but host "
                        f"{h!r} has gpus = {spec.hosts[h].gpus}; drop TP {tp} or "
                        "exclude it for that host",
                    )
                )
    return errs


def _check_exclusions(spec: PlanSpec, configs: list[ResolvedConfig]) -> list[PlanError]:
    """``[[matrix.exclude]]``: each names a config, host and workload that exist."""
    errs: list[PlanError] = []
    for i, ex in enumerate(spec.matrix.exclude):
        where = ("matrix", "exclude", i)
        if ex.config is not None and not names_matching(ex.config, configs):
            errs.append(PlanError((*where, "config"), unknown("config", ex.config, spec.configs)))
        if ex.host is not None and ex.host not in spec.hosts:
            errs.append(PlanError((*where, "host"), unknown("host", ex.host, spec.hosts)))
        if ex.workload is not None and ex.workload not in spec.workloads:
            errs.append(
                PlanError((*where, "workload"), unknown("workload", ex.workload, spec.workloads))
            )
    return errs


def check_workloads(plan: Plan, configs: list[ResolvedConfig]) -> list[PlanError]:
    """``[workloads.NAME]``: configs and TP sizes of the matrix (its prompt sets:
    ``check_prompts``)."""
    spec, m = plan.spec, plan.spec.matrix
    errs: list[PlanError] = []
    for wname, w in spec.workloads.items():
        for i, ref in enumerate(w.configs or []):
            if not names_matching(ref, configs):
                errs.append(
                    PlanError(
                        ("workloads", wname, "configs", i), unknown("config", ref, spec.configs)
                    )
                )
        for tp in w.tp or []:
            if tp not in m.tp:
                errs.append(
                    PlanError(
                        ("workloads", wname, "tp"),
                        f"TP {tp} is not in matrix.tp {m.tp}; the workload can only restrict it",
                    )
                )
    return errs


def check_baseline(spec: PlanSpec, configs: list[ResolvedConfig]) -> list[PlanError]:
    """``[campaign] baseline``: one config of the matrix (not a parametrized family, not a
    forced-acceptance variant), since speedups are measured against it."""
    b = spec.campaign.baseline
    if b is None:
        return []
    real = [c for c in configs if c.forced_accept is None]  # its forced variants aside
    if len(names_matching(b, real)) > 1:
        return [
            PlanError(
                ("campaign", "baseline"),
                f"{b!r} is parametrized; name one "
                "expansion, e.g. " + repr(names_matching(b, real)[0]),
            )
        ]
    in_matrix = {n for ref in spec.matrix.configs for n in names_matching(ref, configs)}
    if b not in in_matrix:
        return [
            PlanError(
                ("campaign", "baseline"),
                f"baseline {b!r} is not in "
                f"matrix.configs {spec.matrix.configs}; speedups need it measured",
            )
        ]
    return []


def check_controls(spec: PlanSpec, configs: list[ResolvedConfig]) -> list[PlanError]:
    """A config's ``control``: one config of the matrix other than itself, since its
    speed-up over the control needs the control measured."""
    in_matrix = {n for ref in spec.matrix.configs for n in names_matching(ref, configs)}
    errs = []
    for name, cfg in spec.configs.items():
        ref = cfg.control
        if ref is None:
            continue
        found = names_matching(ref, configs)
        if len(found) > 1:
            errs.append(
                PlanError(
                    ("configs", name, "control"),
                    f"{ref!r} is parametrized; name one expansion, e.g. {found[0]!r}",
                )
            )
        elif ref == name or ref not in in_matrix:
            why = "is the config itself" if ref == name else "is not in matrix.configs"
            errs.append(
                PlanError(
                    ("configs", name, "control"),
                    f"control {ref!r} {why}; a control is another config the matrix measures",
                )
            )
    return errs

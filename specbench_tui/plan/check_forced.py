"""Checks of ``forced_accept`` on a config: each value against the command it forces.

A forced value needs a speculative command (there is no verify step to force otherwise), an
engine with the knob, and at most k + 1 for the config's k drafts a step. A rehearsal-only
plan is read as the simulator reads it: with the simulated engine's knob.
"""

from __future__ import annotations

from specbench_tui.engines.registry import SIMULATED_ENGINE, adapter
from specbench_tui.plan.check_configs import server_command
from specbench_tui.plan.check_matrix import rehearsal_only
from specbench_tui.plan.configs import ResolvedConfig
from specbench_tui.plan.model import PlanSpec
from specbench_tui.table_types import PlanError


def check_forced(spec: PlanSpec, configs: list[ResolvedConfig]) -> list[PlanError]:
    """Each config that lists ``forced_accept`` values (its forced variants aside)."""
    all_sim = rehearsal_only(spec)
    errs: list[PlanError] = []
    for c in configs:
        values = spec.configs[c.base].forced_accept
        if c.forced_accept is None and values:
            errs += _check_config(c, values, SIMULATED_ENGINE if all_sim else c.engine)
    return errs


def _check_config(c: ResolvedConfig, values: list[float], engine: str) -> list[PlanError]:
    """One config's values, read by ``engine``'s adapter."""
    eng = adapter(engine)
    command = server_command(c)
    where = ("configs", c.base, "forced_accept")
    if not eng.requested_speculation(command).on:
        return [
            PlanError(
                where,
                f"config {c.name!r} runs no speculative decoding, so there is no verify "
                "step to force: give it a speculative method or leave forced_accept out",
            )
        ]
    k = eng.draft_tokens(command)
    errs: list[PlanError] = []
    for i, v in enumerate(values):
        if k is not None and v > k + 1:
            errs.append(
                PlanError(
                    (*where, i),
                    f"{v:g} is above k + 1 = {k + 1} (config {c.name!r} drafts k = {k} "
                    f"tokens a step, and a step accepts at most those and the bonus "
                    f"token): give values in [1, {k + 1}]",
                )
            )
            continue
        try:
            eng.forced_accept(command, v)
        except ValueError as e:
            errs.append(PlanError((*where, i), f"config {c.name!r}: {e}"))
    return errs

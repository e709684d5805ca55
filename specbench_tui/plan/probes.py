"""What the checks' probes send at the end of a group: the sizes the engine's checks use and
the dry run's estimate counts, kept in one place so the two cannot drift apart.

The noise-floor probe runs on each baseline group (``[checks] greedy_equivalence`` and
``noise_floor``): its prompts twice alone, then batched. The state-leak probe
(``[checks] state_leak``) runs on every group: a short prompt alone, again, after a long
unrelated request, and once more. With ``[campaign] runs`` both run in the first run only.
"""

from __future__ import annotations

from dataclasses import dataclass

from specbench_tui.plan.model import ConcurrencyWorkload, PlanSpec
from specbench_tui.results.cells import ServiceGroup

#: The state-leak probe's long unrelated request: about this many prompt tokens, this many out.
LEAK_PROMPT_TOKENS = 1500
LEAK_OUTPUT_TOKENS = 512
PROBE_TOKENS = 96
#: The floor probe: this many prompts, batched this many at a time without a concurrency
#: workload, answers no longer than this.
FLOOR_PROMPTS = 2
FLOOR_BATCH = 4
FLOOR_MAX_TOKENS = 1024


@dataclass(frozen=True)
class ProbeRun:
    """``requests`` requests sent ``concurrency`` at a time, each of ``max_tokens`` out."""

    requests: int
    concurrency: int
    max_tokens: int
    prompt_tokens: int | None = None  # None: a prompt of the plan's own


#: The state-leak probe: the short prompt alone, again and once more, and the long request.
LEAK_RUNS = (ProbeRun(3, 1, PROBE_TOKENS), ProbeRun(1, 1, LEAK_OUTPUT_TOKENS, LEAK_PROMPT_TOKENS))


def floor_probe_size(spec: PlanSpec) -> tuple[int, int, int]:
    """(prompts, batch, max_tokens) of the floor probe: its prompts run twice alone, then
    batched at the plan's highest concurrency level (a small batch without one), as long as
    the plan's longest temperature-0 answer (capped). It costs 2 x prompts + batch requests."""
    levels = [
        lvl
        for w in spec.workloads.values()
        if isinstance(w, ConcurrencyWorkload) and 0 in w.temperatures
        for lvl in w.levels
    ]
    lengths: list[int] = []
    for w in spec.workloads.values():
        if 0 in w.temperatures:
            m = w.max_tokens
            lengths.extend(m if isinstance(m, list) else [m])
    batch = max(levels) if levels else FLOOR_BATCH
    return FLOOR_PROMPTS, max(batch, 2), min(max(lengths, default=PROBE_TOKENS), FLOOR_MAX_TOKENS)


def runs_floor_probe(spec: PlanSpec, group: ServiceGroup) -> bool:
    """Whether the noise-floor probe runs at the end of ``group``: a baseline group of the
    first of the plan's ``runs``, with the greedy check and its floor on (the baseline's
    later runs are themselves compared with its first)."""
    checks = spec.checks
    return bool(
        checks.greedy_equivalence
        and checks.noise_floor
        and group.config == spec.campaign.baseline
        and group.run == 1
    )


def runs_leak_probe(spec: PlanSpec, group: ServiceGroup) -> bool:
    """Whether the state-leak probe runs at the end of ``group``: every group of the first
    run, with ``[checks] state_leak`` on."""
    return spec.checks.state_leak and group.run == 1


def group_probes(spec: PlanSpec, group: ServiceGroup) -> list[ProbeRun]:
    """The probe requests sent at the end of ``group`` (none when its checks are off)."""
    runs: list[ProbeRun] = []
    if runs_floor_probe(spec, group):
        prompts, batch, max_tokens = floor_probe_size(spec)
        runs += [ProbeRun(2 * prompts, 1, max_tokens), ProbeRun(batch, batch, max_tokens)]
    if runs_leak_probe(spec, group):
        runs += LEAK_RUNS
    return runs

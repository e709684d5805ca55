"""The forced-acceptance check: a cell whose engine was made to accept a set number of tokens
per verify step (``forced_accept``) must measure that accept length. An engine that ignores
the knob (an unknown option dropped, a build without synthetic acceptance, a rehearsal that
could not pass it on) would otherwise put a real-acceptance speed-up on the forced curve.

Pure: the engine (engine/checks.py) gathers each forced config's finished cells and publishes
the verdict as a ``check_verdict`` of check ``forced_accept``; a fail marks the config's cells
failed-check and makes the exit status 1, as every failed check does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specbench_tui.bench.greedy import Verdict

#: How far a cell's measured accept length may be from the forced one, relative to it. The
#: engines draw each step's acceptance at random around the value (a minimum-variance
#: schedule: floor(L - 1) drafts or one more), and a request's last step is cut by its
#: max_tokens, so a short cell lands a few percent off; a knob ignored lands far off.
FORCED_TOLERANCE = 0.10

#: The check's name in ``check_verdict`` events.
CHECK = "forced_accept"


def measured_accept(figures: Mapping[str, Any]) -> float | None:
    """A cell's accept length: the engine's definition over its requests' counts, else its
    counters' (``engines/acceptance.py``)."""
    for key in ("accept_length_weighted", "accept_length_counters"):
        v = figures.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
    return None


def forced_verdict(
    config: str, tp: int, forced: float, cells: Sequence[tuple[str, float | None]]
) -> Verdict:
    """The verdict on one forced config at one TP size from its finished cells, each
    (cell name, measured accept length or None)."""
    where = f"{config} at TP{tp}"
    measured = [(n, v) for n, v in cells if v is not None]
    detail: dict[str, Any] = {
        "forced": forced,
        "tolerance": FORCED_TOLERANCE,
        "cells": [{"cell": n, "accept_length": v} for n, v in cells],
    }
    if not measured:
        return Verdict(
            "fail",
            f"{where}: forced accept length {forced:g}, but no accept length was measured "
            f"in {len(cells)} cell{'s' * (len(cells) != 1)}: the forcing cannot be confirmed",
            detail,
        )
    off = [(n, v) for n, v in measured if abs(v - forced) > FORCED_TOLERANCE * forced]
    values = [v for _, v in measured]
    span = f"{min(values):.2f}" if len(values) == 1 else f"{min(values):.2f}-{max(values):.2f}"
    if off:
        name, v = max(off, key=lambda x: abs(x[1] - forced))
        return Verdict(
            "fail",
            f"{where}: measured accept length {v:.2f} in {name} against the forced "
            f"{forced:g} (more than {FORCED_TOLERANCE:.0%} off, {len(off)} of "
            f"{len(measured)} cells): the engine did not take the forced acceptance",
            detail,
        )
    return Verdict(
        "pass",
        f"{where}: measured accept length {span} in {len(measured)} "
        f"cell{'s' * (len(measured) != 1)}, within {FORCED_TOLERANCE:.0%} of the forced "
        f"{forced:g}",
        detail,
    )

"""GPU board energy of a set of cells, pooled one way for every table that shows it.

A row's J/token is all the energy of its valid cells over all their output tokens (a ratio
of sums), never a mean of per-cell ratios: a short cell would weigh as much as a long one.
Above idle subtracts the group's idle floor times each cell's own window before summing; a
negative sum says the floor is unreliable (as a cell's own figure does, bench/energy.py), and
the pooled figure is left out rather than printed below zero.
The energy section, the per-TP tables, the summary and the console's results pane all take
their energy figures from here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def energy_valid(figures: Mapping[str, Any]) -> bool:
    """A cell whose energy can be pooled: recorded, valid, with a figure."""
    return bool(figures.get("energy_valid")) and figures.get("gpu_energy_j") is not None


def pool_energy(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The pooled figures of valid cells' records (``energy_valid`` ones only)."""
    joules = math.fsum(float(c["gpu_energy_j"]) for c in cells)
    tokens = sum(int(c.get("energy_output_tokens") or 0) for c in cells)
    window = math.fsum(float(c.get("energy_window_s") or 0.0) for c in cells)
    idle_known = bool(cells) and all(c.get("idle_power_w") is not None for c in cells)
    above = (
        math.fsum(
            float(c["gpu_energy_j"]) - float(c["idle_power_w"]) * float(c["energy_window_s"] or 0)
            for c in cells
        )
        if idle_known
        else None
    )
    if above is not None and above < 0:  # the floors drew more than the cells: not a floor
        above = None
    methods = sorted({str(c.get("energy_method")) for c in cells})
    idle = [float(c["idle_power_w"]) for c in cells if c.get("idle_power_w") is not None]
    return {
        "joules": joules,
        "tokens": tokens,
        "power_w": joules / window if window > 0 else None,
        "j_per_token": joules / tokens if tokens else None,
        "j_per_token_above_idle": above / tokens if tokens and above is not None else None,
        "idle_w": math.fsum(idle) / len(idle) if idle else None,
        "method": " + ".join(m.replace("_", " ") for m in methods),
    }

"""GPU board energy per config, TP size and workload: what a token costs on the group's GPUs,
and what it costs beyond keeping the server up.

The figures are the cells' own (their ``cell_energy`` records, ``bench/energy.py``): this
section only pools them, by ratios of sums (all the energy of a config's valid cells over all
their output tokens), never a mean of per-cell ratios, and never across hosts, TP sizes or
workloads. Cells whose energy is not valid are left out of the pool and listed with why.
Results from before energy was recorded have no such figures: the section is then left out.
"""

from __future__ import annotations

import math
from typing import Any

from specbench_tui.report import format as f
from specbench_tui.report.blocks import Bullets, Cell, Column, Para, Section, Table, text
from specbench_tui.report.frames import marked, workload_names
from specbench_tui.report.inputs import Inputs
from specbench_tui.report.sections.common import slurm_hosts

TITLE = "GPU board energy"
MAX_LISTED = 12  # invalid cells named one by one; the rest are counted


def _pool(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """One row's figures from its valid cells' records (ratios of sums)."""
    joules = math.fsum(c["gpu_energy_j"] for c in cells)
    tokens = sum(int(c.get("energy_output_tokens") or 0) for c in cells)
    window = math.fsum(float(c.get("energy_window_s") or 0.0) for c in cells)
    idle_known = all(c.get("idle_power_w") is not None for c in cells)
    above = (
        math.fsum(c["gpu_energy_j"] - c["idle_power_w"] * c["energy_window_s"] for c in cells)
        if idle_known
        else None
    )
    methods = sorted({str(c.get("energy_method")) for c in cells})
    idle = [c["idle_power_w"] for c in cells if c.get("idle_power_w") is not None]
    return {
        "joules": joules,
        "tokens": tokens,
        "power_w": joules / window if window > 0 else None,
        "j_per_token": joules / tokens if tokens else None,
        "j_per_token_above_idle": above / tokens if tokens and above is not None else None,
        "idle_w": math.fsum(idle) / len(idle) if idle else None,
        "method": " + ".join(m.replace("_", " ") for m in methods),
    }


def build(inp: Inputs) -> Section | None:
    names = workload_names(inp)
    recorded = [
        c for c in inp.state.cells.values() if c.status == "done" and "energy_valid" in c.figures
    ]
    if not recorded:
        on_slurm = slurm_hosts(inp)
        if not on_slurm:
            return None
        # Said, as the telemetry section says it, so that a cluster's report has a local
        # run's shape and a reader does not look for figures that were never made here.
        return Section(TITLE).add(
            Para(
                text(
                    f"No GPU board energy for the groups on {', '.join(on_slurm)}: each ran "
                    "as a Slurm batch job, whose GPU samples and energy records stay in the "
                    "job's own results directory on the cluster (they are not folded into "
                    "the campaign)."
                )
            )
        )
    sec = Section(TITLE)
    sec.add(
        Para(
            text(
                "Energy of each group's own GPUs (the boards, as NVML reports them: no CPU, "
                "host memory or fans) over exactly each cell's measured window. Method: the "
                "rise of NVML's energy counter (nvml counter) where every GPU has it, else the "
                "trapezoidal integral of the 1 s power readings (power integral, the only "
                "way on nvidia-smi, and what a counter that went back falls to). J/token: "
                "all the energy of a row's valid cells over all their output tokens. Above "
                "idle: less the group's idle floor (its GPUs' mean power between the server's "
                "ready line and its first cell, before any warm-up) over the same windows. A "
                "cell's energy is not valid, and left out, with a sample gap over 3 s in its "
                "window, fewer than 20 samples per GPU in it (low confidence), or another "
                "process on the group's GPUs."
            )
        )
    )
    by_key: dict[tuple[str, int], dict[tuple[str, str], list[Any]]] = {}
    for c in recorded:
        row_key = (c.config, names.get(c.id, c.workload))
        by_key.setdefault((c.host, c.tp), {}).setdefault(row_key, []).append(c)
    invalid: list[str] = []
    for (host, tp), rows_of in sorted(by_key.items()):
        rows, csv = [], []
        for (config, workload), cells in sorted(rows_of.items()):
            good = [
                c.figures
                for c in cells
                if c.figures.get("energy_valid") and c.figures.get("gpu_energy_j") is not None
            ]
            for c in cells:
                if not c.figures.get("energy_valid"):
                    invalid.append(f"{c.name}: {c.figures.get('energy_note') or 'not valid'}")
            p = _pool(good) if good else None
            name = marked(inp, config, host, [tp])
            rows.append(
                [
                    Cell(name),
                    Cell(workload),
                    Cell(f"{len(good)}/{len(cells)}"),
                    Cell(p["method"] if p else "-"),
                    Cell(f.fnum(p["joules"], 0) if p else "-"),
                    Cell(f.fnum(p["power_w"], 0) if p else "-"),
                    Cell(f.fnum(p["idle_w"], 0) if p else "-"),
                    Cell(f.fnum(p["j_per_token"], 4) if p else "-"),
                    Cell(f.fnum(p["j_per_token_above_idle"], 4) if p else "-"),
                ]
            )
            csv.append(
                {
                    "host": host,
                    "tp": tp,
                    "config": config,
                    "workload": workload,
                    "cells_valid": len(good),
                    "cells": len(cells),
                    **(p or {}),
                }
            )
        sec.add(
            Table(
                f"{TITLE}, TP {tp} on {host}",
                [
                    Column("Config", "l"),
                    Column("Workload", "l"),
                    Column("Valid cells"),
                    Column("Method", "l"),
                    Column("Energy J"),
                    Column("Power W"),
                    Column("Idle W"),
                    Column("J/token"),
                    Column("J/token above idle"),
                ],
                rows,
                small=True,
                csv=csv,
                key_columns=2,
            )
        )
    if invalid:
        listed = [text(s) for s in invalid[:MAX_LISTED]]
        if len(invalid) > MAX_LISTED:
            listed.append(text(f"and {len(invalid) - MAX_LISTED} more"))
        sec.add(Para(text(f"{f.plural(len(invalid), 'cell')} whose energy is not valid:")))
        sec.add(Bullets(listed))
    return sec

"""GPU board energy per config, TP size and workload: what a token costs on the group's GPUs,
and what it costs beyond keeping the server up.

The figures are the cells' own (their ``cell_energy`` records, ``bench/energy.py``): this
section only pools them, by ratios of sums (all the energy of a config's valid cells over all
their output tokens), never a mean of per-cell ratios, and never across hosts, TP sizes or
workloads. Cells whose energy is not valid are left out of the pool and listed with why.
Results from before energy was recorded have no such figures: the section is then left out.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from specbench_tui.bench.figures import figure_axis, figure_name
from specbench_tui.report import format as f
from specbench_tui.report.blocks import (
    Bullets,
    Cell,
    Chart,
    Charts,
    Para,
    Point,
    Section,
    Series,
    text,
)
from specbench_tui.report.energy_pool import energy_valid, pool_energy
from specbench_tui.report.frames import marked, workload_names
from specbench_tui.report.inputs import Inputs
from specbench_tui.report.sections import columns as C
from specbench_tui.report.sections.common import batch_hosts, compared

TITLE = "GPU board energy"
MAX_LISTED = 12  # invalid cells named one by one; the rest are counted


def _not_recorded(inp: Inputs) -> Section | None:
    """The section when no cell recorded energy: none, or why for a cluster's groups."""
    on_batch = batch_hosts(inp)
    if not on_batch:
        return None
    # Said, as the telemetry section says it, so that a cluster's report has a local
    # run's shape and a reader does not look for figures that were never made here.
    return Section(TITLE).add(
        Para(
            text(
                f"No GPU board energy for the groups on {', '.join(on_batch)}: each ran "
                "as a batch job, and its node recorded no GPU samples to measure it "
                "from (a job's cell energy comes into the campaign where its node's GPUs "
                "can be read)."
            )
        )
    )


def _none_valid(recorded: list[Any]) -> Section:
    """The section when no cell has a valid figure: one line with the commonest reason."""
    notes = Counter(str(c.figures.get("energy_note") or "not valid") for c in recorded)
    why, n = notes.most_common(1)[0]
    return Section(TITLE).add(
        Para(
            text(
                f"No cell has a valid GPU board energy ({len(recorded)} recorded; the "
                f"most common reason, {n} of them: {why})."
            )
        )
    )


def build(inp: Inputs) -> Section | None:
    names = workload_names(inp)
    recorded = [  # real acceptance only: forced cells are never pooled with them
        c
        for c in inp.state.cells.values()
        if c.status == "done" and "energy_valid" in c.figures and c.config not in inp.forced
    ]
    if not recorded:
        return _not_recorded(inp)
    if not any(energy_valid(c.figures) for c in recorded):  # one line, not pages of dashes
        return _none_valid(recorded)
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
                "window, fewer than 20 samples per GPU in it without a read of the energy "
                "counter within 0.25 s of each edge (low confidence; the agent reads the "
                "counter every 0.05 s between samples, so a short cell is exact), or another "
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
        rows: list[dict[str, Any]] = []
        for (config, workload), cells in sorted(rows_of.items()):
            good = [c.figures for c in cells if energy_valid(c.figures)]
            for c in cells:
                if not c.figures.get("energy_valid"):
                    invalid.append(f"{c.name}: {c.figures.get('energy_note') or 'not valid'}")
            p = pool_energy(good) if good else None
            rows.append(
                {
                    "host": host,
                    "tp": tp,
                    "config": config,
                    "label": marked(inp, config, host, [tp]),
                    "workload": workload,
                    "cells_valid": len(good),
                    "cells": len(cells),
                    **(p or {}),
                }
            )
        caption = f"{TITLE}, TP {tp} on {host}"
        fields = list(dict.fromkeys(k for r in rows for k in r if k != "label"))
        sec.add(C.table(caption, POOLED_COLUMNS, rows, fields, small=True))
    sec.blocks += _against_speedup(inp)
    if invalid:
        listed = [text(s) for s in invalid[:MAX_LISTED]]
        if len(invalid) > MAX_LISTED:
            listed.append(text(f"and {len(invalid) - MAX_LISTED} more"))
        sec.add(Para(text(f"{f.plural(len(invalid), 'cell')} whose energy is not valid:")))
        sec.add(Bullets(listed))
    return sec


#: The pooled energy table: each config and workload over its cells with valid energy.
POOLED_COLUMNS = (
    C.CONFIG,
    C.WORKLOAD,
    C.Col("cells_valid", "Valid cells", lambda r: Cell(f"{r['cells_valid']}/{r['cells']}")),
    C.field("method", "Method", align="l"),
    C.field("joules", "Energy J", lambda v: f.fnum(v, 0)),
    C.field("power_w", "Power W", lambda v: f.fnum(v, 0)),
    C.field("idle_w", "Idle W", lambda v: f.fnum(v, 0)),
    *C.ENERGY,
)
#: Energy per token beside speed-up, each config against its baseline.
AGAINST_COLUMNS = (
    C.CONFIG,
    C.TP,
    C.WORKLOAD,
    C.SPEEDUP_CI,
    C.J_TOKEN,
    C.Col(
        "j_vs_base",
        f"{figure_name('j_per_token')} vs baseline",
        lambda r: Cell(f.speedup(r["j_vs_base"])),
    ),
)


def _against_speedup(inp: Inputs) -> list[Any]:
    """Energy per token beside speed-up, both against the baseline in the same host, TP,
    workload and level: a config can be faster and still cost more per token."""
    rows = [
        r
        for r in compared(inp).to_dicts()
        if r["j_per_token"] is not None and r["speedup"] is not None and not r["baseline"]
    ]
    base = {
        (r["host"], r["tp"], r["kind"], r["workload"], r["concurrency"]): r["j_per_token"]
        for r in compared(inp).to_dicts()
        if r["baseline"] and r["j_per_token"]
    }
    out: list[Any] = []
    for host in sorted({r["host"] for r in rows}):
        mine = [r for r in rows if r["host"] == host]
        table, series = [], []
        for i, tp in enumerate(sorted({r["tp"] for r in mine})):
            pts = []
            for r in (r for r in mine if r["tp"] == tp):
                b = base.get((r["host"], r["tp"], r["kind"], r["workload"], r["concurrency"]))
                rel = r["j_per_token"] / b if b else None
                level = f" ({r['concurrency']} clients)" if r["concurrency"] else ""
                table.append(
                    {
                        **r,
                        "label": marked(inp, r["config"], host, [tp]),
                        "workload": f"{r['workload']}{level}",
                        "j_vs_base": rel,
                    }
                )
                if rel is not None:
                    pts.append(Point(r["speedup"], rel))
            if pts:
                series.append(Series(f"TP {tp}", sorted(pts, key=lambda p: p.x), color=i))
        caption = f"Energy per token against speed-up on {host} (both over the baseline)"
        out.append(C.table(caption, AGAINST_COLUMNS, table, small=True))
        if series:
            out.append(
                Charts(
                    [
                        Chart(
                            title=f"Energy per token against speed-up ({host})",
                            kind="scatter",
                            xlabel=f"{figure_axis('speedup')} over the baseline",
                            ylabel=f"{figure_axis('j_per_token')} over the baseline's",
                            series=series,
                            hline=1.0,
                            ymin=0.0,
                        )
                    ]
                )
            )
    return out

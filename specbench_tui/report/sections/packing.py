"""Packing: which results ran beside other servers on their host, and what that cost where
a control (``[scheduler] pack_control``) ran the same config alone on the host. A packed
figure carries its neighbours' load (memory bandwidth, PCIe, CPU); the other tables hold
only packed figures (controls are never pooled with them), so this is the place that says
how far they are from a figure measured alone."""

from __future__ import annotations

from specbench_tui.report import format as f
from specbench_tui.report.blocks import Cell, Column, Para, Section, Table, text
from specbench_tui.report.frames import group_kinds, marked, packing_effect
from specbench_tui.report.inputs import Inputs


def build(inp: Inputs) -> Section | None:
    packed, controls = group_kinds(inp)
    if not packed:
        return None
    total = len(inp.state.groups)
    sec = Section("Packing")
    sec.add(
        Para(
            text(
                f"{len(packed)} of {total} service groups ran packed: each server was placed on "
                "free GPUs of its host while other servers ran beside it on the others, so "
                "every figure of the other tables (cells.parquet: packed = true) was measured "
                "under its neighbours' load. "
                + (
                    f"{len(controls)} control group(s) ran a packed group's config once more "
                    "alone on the host; they are left out of the other tables and compared "
                    "here, packed over alone, the same config, TP, host and workload."
                    if controls
                    else "No control ran alone (pack_control = true adds one per host), so "
                    "the cost of packing is not measured."
                )
            )
        )
    )
    eff = packing_effect(inp)
    if eff.height == 0:
        return sec
    cols = [
        Column("Config", "l"),
        Column("TP"),
        Column("Workload", "l"),
        Column("Packed tok/s [95% CI]"),
        Column("Alone tok/s [95% CI]"),
        Column("Packed / alone [95% CI]"),
        Column("", "l"),
    ]
    for (host,), part in sorted(eff.partition_by("host", as_dict=True).items()):
        rows = []
        for r in part.sort("tp", "workload", "concurrency").to_dicts():
            level = f" c{r['concurrency']}" if r["kind"] == "concurrency" else ""
            rows.append(
                [
                    Cell(marked(inp, str(r["config"]), str(host), [r["tp"]])),
                    Cell(str(r["tp"])),
                    Cell(f"{r['workload']}{level}"),
                    Cell(f.with_ci(r["packed_tok_s"], r["packed_lo"], r["packed_hi"], f.toks)),
                    Cell(f.with_ci(r["solo_tok_s"], r["solo_lo"], r["solo_hi"], f.toks)),
                    Cell(f.ratio(r["ratio"], r["ratio_lo"], r["ratio_hi"], r["ratio_too_few"])),
                    Cell("differs" if r["differs"] else "within noise"),
                ]
            )
        sec.add(
            Table(
                f"Packing effect on {host}: decode tok/s packed and alone",
                cols,
                rows,
                notes=[
                    "differs: Welch's test (5%) tells packed from alone; within noise: it "
                    "cannot at this number of repeats."
                ],
                small=True,
            )
        )
    return sec

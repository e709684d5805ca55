"""Packing: which results ran beside other servers on their host, and what that cost where
a control (``[scheduler] pack_control``) ran the same config alone on the host. A packed
figure carries its neighbours' load (memory bandwidth, PCIe, CPU); the other tables hold
only packed figures (controls are never pooled with them), so this is the place that says
how far they are from a figure measured alone."""

from __future__ import annotations

from specbench_tui.report import format as f
from specbench_tui.report.blocks import Cell, Para, Section, text
from specbench_tui.report.frames import group_kinds, marked, packing_effect
from specbench_tui.report.inputs import Inputs
from specbench_tui.report.sections import columns as C

#: The packing table: each packed config's decode tok/s beside the same config alone.
COLUMNS = (
    C.CONFIG,
    C.TP,
    C.WORKLOAD,
    C.figure("decode_tok_s_total", f.toks, at="packed_tok_s", scope="packed", ci=True),
    C.figure("decode_tok_s_total", f.toks, at="solo_tok_s", scope="alone", ci=True),
    C.Col(
        "packed_over_alone",
        "Packed / alone [95% CI]",
        lambda r: Cell(f.ratio(r["ratio"], r["ratio_lo"], r["ratio_hi"], r["ratio_too_few"])),
    ),
    C.Col("marks", "", lambda r: Cell("differs" if r["differs"] else "within noise"), "l"),
)


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
    for (host,), part in sorted(eff.partition_by("host", as_dict=True).items()):
        rows = [
            {
                **r,
                "label": marked(inp, str(r["config"]), str(host), [r["tp"]]),
                "workload": r["workload"]
                + (f" c{r['concurrency']}" if r["kind"] == "concurrency" else ""),
            }
            for r in part.sort("tp", "workload", "concurrency").to_dicts()
        ]
        sec.add(
            C.table(
                f"Packing effect on {host}: decode tok/s packed and alone",
                COLUMNS,
                rows,
                notes=[
                    "differs: Welch's test (5%) tells packed from alone; within noise: it "
                    "cannot at this number of repeats."
                ],
                small=True,
            )
        )
    return sec

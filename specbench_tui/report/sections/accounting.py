"""Every planned cell accounted for: how many are done, failed, skipped, never run (or still
pending or running, for a campaign that has not ended), per workload kind, and each one that is
not done with its reason, as the reducer of the event log has them."""

from __future__ import annotations

from collections import Counter
from typing import Any

from specbench_tui.report.blocks import Cell, Column, Para, Section, Table, text
from specbench_tui.report.inputs import Inputs
from specbench_tui.results.views import VIEW_STATUSES, view_status

NOT_DONE = ("failed", "skipped", "never run", "pending", "running")


def status_counts(inp: Inputs) -> dict[str, int]:
    """Planned cells by view status (every status present, zero or not), and ``planned``."""
    n: Counter[str] = Counter(view_status(inp.state, c.status) for c in inp.state.cells.values())
    out = {s: n.get(s, 0) for s in VIEW_STATUSES}
    out["planned"] = len(inp.state.cells)
    out["failed_check"] = sum(1 for c in inp.state.cells.values() if c.failed_check)
    return out


def problems(inp: Inputs) -> list[dict[str, Any]]:
    rows = []
    for c in inp.state.cells.values():
        status = view_status(inp.state, c.status)
        if status not in NOT_DONE:
            continue
        reason = c.reason or ("held: not selected in this run" if c.held else "")
        rows.append(
            {
                "cell_id": c.id,
                "name": c.name,
                "status": status,
                "attempt": c.attempt,
                "reason": reason,
                "kind": c.kind,
            }
        )
    return sorted(rows, key=lambda r: (NOT_DONE.index(r["status"]), r["name"]))


def build(inp: Inputs) -> Section:
    sec = Section("Every planned cell")
    kinds = sorted({c.kind for c in inp.state.cells.values()})
    shown = [
        s
        for s in VIEW_STATUSES
        if any(view_status(inp.state, c.status) == s for c in inp.state.cells.values())
    ] or ["done"]
    rows = []
    for k in kinds:
        n = Counter(
            view_status(inp.state, c.status) for c in inp.state.cells.values() if c.kind == k
        )
        rows.append(
            [Cell(k)] + [Cell(str(n.get(s, 0))) for s in shown] + [Cell(str(sum(n.values())))]
        )
    total = status_counts(inp)
    rows.append(
        [Cell("all", bold=True)]
        + [Cell(str(total[s]), bold=True) for s in shown]
        + [Cell(str(total["planned"]), bold=True)]
    )
    sec.add(
        Table(
            "Planned cells by status and workload kind",
            [Column("Kind", "l"), *(Column(s) for s in shown), Column("Planned")],
            rows,
        )
    )
    if total["failed_check"]:
        sec.add(
            Para(
                text(
                    f"{total['failed_check']} done cells belong to configs that failed a "
                    "correctness check: their figures are shown, marked, and never best."
                )
            )
        )
    probs = problems(inp)
    if probs:
        sec.add(
            Table(
                "Cells not done",
                [
                    Column("Cell", "p", 0.42),
                    Column("Status", "l"),
                    Column("Attempt"),
                    Column("Reason", "p", 0.36),
                ],
                [
                    [
                        Cell(p["name"], code=True),
                        Cell(p["status"], bold=p["status"] == "failed"),
                        Cell(str(p["attempt"]) if p["attempt"] else "—"),
                        Cell(p["reason"] or "—"),
                    ]
                    for p in probs
                ],
                small=True,
            )
        )
    else:
        sec.add(Para(text("Every planned cell is done.")))
    return sec

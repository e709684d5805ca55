"""The derived views of a results directory, computed from the truth (the event log through
the reducer, and the per-cell part files). The store writes them; the report and the
console compute them the same way, so no reader ever depends on a view file being current.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import polars as pl

from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.records import ENERGY_COLUMNS, GPU_CONDITION_COLUMNS
from specbench_tui.results.schema import CELL_IDENTITY, REQUEST_SCHEMA, TELEMETRY_SCHEMA
from specbench_tui.results.state import CampaignState

#: A planned cell's status in ``cells.parquet``; "never run" is a pending cell of a campaign
#: that ended without running it (aborted, or left out by --only).
VIEW_STATUSES: tuple[str, ...] = ("pending", "running", "done", "failed", "skipped", "never run")


def cell_rows(state: CampaignState, *, simulated: bool | None = None) -> list[dict[str, Any]]:
    """One row per planned cell, whatever its status: identity, attempt, status, reason and,
    for a finished cell, the figures its ``cell_finished`` event recorded."""
    sim = state.simulated if simulated is None else simulated
    rows = []
    for c in state.cells.values():
        planned = c.cell
        g = state.groups.get(c.group)
        row: dict[str, Any] = {
            "cell_id": c.id,
            "name": c.name,
            "group": c.group,
            "host": c.host,
            "config": c.config,
            "tp": c.tp,
            "workload": c.workload,
            "kind": c.kind,
            "prompt_set": planned.prompt_set if planned else None,
            "max_tokens": planned.max_tokens if planned else None,
            "concurrency": planned.concurrency if planned else None,
            # A matrix axis where a workload lists several (``temperature = [0, 1]``).
            "temperature": planned.temperature if planned else None,
            "run": planned.run if planned else 1,  # which of the plan's ``[campaign] runs``
            # The accept length its server was forced to (``forced_accept``); null: real.
            "forced_accept": planned.forced_accept if planned else None,
            "attempt": c.attempt,
            "status": view_status(state, c.status),
            "reason": c.reason or None,
            "check": c.check_failed or None,  # why its config failed a correctness check
            "simulated": sim,
            # Placed beside other servers on the host's free GPUs (``[campaign] pack``): its
            # figures carry the neighbours' load; a ``.solo`` control ran alone.
            "packed": bool(g is not None and g.group is not None and g.group.packed),
        }
        if c.status == "done":
            # Null until its cell_energy, if ever.
            row.update(dict.fromkeys((*ENERGY_COLUMNS, *GPU_CONDITION_COLUMNS)))
            row.update(c.figures)
        rows.append(row)
    return rows


def view_status(state: CampaignState, status: str) -> str:
    if status == "pending" and state.finished:
        return "never run"
    return status


def cells_frame(state: CampaignState) -> pl.DataFrame:
    rows = cell_rows(state)
    if not rows:
        return pl.DataFrame({k: [] for k in (*CELL_IDENTITY, "attempt", "status")})
    return pl.DataFrame(rows, infer_schema_length=None)


def counted_attempts(state: CampaignState) -> dict[str, int]:
    """The attempt whose rows count for each finished cell (earlier attempts are kept in
    ``requests.parquet`` for the record, never aggregated)."""
    return {c.id: c.attempt for c in state.cells.values() if c.status == "done"}


def part_files(layout: ResultsLayout) -> list[Path]:
    """Every counted-or-not part file of the campaign (interrupted ones are set aside)."""
    if not layout.parts.is_dir():
        return []
    return sorted(p for p in layout.parts.glob("*.parquet") if layout.part_key(p))


def concat_requests(frames: Iterable[pl.DataFrame]) -> pl.DataFrame:
    frames = [f for f in frames if f.height]
    if not frames:
        return pl.DataFrame(schema=REQUEST_SCHEMA)
    return pl.concat(frames, how="diagonal_relaxed")


def telemetry_files(layout: ResultsLayout) -> list[Path]:
    if not layout.telemetry_parts.is_dir():
        return []
    return sorted(layout.telemetry_parts.glob("*.parquet"))


def concat_telemetry(frames: Iterable[pl.DataFrame]) -> pl.DataFrame:
    frames = [f for f in frames if f.height]
    if not frames:
        return pl.DataFrame(schema=TELEMETRY_SCHEMA)
    return pl.concat(frames, how="diagonal_relaxed")

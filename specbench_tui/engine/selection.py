"""Which cells run this time: a pure decision from what the log says and what was asked.

- By default every planned cell the log has not ended runs (new, interrupted or queued ones).
- ``--rerun-failed`` resumes and runs the failed ones again: every cell the log has not
  ended, plus the failed ones (after a crashed or interrupted run, its cells are queued or
  never ran, not failed, and must not be left behind).
- ``--only PATTERN`` narrows either choice to cells whose id or name matches the glob (or
  whose name contains it).
- ``rerun`` (a console's rerun after the end) adds cells by id whatever their status; the
  run queues the ended ones again as a new attempt.
Asking for nothing is an input error, said before anything starts.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

from specbench_tui.errors import InputError
from specbench_tui.results.cells import Cell
from specbench_tui.results.state import CampaignState


def matches(cell: Cell, pattern: str) -> bool:
    return (
        fnmatch.fnmatchcase(cell.id, pattern)
        or fnmatch.fnmatchcase(cell.name, pattern)
        or pattern in cell.name
    )


def select_cells(
    state: CampaignState,
    cells: Iterable[Cell],
    *,
    only: str | None = None,
    rerun_failed: bool = False,
    rerun: Iterable[str] = (),
    where: str = "",
) -> list[str]:
    """Ids of the cells to run, in plan order; ``where`` names the results for messages."""
    cells = list(cells)

    def status(c: Cell) -> str:
        known = state.cells.get(c.id)
        return known.status if known is not None else "pending"

    wanted = ("pending", "running", "failed") if rerun_failed else ("pending", "running")
    chosen = [c for c in cells if status(c) in wanted]
    if rerun_failed and not chosen:
        raise InputError(
            f"{where}: no failed cells to rerun, and none left to run (every cell is done "
            "or skipped); --rerun IDS runs chosen cells again"
        )
    if only:
        if not any(matches(c, only) for c in cells):
            raise InputError(
                f"--only {only!r} matches no cell id or name; see the names with --dry-run"
            )
        chosen = [c for c in chosen if matches(c, only)]
    again = set(rerun)
    if again:
        keep = {c.id for c in chosen} | again
        chosen = [c for c in cells if c.id in keep]
    return [c.id for c in chosen]

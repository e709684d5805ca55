"""``--cleanup DIR`` (and the check after ``--report DIR``): stop every process a crashed
run of these results left on this machine, and say what, by name and pid.

What a run started is on record in ``DIR/servers/`` (``server_records``) and marked in its
environment (``local_leftovers``). A server whose starting tool still runs belongs to that
run and is left alone, so a cleanup beside a live campaign changes nothing of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from specbench_tui.hosts.local_leftovers import (
    find_local_leftovers,
    records_dir,
    results_owner,
    stop_local_leftover,
)
from specbench_tui.hosts.server_records import read_records

CLEANUP_GRACE_S = 10.0


@dataclass
class Cleanup:
    """What a cleanup did: one line per server, and whether everything left is gone."""

    lines: list[str] = field(default_factory=list)
    stopped: int = 0  # processes stopped
    failed: bool = False


async def cleanup_results(root: Path, grace_s: float = CLEANUP_GRACE_S) -> Cleanup:
    owner = results_owner(root)
    out = Cleanup()
    for lo in find_local_leftovers(owner, None):
        why = await stop_local_leftover(lo, grace_s)
        if why is None:
            out.stopped += len(lo.procs)
            out.lines.append(
                f"stopped {lo.group}'s server left running by an earlier run ({lo.describe()})"
            )
        else:
            out.failed = True
            out.lines.append(
                f"cannot stop {lo.group}'s server left running by an earlier run "
                f"({lo.describe()}): {why}"
            )
    for _, rec in read_records(records_dir(owner)):
        if rec.tool_alive():
            out.lines.append(
                f"{rec.group}'s server (pid {rec.pid}) belongs to the run still going "
                f"(pid {rec.tool_pid}): left alone"
            )
    return out

"""What a cell's attempt amounts to once it stopped: a pure judgement, so the rules can be
tested without a server, and the same facts always give the same answer."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal

from specbench_tui.engine.run_control import StopReason

Outcome = Literal["done", "failed", "requeue", "skipped"]
SERVER_DIED = "server died"  # the reason a cell is set aside when its server died under it


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    reason: str = ""


def judge(
    *,
    requests: int,
    errors: list[str],
    complete: bool,
    stop: StopReason | None,
    server_alive: bool,
    max_error_share: float,
    link_dropped: bool = False,
    server_dead: bool = False,
) -> Verdict:
    """Judge one attempt.

    ``errors`` holds the error text of each failed request; ``complete`` says every planned
    request was measured; ``stop`` is why the cell was asked to stop early, if it was;
    ``link_dropped`` says the link to the server's host dropped while it ran;
    ``server_dead`` says a request was lost to a server that went away (the engine said it
    is dead, or the connection went and the server did not come back healthy).

    A server that died is an infrastructure fault, never a result: the attempt is set aside
    (its rows kept, never counted) and runs again on a new server; the group, not the cell,
    gives up once its restarts are spent.
    """
    if link_dropped and stop != "skip":
        # The link, not the server, cut the requests: set aside like a crash, run again
        # once the host is back (whether its server survived is not known yet).
        return Verdict("requeue", "host unreachable")
    if stop == "skip":
        return Verdict("skipped", "skipped while running")
    if not server_alive or server_dead:
        return Verdict("requeue", SERVER_DIED)
    if stop is not None or not complete:
        # Pause, abort or a group restart: the cell runs again whole as a new attempt.
        return Verdict("requeue", "aborted" if stop == "abort" else "interrupted")
    if requests and len(errors) / requests > max_error_share:
        common = Counter(errors).most_common(1)[0][0]
        return Verdict(
            "failed", f"{len(errors)} of {requests} requests failed; most often: {common}"
        )
    return Verdict("done")


def restart_allowed(restarts: int, limit: int) -> bool:
    """Whether a group whose server died gets another server (``limit`` restarts)."""
    return restarts < limit

"""Stop what a test session started and left: sshd servers, systemd namespaces, Slurm daemons,
campaigns and servers, even when the session was killed before its teardown.

Every process the suite starts inherits ``SPECBENCH_TEST_SESSION`` (set by conftest.py, or by
``.ci/run`` for the whole run) naming its owner as ``pid:starttime``. A sweep stops each
process carrying a mark (and everything below it: a systemd namespace's init, whose
``env -i`` drops the mark, is the child of a marked ``unshare``), never the sweeping process or
its ancestors. Run as ``python3 tests/support/sweep.py MARK`` (what ``.ci/run``'s trap does);
only the standard library is used.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

MARK = "SPECBENCH_TEST_SESSION"


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state is [0], ppid [1])."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def mark_of(pid: int) -> str:
    """The mark naming this process, as ``pid:starttime``."""
    fields = _stat(pid)
    return f"{pid}:{fields[19] if fields else 0}"


def worker_mark(parent: str, pid: int) -> str:
    """The mark of a test worker (pytest-xdist) under the session ``parent``: its own, so that
    one worker's sweep never stops what its sibling runs, and below the parent's, so that a
    sweep of the whole session (``.ci/run``'s trap) still finds what every worker started."""
    return f"{parent}/{mark_of(pid)}"


def _in_session(mark: str, session: str | None) -> bool:
    return session is not None and (mark == session or mark.startswith(session + "/"))


def _part_alive(part: str) -> bool:
    pid, _, start = part.partition(":")
    return pid.isdigit() and mark_of(int(pid)) == f"{pid}:{start}" and start != "0"


def owner_alive(mark: str, *, last_only: bool = False) -> bool:
    """Whether an owner of the mark still runs: any of its parts (a session, a worker of it),
    since a live session sweeps its own at its end; with ``last_only`` the last part alone
    (a dead worker of a live session, which only that session may sweep before its end)."""
    parts = mark.split("/")
    return any(_part_alive(p) for p in (parts[-1:] if last_only else parts))


def _marks() -> dict[int, str]:
    found = {}
    key = MARK.encode() + b"="
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for var in (entry / "environ").read_bytes().split(b"\0"):
                if var.startswith(key):
                    found[int(entry.name)] = var[len(key) :].decode(errors="replace")
                    break
    return found


def _parents() -> dict[int, int]:
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields and fields[0] not in ("Z", "X"):
                out[int(entry.name)] = int(fields[1])
    return out


def _ancestors(pid: int, parents: dict[int, int]) -> set[int]:
    out = set()
    while pid > 1 and pid not in out:
        out.add(pid)
        pid = parents.get(pid, 0)
    return out


def left_over(
    mark: str | None = None, *, dead_owners: bool = False, within: str | None = None
) -> list[int]:
    """Live processes of the session ``mark`` and its workers (or of every session whose
    owners are all gone; ``within`` a session: of its marks whose last owner is gone), with
    everything below them; never this process, its ancestors or their other children (what
    runs beside pytest in ``.ci/run``, its trap included). Two suites side by side never
    sweep each other's: a mark of a live session is never another's to stop."""
    parents = _parents()
    ancestors = _ancestors(os.getpid(), parents)
    spare = ancestors | {p for p, pp in parents.items() if pp in ancestors - {os.getpid()}}
    roots = {
        pid
        for pid, m in _marks().items()
        if pid in parents
        and pid not in spare
        and (_in_session(m, mark) or (dead_owners and _dead(m, within)))
    }
    below = set(roots)
    grew = True
    while grew:
        more = {p for p, pp in parents.items() if pp in below} - below
        below |= more
        grew = bool(more)
    return sorted(below - spare)


def _dead(mark: str, within: str | None) -> bool:
    if within is None:
        return not owner_alive(mark)
    return mark.startswith(within + "/") and not owner_alive(mark, last_only=True)


def sweep(
    mark: str | None = None,
    *,
    dead_owners: bool = False,
    within: str | None = None,
    grace_s: float = 5.0,
) -> list[str]:
    """SIGTERM what is left, SIGKILL what outlives ``grace_s``; what was found, described."""
    pids = left_over(mark, dead_owners=dead_owners, within=within)
    said = [f"{pid} {_comm(pid)}" for pid in pids]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    return said


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: sweep.py MARK")
    for line in sweep(sys.argv[1]):
        print(f"stopped what the test session left: {line}")

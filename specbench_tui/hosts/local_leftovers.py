"""Servers an earlier run left running on this machine (local and simulated hosts).

A local server is killed with the tool (PR_SET_PDEATHSIG), but the signal reaches only the
server's own process: TP workers it started live on, holding GPU memory, and so does a
server whose fork raced the tool's death. Every server started here carries a mark in its
environment (inherited by its workers) naming the run's results, the plan host and the
group, so the next run of the same results finds what is left by reading /proc, stops it
and says so. A results directory is owned by one running engine at a time (the store's
lock): a marked process of another pid is always a leftover.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

SERVER_MARK_ENV = "SPECBENCH_SERVER"


def results_owner(root: str | os.PathLike[str]) -> str:
    """The owner a run of the results directory ``root`` marks its servers with."""
    return str(Path(root).resolve())


def server_mark(owner: str, host: str, group: str) -> str:
    """The mark a server started now carries: its run's results, host, group and the pid of
    the tool that started it."""
    return json.dumps([owner, host, group, os.getpid()], separators=(",", ":"))


@dataclass(frozen=True)
class LocalLeftover:
    group: str
    pgid: int
    pids: tuple[int, ...]

    def describe(self) -> str:
        n = len(self.pids)
        return f"process group {self.pgid}, {n} process{'es' * (n != 1)}"


def _mark_of(pid: int) -> list[object] | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    key = SERVER_MARK_ENV.encode() + b"="
    for item in env.split(b"\0"):
        if item.startswith(key):
            with contextlib.suppress(ValueError):
                mark = json.loads(item[len(key) :])
                if isinstance(mark, list) and len(mark) == 4:
                    return mark
    return None


def _pgid_and_state(pid: int) -> tuple[int, str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return (int(fields[2]), fields[0]) if len(fields) > 2 else None


def marked_processes(owner: str, host: str | None = None) -> list[tuple[int, str]]:
    """(pid, group) of every live process carrying the mark of ``owner``'s servers (of one
    host, or of any), started by another process than this one."""
    if not owner:
        return []
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        mark = _mark_of(pid)
        if mark is None or mark[0] != owner or (host is not None and mark[1] != host):
            continue
        stat = _pgid_and_state(pid)
        if stat is None or stat[1] == "Z" or mark[3] == os.getpid():
            continue
        found.append((pid, str(mark[2])))
    return found


def find_local_leftovers(owner: str, host: str) -> list[LocalLeftover]:
    """The servers (by process group) a dead run of ``owner`` left for ``host``."""
    groups: dict[int, tuple[str, list[int]]] = {}
    for pid, group in marked_processes(owner, host):
        stat = _pgid_and_state(pid)
        if stat is not None:
            groups.setdefault(stat[0], (group, []))[1].append(pid)
    return [LocalLeftover(g, pgid, tuple(sorted(p))) for pgid, (g, p) in sorted(groups.items())]


def _alive(pids: tuple[int, ...]) -> bool:
    return any((s := _pgid_and_state(p)) is not None and s[1] != "Z" for p in pids)


def _signal(lo: LocalLeftover, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(lo.pgid, sig)
    for pid in lo.pids:  # one that left the group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


async def stop_local_leftover(lo: LocalLeftover, grace_s: float) -> str | None:
    """SIGTERM, then SIGKILL after ``grace_s``; None once nothing of it lives, else why."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        _signal(lo, sig)
        deadline = time.monotonic() + wait_s
        while _alive(lo.pids):
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.05)
        else:
            return None
    return "still running after SIGKILL"

"""Servers an earlier run left running on this machine (local and simulated hosts).

A local server is killed with the tool (PR_SET_PDEATHSIG), but the signal reaches only the
server's own process: TP workers and an engine core it started live on, holding GPU memory,
and so does a server whose fork raced the tool's death. Two marks find them. Each server is on
record in the results directory the moment it starts (``server_records``: its session, which
every process it makes inherits, whatever it renames itself to), and it carries a mark in its
environment (inherited by its workers) naming the run's results, the plan host and the group,
which finds a process that left the session. The next run of the same results, ``--report``
and ``--cleanup`` stop what is left and say what, by name and pid. A results directory is
owned by one running engine at a time (the store's lock); a server whose starting tool still
runs is never touched (``--cleanup`` beside a live run leaves that run's servers alone).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from specbench_tui.hosts.server_records import (
    ProcStat,
    all_processes,
    describe_processes,
    drop_record,
    proc_stat,
    read_records,
    signal_all,
)
from specbench_tui.results.layout import ResultsLayout

SERVER_MARK_ENV = "SPECBENCH_SERVER"


def results_owner(root: str | os.PathLike[str]) -> str:
    """The owner a run of the results directory ``root`` marks its servers with."""
    return str(Path(root).resolve())


def server_mark(owner: str, host: str, group: str) -> str:
    """The mark a server started now carries: its run's results, host, group and the pid of
    the tool that started it."""
    return json.dumps([owner, host, group, os.getpid()], separators=(",", ":"))


def records_dir(owner: str) -> Path:
    """Where the servers of the run whose results are ``owner`` are on record."""
    return ResultsLayout(Path(owner)).servers


@dataclass(frozen=True)
class LocalLeftover:
    """One server left running: its group, its process group (and session) and what lives
    of it; ``records`` are the record files that go once it is stopped."""

    group: str
    pgid: int
    procs: tuple[ProcStat, ...]
    records: tuple[Path, ...] = field(default=())
    sid: int | None = None

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(sorted(p.pid for p in self.procs))

    def describe(self) -> str:
        return f"process group {self.pgid}, {describe_processes(list(self.procs))}"

    def alive(self) -> list[ProcStat]:
        """What of it still lives: its processes, and any its session made since."""
        table = all_processes()
        pids = set(self.pids)
        return [
            p
            for p in table
            if (p.pid in pids or (self.sid is not None and p.sid == self.sid))
            and p.state not in ("Z", "X")
            and (p.pid in pids or p.start_ticks >= min(q.start_ticks for q in self.procs))
        ]


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


def _tool_runs(pid: object) -> bool:
    """Whether the tool process a mark names runs (this one, or another alive)."""
    if not isinstance(pid, int):
        return False
    if pid == os.getpid():
        return True
    st = proc_stat(pid)
    return st is not None and st.state not in ("Z", "X")


def marked_processes(owner: str, host: str | None = None) -> list[tuple[int, str]]:
    """(pid, group) of every live process carrying the mark of ``owner``'s servers (of one
    host, or of any), started by a tool process that no longer runs."""
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
        st = proc_stat(pid)
        if st is None or st.state in ("Z", "X") or _tool_runs(mark[3]):
            continue
        found.append((pid, str(mark[2])))
    return found


def find_local_leftovers(owner: str, host: str | None) -> list[LocalLeftover]:
    """The servers (by process group) a dead run of ``owner`` left for ``host`` (any host
    when None): from the records of the results directory, then the environment marks.
    A record whose server left nothing is dropped on the way."""
    if not owner:
        return []
    table = all_processes()
    by_pid = {p.pid: p for p in table}
    found: dict[int, tuple[str, dict[int, ProcStat], list[Path], int | None]] = {}
    for path, rec in read_records(records_dir(owner)):
        if host is not None and rec.host != host:
            continue
        if rec.tool_alive():
            continue  # a live run's server (this one's, or another process's)
        members = rec.members(table)
        if not members:
            drop_record(path)
            continue
        entry = found.setdefault(rec.pid, (rec.group, {}, [], rec.sid))
        entry[1].update({p.pid: p for p in members})
        entry[2].append(path)
    for pid, group in marked_processes(owner, host):
        st = by_pid.get(pid) or proc_stat(pid)
        if st is None:
            continue
        key = st.pgid if st.pgid in found else (st.sid if st.sid in found else st.pgid)
        found.setdefault(key, (group, {}, [], None))[1][pid] = st
    return [
        LocalLeftover(group, pgid, tuple(procs.values()), tuple(paths), sid)
        for pgid, (group, procs, paths, sid) in sorted(found.items())
    ]


async def stop_local_leftover(lo: LocalLeftover, grace_s: float) -> str | None:
    """SIGTERM, then SIGKILL after ``grace_s``; None once nothing of it lives (its records
    dropped), else why."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        left = lo.alive()
        signal_all(lo.pgid, [p.pid for p in left], sig)
        deadline = time.monotonic() + wait_s
        while left := lo.alive():
            if time.monotonic() >= deadline:
                break
            signal_all(lo.pgid, [p.pid for p in left], sig)  # one forked meanwhile
            await asyncio.sleep(0.05)
        else:
            for path in lo.records:
                drop_record(path)
            return None
    return f"still running after SIGKILL: {describe_processes(lo.alive())}"

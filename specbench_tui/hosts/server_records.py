"""Every server this machine starts, on record in the results directory the moment it starts.

A local server runs in a session of its own (``start_new_session``): its session id is the
leader's pid, and every process it makes inherits it, whatever it renames itself to. An
engine may rename its engine core and workers (``ENGINE::EngineCore``), which also wipes what
``/proc/<pid>/environ`` shows, so an environment mark alone finds only the processes that did
not rename; the session does not depend on it. A record names the session and process group,
the leader's start time (a pid that came back for another process is not ours), the machine's
boot and the tool process that started it. The record goes once the stop has seen nothing of
the server left; a crash of the tool, or a stop that failed, leaves it for the next run of the
results, ``--report`` and ``--cleanup``, which stop what is left and say what, by name and pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ProcStat:
    """What ``/proc/<pid>/stat`` says of one process."""

    pid: int
    name: str
    state: str
    ppid: int
    pgid: int
    sid: int
    start_ticks: int  # clock ticks after boot: with the pid, names one process for good


def proc_stat(pid: int) -> ProcStat | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    head, _, rest = raw.rpartition(")")
    fields = rest.split()
    if len(fields) < 20:
        return None
    name = head.split("(", 1)[1] if "(" in head else "?"
    return ProcStat(
        pid, name, fields[0], int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])
    )


def all_processes() -> list[ProcStat]:
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            st = proc_stat(int(entry.name))
            if st is not None:
                out.append(st)
    return out


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def same_process(pid: int, start_ticks: int) -> bool:
    """Whether ``pid`` is still the process that started at ``start_ticks`` (and runs)."""
    st = proc_stat(pid)
    return st is not None and st.start_ticks == start_ticks and st.state not in ("Z", "X")


@dataclass(frozen=True)
class ServerRecord:
    """One local server as started: its host and group in the plan, its leader's pid (its
    process group and session id), when the leader started, and the tool that started it."""

    host: str
    group: str
    pid: int
    start_ticks: int
    boot: str
    tool_pid: int
    tool_ticks: int
    port: int = 0
    command: list[str] = field(default_factory=list)
    started_at: float = 0.0

    @property
    def sid(self) -> int:
        return self.pid  # start_new_session: the leader's pid names its session and group

    def tool_alive(self) -> bool:
        """Whether the tool that started it still runs (then it is not left over)."""
        return self.boot == boot_id() and same_process(self.tool_pid, self.tool_ticks)

    def members(self, table: list[ProcStat] | None = None) -> list[ProcStat]:
        """The live processes of the server: its session's or its process group's, started
        no earlier than its leader (an id reused after the server ended names another)."""
        if self.boot != boot_id():
            return []  # the machine rebooted: nothing of it can run
        return [
            p
            for p in (table if table is not None else all_processes())
            if (p.sid == self.sid or p.pgid == self.pid)
            and p.start_ticks >= self.start_ticks
            and p.state not in ("Z", "X")
        ]


def new_record(
    host: str, group: str, pid: int, port: int = 0, command: list[str] | None = None
) -> ServerRecord:
    """The record of a server whose leader ``pid`` this process started just now."""
    me, leader = proc_stat(os.getpid()), proc_stat(pid)
    return ServerRecord(
        host=host,
        group=group,
        pid=pid,
        start_ticks=leader.start_ticks if leader else 0,
        boot=boot_id(),
        tool_pid=os.getpid(),
        tool_ticks=me.start_ticks if me else 0,
        port=port,
        command=list(command or []),
        started_at=time.time(),
    )


def write_record(directory: Path, rec: ServerRecord | RemoteRecord) -> Path:
    """Durably, before anything else is done with the server: a crash right after the start
    must still find it."""
    directory.mkdir(parents=True, exist_ok=True)
    where = "ssh" if isinstance(rec, RemoteRecord) else rec.pid
    path = directory / f"{rec.group}.{where}.json"
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(asdict(rec), f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return path


@dataclass(frozen=True)
class RemoteRecord:
    """One server started on an SSH host: how the host is reached (the plan's destination
    and the SSH config the run used), the server's process group (``pid``, process mode) or
    unit (systemd), and its launch mark, which tells it from whatever may reuse the pid or
    the unit name later."""

    host: str
    group: str
    destination: str
    mark: str
    ssh_config: str | None = None
    pid: int | None = None
    unit: str | None = None
    started_at: float = 0.0


def _read(directory: Path, kind: type, remote: bool) -> list[tuple[Path, Any]]:
    """Every readable record of one kind; one that cannot be read is left where it is (a
    later version may know it)."""
    out: list[tuple[Path, Any]] = []
    if not directory.is_dir():
        return out
    known = set(kind.__dataclass_fields__)
    for path in sorted(directory.glob("*.json")):
        try:
            doc: Any = json.loads(path.read_text())
            if ("destination" in doc) != remote:
                continue
            out.append((path, kind(**{k: v for k, v in doc.items() if k in known})))
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    return out


def read_records(directory: Path) -> list[tuple[Path, ServerRecord]]:
    """The local servers on record."""
    return _read(directory, ServerRecord, remote=False)


def read_remote_records(directory: Path) -> list[tuple[Path, RemoteRecord]]:
    """The servers on record that run on SSH hosts."""
    return _read(directory, RemoteRecord, remote=True)


def drop_record(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def describe_processes(procs: list[ProcStat]) -> str:
    """ "3 processes: python3 (pid 101), ENGINE::EngineCore (pid 130), ..."."""
    n = len(procs)
    named = ", ".join(f"{p.name} (pid {p.pid})" for p in sorted(procs, key=lambda p: p.pid))
    return f"{n} process{'es' * (n != 1)}: {named}"


def signal_all(pgid: int, pids: list[int], sig: signal.Signals) -> None:
    """``sig`` to the process group and to each pid (one that left the group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)

"""``--cleanup DIR`` (and the check after ``--report DIR``): stop every process a crashed
run of these results left running, on this machine and on its SSH hosts, and say what, by
name and pid.

What a run started is on record in ``DIR/servers/`` (``server_records``), and a local server
is marked in its environment too (``local_leftovers``). A server whose starting tool still
runs belongs to that run and is left alone, so a cleanup beside a live campaign changes
nothing of it; a server on an SSH host is stopped only while it still carries the launch mark
on record (a pid or unit name reused since is someone else's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from specbench_tui.hosts.backends.ssh.remote_process import stop_process_group
from specbench_tui.hosts.backends.ssh.remote_service import mark_owner
from specbench_tui.hosts.backends.ssh.systemd import ACTIVE_STATES, show_unit, stop_unit
from specbench_tui.hosts.local_leftovers import (
    find_local_leftovers,
    records_dir,
    results_owner,
    stop_local_leftover,
)
from specbench_tui.hosts.server_records import (
    RemoteRecord,
    drop_record,
    read_records,
    read_remote_records,
)
from specbench_tui.hosts.service import ServiceError
from specbench_tui.hosts.shell import quote
from specbench_tui.hosts.ssh import SshConnection, SshError

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
    remote: dict[tuple[str, str | None], list[tuple[Path, RemoteRecord]]] = {}
    for path, r in read_remote_records(records_dir(owner)):
        remote.setdefault((r.destination, r.ssh_config), []).append((path, r))
    for (destination, config), recs in remote.items():
        await _cleanup_host(destination, config, recs, grace_s, out)
    return out


# The live processes of process group or session $P: "pid name" per line.
_MEMBERS = (
    'for s in /proc/[0-9]*/stat; do read -r l < "$s" 2>/dev/null || continue; '
    "c=${l#*\\(}; c=${c%\\)*}; set -- ${l##*) }; "
    '{ [ "$3" = "$P" ] || [ "$4" = "$P" ]; } && [ "$1" != Z ] || continue; '
    'p=${s#/proc/}; printf \'%s %s\\n\' "${p%/stat}" "$c"; done'
)
# The processes of unit $U's cgroup (cgroup v2, or the named systemd hierarchy of v1).
_UNIT_MEMBERS = (
    'cg=$(systemctl show -p ControlGroup --value "$U"); [ -n "$cg" ] || exit 0; '
    "for d in /sys/fs/cgroup/unified$cg /sys/fs/cgroup/systemd$cg /sys/fs/cgroup$cg; do "
    '[ -r "$d/cgroup.procs" ] || continue; for p in $(cat "$d/cgroup.procs"); do '
    'printf \'%s %s\\n\' "$p" "$(cat /proc/$p/comm 2>/dev/null)"; done; break; done'
)
# The wrapper's $0 (the launch mark) of process $P, when it lives.
_MARK_OF = "tr '\\0' '\\n' < /proc/$P/cmdline 2>/dev/null | sed -n 4p"


def _named(stdout: str) -> list[str]:
    out = []
    for line in stdout.splitlines():
        pid, _, name = line.strip().partition(" ")
        if pid.isdigit():
            out.append(f"{name or '?'} (pid {pid})")
    return out


async def _cleanup_host(
    destination: str,
    config: str | None,
    recs: list[tuple[Path, RemoteRecord]],
    grace_s: float,
    out: Cleanup,
) -> None:
    ssh = SshConnection(destination, config=config, reconnect_timeout_s=30.0)
    try:
        for path, rec in recs:
            owner = mark_owner(rec.mark)
            if owner is not None and owner.runs():
                out.lines.append(
                    f"{rec.group}'s server on {destination} belongs to the run still going "
                    f"(pid {owner.pid}): left alone"
                )
                continue
            try:
                names = await _stop_remote(ssh, rec, grace_s)
            except (SshError, ServiceError) as e:
                out.failed = True
                out.lines.append(
                    f"cannot stop {rec.group}'s server on {destination}: {e}; kept on record"
                )
                continue
            drop_record(path)
            if names:
                out.stopped += len(names)
                n = len(names)
                out.lines.append(
                    f"stopped {rec.group}'s server left running on {destination} by an earlier "
                    f"run ({n} process{'es' * (n != 1)}: {', '.join(names)})"
                )
    finally:
        await ssh.close()


async def _stop_remote(ssh: SshConnection, rec: RemoteRecord, grace_s: float) -> list[str]:
    """Stop the recorded server if it still runs under its mark; what it was, by name."""
    if rec.unit is not None:
        state = await show_unit(ssh, rec.unit)
        if state.get("ActiveState") not in ACTIVE_STATES or state.get("Description") != rec.mark:
            return []
        res = await ssh.run(f"U={quote(rec.unit)}; {_UNIT_MEMBERS}", idempotent=True)
        await stop_unit(ssh, rec.unit, grace_s)
        return _named(res.stdout)
    if rec.pid is None:
        return []
    res = await ssh.run(f"P={int(rec.pid)}; {_MARK_OF}", idempotent=True)
    if res.stdout.strip() != rec.mark:
        return []  # gone, or the pid is another process's now
    res = await ssh.run(f"P={int(rec.pid)}; {_MEMBERS}", idempotent=True)
    await stop_process_group(ssh, rec.pid, grace_s)
    return _named(res.stdout)

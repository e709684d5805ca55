"""Servers an earlier run of a campaign left running on an SSH host (this tool was killed, the
machine running it lost power): found by their pid files in the workdir or by their transient
units, told apart from anything else by the launch mark they carry.

A resumed run takes over the one it is about to start anyway (same group, same command line,
healthy: no 15-minute start-up, no GPUs freed and taken again) and stops every other one, so
no GPU is held by a server nobody follows. Which is which, and why, is said in a notice.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Literal

from specbench_tui.hosts.backends.ssh.remote_process import (
    ALIVE_FN,
    WRAPPER,
    campaign_files,
    stop_process_group,
)
from specbench_tui.hosts.backends.ssh.systemd import ACTIVE_STATES, parse_show, stop_unit, unit_name
from specbench_tui.hosts.shell import remote_path
from specbench_tui.hosts.ssh import SshConnection

MARK_PREFIX = "specbench:"


@dataclass(frozen=True)
class Leftover:
    """One server found running: its group, how it is reached (pid or unit) and its launch
    mark ("" for one started by a version of the tool that set none)."""

    group: str
    mark: str
    pid: int | None = None
    unit: str | None = None
    # False for a pid file where versions before the campaign's own folder kept it: its
    # group's start looks in that folder and cannot take it over, so it is stopped.
    adoptable: bool = True

    def describe(self) -> str:
        return self.unit if self.unit else f"pid {self.pid}"


def belongs(mark: str, campaign: str, group: str, group_ids: Collection[str]) -> bool:
    """A server is this campaign's when its mark says so; one with no mark (an older
    version's) when its name is one of the campaign's groups."""
    if mark.startswith(MARK_PREFIX):
        return mark.startswith(f"{MARK_PREFIX}{campaign}:{group}:")
    return group in group_ids


def pid_files_script(workdir: str) -> str:
    """Shell: ``group<TAB>pid<TAB>mark<TAB>script`` for each pid file in the workdir whose
    process group still lives (the script: the leader's ``sh -c`` text, the wrapper when
    the process is one this tool started)."""
    base = workdir.rstrip("/") or "/"
    return (
        f"{ALIVE_FN}cd {remote_path(base)} 2>/dev/null || exit 0; "
        'for f in *.pid; do [ -s "$f" ] || continue; read -r p < "$f"; '
        'case "$p" in ""|*[!0-9]*) continue;; esac; alive "$p" || continue; '
        "m=$(tr '\\0' '\\n' < /proc/$p/cmdline 2>/dev/null | sed -n 4p); "
        "w=$(tr '\\0' '\\n' < /proc/$p/cmdline 2>/dev/null | sed -n 3p); "
        'printf "%s\\t%s\\t%s\\t%s\\n" "${f%.pid}" "$p" "$m" "$w"; done'
    )


async def find_leftovers(
    ssh: SshConnection,
    *,
    services: Literal["systemd", "process"],
    campaign: str,
    workdir: str,
    group_ids: Collection[str],
) -> list[Leftover]:
    """This campaign's servers running on the host, however an earlier run left them."""
    if services == "process":
        # The campaign's folder, and the workdir itself, where versions before the folder
        # kept every campaign's pid files (the mark tells whose each is).
        script = "; ".join(
            f"( {pid_files_script(d)} ) | awk '{{print \"{tag}\\t\" $0}}'"
            for tag, d in (("new", campaign_files(workdir, campaign)), ("old", workdir))
        )
        res = await ssh.run(script, timeout_s=60.0, idempotent=True)
        found = []
        for line in res.stdout.splitlines():
            tag, _, line = line.partition("\t")
            group, _, rest = line.partition("\t")
            pid, _, rest = rest.partition("\t")
            mark, _, script = rest.partition("\t")
            # a pid file whose pid now names a process not started by the wrapper (a reboot
            # reused it) is stale: that process is not ours to stop
            if pid.isdigit() and script == WRAPPER and belongs(mark, campaign, group, group_ids):
                found.append(Leftover(group, mark, pid=int(pid), adoptable=tag == "new"))
        return found
    prefix = unit_name(campaign, "x")[: -len("x.service")]
    listing = ["systemctl", "list-units", "--all", "--plain", "--no-legend", "--no-pager"]
    res = await ssh.run([*listing, f"{prefix}*.service"], timeout_s=60.0, idempotent=True)
    found = []
    for line in res.stdout.splitlines():
        words = line.split()
        if not words or not words[0].startswith(prefix) or not words[0].endswith(".service"):
            continue
        unit = words[0]
        group = unit[len(prefix) : -len(".service")]
        shown = await ssh.run(
            ["systemctl", "show", "-p", "ActiveState,Description", unit],
            timeout_s=30.0,
            idempotent=True,
        )
        state = parse_show(shown.stdout, ("ActiveState", "Description"))
        mark = state.get("Description", "")
        mark = mark if mark.startswith(MARK_PREFIX) else ""
        if state.get("ActiveState") in ACTIVE_STATES and belongs(mark, campaign, group, group_ids):
            found.append(Leftover(group, mark, unit=unit))
    return found


async def stop_leftover(
    ssh: SshConnection, leftover: Leftover, grace_s: float, say: Callable[[str], None] | None = None
) -> None:
    """Stop it the way its kind stops: its process group, or its unit."""
    if leftover.unit is not None:
        await stop_unit(ssh, leftover.unit, grace_s, say)
    elif leftover.pid is not None:
        await stop_process_group(ssh, leftover.pid, grace_s, say, leftover.group)


__all__ = [
    "Leftover",
    "belongs",
    "find_leftovers",
    "pid_files_script",
    "stop_leftover",
]

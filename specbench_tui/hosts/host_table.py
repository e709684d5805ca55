"""The keys of a ``[hosts.NAME]`` table that every kind of host shares: its GPUs, how servers
are supervised there, where its scratch lives.

Each kind of host adds one key of its own, named as its backend (an SSH destination,
``local``, ``sim`` or a batch system's table): the backend declares it (``hosts/backends/``)
and the registry builds the plan's ``HostSpec`` from this table and those keys. Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field

from specbench_tui.table_types import MAX_GPUS, Duration, HostText, PlanError, Strict, Worded

# An SSH destination: an alias, user@host, user@host:port, [v6]:port.
SSH_DESTINATION = r"^[A-Za-z0-9_.@:\[\]-]+$"
_DESTINATION = re.compile(SSH_DESTINATION)
# A systemd unit name: no spaces, quotes or shell metacharacters.
UnitName = Annotated[
    str,
    Worded(
        r"^[A-Za-z0-9][A-Za-z0-9:_.@\\-]{0,250}$",
        "{value} has characters that are unsafe in a systemd unit name or a shell command; use "
        "letters, digits, ':', '_', '.', '@' and '-'",
    ),
]


def check_destination(where: tuple[str | int, ...], value: str) -> list[PlanError]:
    """A destination ssh can take (an SSH host's, a batch system's login node)."""
    if _DESTINATION.match(value):
        return []
    return [
        PlanError(
            where,
            f"{value!r} is not an SSH destination; write an alias, user@host or user@host:port",
        )
    ]


class HostTable(Strict):
    """The keys every kind of host shares. The plan's ``HostSpec`` adds one key per registered
    backend (``hosts/backends/__init__.py``): the key that makes a host that kind."""

    # GPUs the campaign may use on this host (on a Slurm host: slurm.gpus_per_node).
    gpus: int = Field(ge=1, le=MAX_GPUS)
    # Physical GPU ids it may use (default 0 .. gpus-1).
    gpu_ids: list[Annotated[int, Field(ge=0, le=MAX_GPUS * 16)]] | None = None
    # How servers are started and supervised: "systemd" (the default over SSH) or "process".
    services: Literal["systemd", "process"] | None = None
    # Scratch directory on the host: logs, pid files, the telemetry agent.
    workdir: HostText = "~/specbench"
    # Foreign systemd services to stop before a group needs their GPUs.
    stop_before: list[UnitName] = []
    # Start the stopped foreign services again when the campaign ends or aborts.
    restore_after: bool = True
    # Shell commands run on the host when a preflight finds something missing (the model gone from
    # /dev/shm after a reboot).
    prepare: list[HostText] = []
    # SSH hosts: how long the host may stay away (link down, sshd restarting, a reboot)
    # before the cells that need it fail; meanwhile its work waits and resumes.
    reconnect_timeout: Duration = 600.0
    speed: float = Field(default=1.0, gt=0)  # sim hosts: compress simulated time

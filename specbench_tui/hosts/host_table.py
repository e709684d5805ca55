"""The ``[hosts.NAME]`` table of a plan: where a host's servers run, and how.

Each kind of host sets one key of its own, named as its backend (``backends.py``: an SSH
destination, ``local``, ``sim`` or a batch system's table); the other keys say how servers
are supervised there.
A new kind of host is its key here, its module and its line in ``backends.py``. Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from specbench_tui.hosts.slurm_table import SlurmSpec
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


class HostSpec(Strict):
    # An SSH destination (an alias of ~/.ssh/config, user@host, user@host:port); exactly one of ssh,
    # local, sim, slurm.
    ssh: HostText | None = None
    # true: servers run on this machine.
    local: bool = False
    # true: the embedded simulated host (a real HTTP server per group that speaks the engine's
    # API, simulated GPUs).
    sim: bool = False
    # A Slurm cluster: each service group runs as a batch job (the table below).
    slurm: SlurmSpec | None = None
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

    @model_validator(mode="before")
    @classmethod
    def _gpus_of_a_node(cls, data: Any) -> Any:
        """On a Slurm host ``gpus`` is what one node has: ``slurm.gpus_per_node``."""
        if isinstance(data, dict) and isinstance(data.get("slurm"), dict) and "gpus" not in data:
            per_node = data["slurm"].get("gpus_per_node")
            if isinstance(per_node, int) and not isinstance(per_node, bool):
                return {**data, "gpus": per_node}
        return data

    @property
    def sim_speed(self) -> float:
        """How much faster than real time this host's simulator runs: its ``speed`` on a sim
        host, and for a rehearsal (``--sim``) of a real host x50 unless it sets one."""
        return self.speed if self.sim or "speed" in self.model_fields_set else 50.0

    @property
    def kind(self) -> str:
        """The host's kind: the backend's name in ``backends.py`` (``sim`` wins, as a
        rehearsal's host does; an SSH host when no other key is set)."""
        if self.sim:
            return "sim"
        if self.slurm is not None:
            return "slurm"
        return "local" if self.local else "ssh"

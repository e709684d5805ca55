"""Which Host class a plan host gets: the one place that knows every kind, so that the
base Host need not import the SSH host built on it."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, Literal

from specbench_tui.hosts.host import Host, HostEvents, SimHost, SshSettings
from specbench_tui.hosts.ssh_host import SshHost
from specbench_tui.results.cells import ServiceGroup


def make_host(
    name: str,
    kind: Literal["local", "sim", "ssh"],
    gpus: int,
    *,
    gpu_ids: Iterable[int] | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    events: HostEvents | None = None,
    telemetry_interval_s: float = 1.0,
    ssh: SshSettings | None = None,
    groups: Iterable[ServiceGroup] = (),
    owner: str = "",
) -> Host:
    """The Host for a plan host of the given kind (``ssh`` settings for an SSH host);
    ``owner`` names the run's results (see ``Host``)."""
    common: dict[str, Any] = {
        "owner": owner,
        "gpu_ids": gpu_ids,
        "events": events,
        "telemetry_interval_s": telemetry_interval_s,
        "groups": [g for g in groups if g.host == name],
    }
    if kind == "sim":
        return SimHost(name, gpus, state_dir=state_dir, **common)
    if kind == "local":
        return Host(name, gpus, **common)
    if ssh is None:
        raise ValueError(f"host {name}: an SSH host needs its ssh settings")
    return SshHost(name, gpus, ssh, **common)

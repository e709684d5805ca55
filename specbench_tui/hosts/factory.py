"""Which Host class a plan host gets, for callers that hold a kind and its settings rather than
a plan (the registry, ``backends.py``, knows every kind)."""

from __future__ import annotations

import os
from collections.abc import Iterable

from specbench_tui.hosts.backends import HostBuild, backend
from specbench_tui.hosts.host import Host, HostEvents, SshSettings
from specbench_tui.results.cells import ServiceGroup


def make_host(
    name: str,
    kind: str,
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
    """The Host for a plan host of the given kind (``ssh`` settings for a remote host);
    ``owner`` names the run's results (see ``Host``)."""
    entry = backend(kind)
    if entry.host is None:
        raise ValueError(f"host {name}: a {kind} host runs batch jobs, not a Host")
    build = HostBuild(
        name,
        gpus,
        gpu_ids=gpu_ids,
        state_dir=state_dir,
        events=events,
        telemetry_interval_s=telemetry_interval_s,
        ssh=ssh,
        groups=groups,
        owner=owner,
    )
    return entry.host(build)

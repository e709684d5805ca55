"""``local = true``: servers run as processes (or user units) on the machine the campaign runs
on, its GPUs read through the telemetry agent here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbench_tui.hosts.backend import Backend, HostBuild

if TYPE_CHECKING:
    from specbench_tui.hosts.host import Host


def _host(b: HostBuild) -> Host:
    from specbench_tui.hosts.host import Host

    return Host(b.name, b.gpus, **b.common())


BACKEND = Backend(
    "local",
    describe=lambda h, _: f"local, {h.services or 'process'}, {h.gpus} GPUs",
    table=bool,
    meaning="true: servers run on this machine.",
    example=True,
    host=_host,
    on_this_machine=True,
    plan_words="local = true",
)

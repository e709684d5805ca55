"""``sim = true``: the embedded simulated host, a real HTTP server per group that speaks the
engine's API over simulated GPUs; every host of a rehearsal (``--sim``) is built as one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbench_tui.hosts.backend import Backend, HostBuild

if TYPE_CHECKING:
    from specbench_tui.hosts.host import Host


def _host(b: HostBuild) -> Host:
    from specbench_tui.hosts.host import SimHost

    return SimHost(b.name, b.gpus, state_dir=b.state_dir, **b.common())


BACKEND = Backend(
    "sim",
    describe=lambda h, _: f"simulated, {h.gpus} GPUs, speed x{h.speed:g}",
    table=bool,
    meaning=(
        "true: the embedded simulated host (a real HTTP server per group that speaks the "
        "engine's API, simulated GPUs)."
    ),
    example=True,
    host=_host,
    simulated=True,
    on_this_machine=True,
    plan_words="sim = true",
)

"""``ssh = "user@host"``: a GPU server reached over SSH, its servers run as systemd units
(``systemd.py``) or detached processes (``remote_process.py``), both on ``remote_service.py``;
the host itself is ``ssh_host.py``. The connection is the shared ``hosts/ssh.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specbench_tui.hosts.backend import Backend, HostBuild
from specbench_tui.hosts.host_table import check_destination
from specbench_tui.table_types import HostText, PlanError

if TYPE_CHECKING:
    from specbench_tui.hosts.host import Host


def _host(b: HostBuild) -> Host:
    from specbench_tui.hosts.backends.ssh.ssh_host import SshHost
    from specbench_tui.hosts.host import SshSettings

    hs = b.table
    settings = SshSettings(
        destination=hs.ssh,
        campaign=b.campaign,
        services=hs.services or "systemd",
        workdir=hs.workdir,
        prepare=tuple(hs.prepare),
        restore_after=hs.restore_after,
        ssh_config=b.options.ssh_config,
        reconnect_timeout_s=hs.reconnect_timeout,
    )
    return SshHost(b.name, b.gpus, settings, **b.common())


def _check(name: str, host: Any) -> list[PlanError]:
    return check_destination(("hosts", name, "ssh"), host.ssh)


BACKEND = Backend(
    "ssh",
    describe=lambda h, _: f"ssh {h.ssh}, {h.services or 'systemd'}, {h.gpus} GPUs",
    table=HostText,
    meaning="An SSH destination (an alias of ~/.ssh/config, user@host, user@host:port).",
    example="gpu@node-1",
    check_table=_check,
    host=_host,
    preflights=True,
    remote=True,
    plan_words='ssh = "user@host"',
    programs=("systemd", "systemctl", "journalctl"),
)

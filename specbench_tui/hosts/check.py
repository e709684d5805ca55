"""``--dry-run --check``: the dry run plus a real preflight of every host of a plan.

Each host is reached as a campaign would reach it (SSH with its host key, the servers'
interpreters and models, the ports, systemd where it is used, the GPU telemetry chain) and
left as it was: nothing is prepared, stopped or started.
"""

from __future__ import annotations

from specbench_tui.hosts.factory import make_host
from specbench_tui.hosts.host import HostReport, SshSettings
from specbench_tui.plan.expand import expand
from specbench_tui.plan.loader import Plan
from specbench_tui.plan.model import HostSpec
from specbench_tui.results.cells import ServiceGroup


def ssh_settings(plan: Plan, name: str, ssh_config: str | None = None) -> SshSettings | None:
    """The SSH settings of a plan host (None for a local or simulated one)."""
    hs: HostSpec = plan.spec.hosts[name]
    if hs.ssh is None:
        return None
    return SshSettings(
        destination=hs.ssh,
        campaign=plan.spec.campaign.name,
        services=hs.services or "systemd",
        workdir=hs.workdir,
        prepare=tuple(hs.prepare),
        restore_after=hs.restore_after,
        ssh_config=ssh_config,
        reconnect_timeout_s=hs.reconnect_timeout,
    )


async def check_hosts(
    plan: Plan, *, sim: bool = False, ssh_config: str | None = None
) -> list[HostReport]:
    """One report per host that has service groups, in plan order."""
    by_host: dict[str, list[ServiceGroup]] = {}
    for g in expand(plan, sim=sim).groups:
        by_host.setdefault(g.host, []).append(g)
    reports = []
    for name, groups in by_host.items():
        hs = plan.spec.hosts[name]
        kind = groups[0].host_kind
        if kind == "slurm":
            from specbench_tui.hosts.slurm import check_slurm

            reports.append(await check_slurm(plan, name, groups, ssh_config))
            continue
        host = make_host(
            name,
            kind,
            hs.gpus,
            gpu_ids=hs.gpu_ids,
            ssh=ssh_settings(plan, name, ssh_config) if kind == "ssh" else None,
            groups=groups,
        )
        try:
            reports.append(await host.check(groups))
        finally:
            await host.close()
    return reports

"""``--dry-run --check``: the dry run plus a real preflight of every host of a plan.

Each host is reached as a campaign would reach it (its connection and host key, the servers'
interpreters and models, the ports, the service manager where one is used, the GPU telemetry
chain, a batch system's queue and a test submission) and left as it was: nothing is prepared,
stopped or started.
"""

from __future__ import annotations

from specbench_tui.engine.url_servers import probe_all, running_urls
from specbench_tui.hosts.backends import REHEARSAL, check_host
from specbench_tui.hosts.host import HostReport
from specbench_tui.hosts.options import HostOptions
from specbench_tui.plan.document import Plan
from specbench_tui.plan.expand import expand
from specbench_tui.results.cells import ServiceGroup


async def check_hosts(
    plan: Plan, *, sim: bool = False, options: HostOptions | None = None
) -> list[HostReport]:
    """One report per host that has service groups, in plan order."""
    by_host: dict[str, list[ServiceGroup]] = {}
    for g in expand(plan, sim=sim).groups:
        # A running server (``url``) is not started on its host: it is asked itself.
        by_host.setdefault(g.host, []).extend([g] if g.url is None else [])
    campaign = plan.spec.campaign.name
    urls = [] if sim else running_urls(plan)
    running = [p.report() for p in (await probe_all(urls)).values()] if urls else []
    return running + [
        await check_host(
            plan.spec.hosts[name],
            name,
            campaign,
            REHEARSAL if sim else plan.spec.hosts[name].kind,
            groups,
            options or HostOptions(),
        )
        for name, groups in by_host.items()
    ]

"""Checks of configs that name a running server (``url``): what starts a server has no
effect on one, and what the tool would do to its own servers it cannot do to this one.

A running server is measured as it is: the tool does not start, stop, restart, move or pack
it, so a launch key on its config, a packed campaign, ``runs`` (a fresh server per run) or a
second TP size (the same server at another size) would each say something that does not
happen. Each is refused at its key path with what to do instead.
"""

from __future__ import annotations

from specbench_tui.hosts.backends import batch_kind
from specbench_tui.plan.check_matrix import matrix_hosts
from specbench_tui.plan.configs import ResolvedConfig
from specbench_tui.plan.expand import excluded
from specbench_tui.plan.model import ConfigSpec, PlanSpec, ServerSpec
from specbench_tui.table_types import PlanError

#: The keys that start a server, each with what it would set.
LAUNCH_KEYS = ("launch", "python", "model", "port", "args", "env")


def check_running(spec: PlanSpec, configs: list[ResolvedConfig]) -> list[PlanError]:
    """Every config with a ``url``, against what the plan around it asks."""
    running = [c for c in configs if c.url is not None]
    if not running:
        return []
    return _tables(spec, running) + _around(spec, running)


def _tables(spec: PlanSpec, running: list[ResolvedConfig]) -> list[PlanError]:
    """The running servers' own tables: nothing in them that starts a server."""
    errs: list[PlanError] = []
    if spec.server.url is not None:
        errs += _launch_keys(("server",), spec.server)
    for base in dict.fromkeys(c.base for c in running):
        cfg = spec.configs[base]
        errs += _launch_keys(("configs", base), cfg)
        if cfg.params:
            errs.append(_said(("configs", base, "params"), base, "params makes several configs"))
        if cfg.forced_accept:
            errs.append(
                _said(("configs", base, "forced_accept"), base, "forced_accept restarts it forced")
            )
    return errs


def _around(spec: PlanSpec, running: list[ResolvedConfig]) -> list[PlanError]:
    """The campaign, hosts and matrix around them: nothing the tool would do to its own
    servers that it cannot do to these."""
    errs: list[PlanError] = []
    where = ("configs", running[0].base, "url")
    if spec.campaign.pack:
        errs.append(
            PlanError(
                ("campaign", "pack"),
                f"config {running[0].base!r} names a running server (url), whose GPUs are not "
                "this tool's to place: leave pack out",
            )
        )
    if spec.campaign.runs > 1:
        errs.append(
            PlanError(
                ("campaign", "runs"),
                f"runs = {spec.campaign.runs} starts each server afresh per run, but config "
                f"{running[0].base!r} names a running server (url), which is never restarted: "
                "leave runs out, or run the plan again",
            )
        )
    for host in matrix_hosts(spec):
        table = spec.hosts.get(host)
        if table is not None and batch_kind(table.kind) is not None:
            errs.append(
                PlanError(
                    where,
                    f"host {host!r} is a {table.kind} cluster, whose jobs start their servers; "
                    "a running server is measured from this machine: put its configs on a "
                    "host that is one machine (matrix.hosts)",
                )
            )
        for c in running:
            tps = [t for t in spec.matrix.tp if not excluded(spec, host=host, config=c, tp=t)]
            if len(tps) > 1:
                errs.append(
                    PlanError(
                        ("configs", c.base, "url"),
                        f"config {c.name!r} names a running server, which runs at one TP size, "
                        f"but the matrix gives it {', '.join(map(str, tps))} on host {host!r}: "
                        f'exclude the others ([[matrix.exclude]] config = "{c.base}", '
                        f"tp = {tps[-1]})",
                    )
                )
    return errs


def _launch_keys(where: tuple[str, ...], table: ServerSpec | ConfigSpec) -> list[PlanError]:
    name = where[-1] if where[0] == "configs" else "[server]"
    return [
        _said((*where, key), name, f"{key} starts a server")
        for key in LAUNCH_KEYS
        if getattr(table, key)
    ]


def _said(where: tuple[str | int, ...], name: str, what: str) -> PlanError:
    return PlanError(
        where,
        f"{name!r} names a running server (url), which this tool never starts: {what} and has "
        "no effect on it; remove it (or the url, to have the tool start the server)",
    )

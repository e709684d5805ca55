"""Checks of ``[server]`` and ``[configs.NAME]``: as written (params, placeholders, program
paths), then as resolved (each against its engine, names that stay apart, a model path).

Each problem is a PlanError at its key path: the config's own table where it set the value,
else ``[server]``, which it inherits from.
"""

from __future__ import annotations

import re
from typing import Any

from specbench_tui.engines.registry import adapter
from specbench_tui.hosts.backends import simulated
from specbench_tui.plan.check_matrix import matrix_hosts, rehearsal_only
from specbench_tui.plan.check_placeholders import check_placeholders
from specbench_tui.plan.configs import ResolvedConfig, substitute
from specbench_tui.plan.model import PLACEHOLDERS, SAFE_NAME, ParamValue, PlanSpec
from specbench_tui.table_types import PlanError

_SAFE = re.compile(SAFE_NAME)


def server_command(c: ResolvedConfig) -> list[str]:
    """The command a resolved config's server runs, as its engine adapter reads it."""
    values = {"config": c.name, "python": c.python, "model": c.model, **dict(c.params)}
    return [substitute(t, values) for t in (*c.launch, *c.args)]


def check_config_tables(spec: PlanSpec) -> list[PlanError]:
    """``[server]`` and ``[configs.NAME]`` as written: params and placeholders."""
    errs: list[PlanError] = []
    for name, cfg in spec.configs.items():
        errs += _check_params(name, cfg.params)
        allowed = set(PLACEHOLDERS) | set(cfg.params)
        templates = (
            [("launch", t) for t in (cfg.launch or [])]
            + [("args", t) for t in cfg.args]
            + [("label", cfg.label or "")]
        )
        errs += check_placeholders(("configs", name), templates, allowed)
    errs += check_placeholders(
        ("server",),
        [("launch", t) for t in (spec.server.launch or [])]
        + [("args", t) for t in spec.server.args],
        set(PLACEHOLDERS) | {k for c in spec.configs.values() for k in c.params},
    )
    return errs


def _check_params(name: str, params: dict[str, list[ParamValue]]) -> list[PlanError]:
    """``params``: each a non-empty list of values that can be part of a config name."""
    errs: list[PlanError] = []
    for key, values in params.items():
        where = ("configs", name, "params", key)
        if not values:
            errs.append(PlanError(where, "empty list: give at least one value"))
        for v in values:
            if not _SAFE.match(str(v)):
                errs.append(PlanError(where, f"value {v!r} cannot be part of a config name"))
    return errs


def check_engines(spec: PlanSpec, configs: list[ResolvedConfig]) -> list[PlanError]:
    """Each config against its engine: an API it serves, a command it can read."""
    errs: list[PlanError] = []
    for c in configs:
        eng = adapter(c.engine)
        if c.api not in eng.apis:
            own = spec.configs[c.base].api is not None
            errs.append(
                PlanError(
                    ("configs", c.base, "api") if own else ("server", "api"),
                    f"api = {c.api!r} but config {c.base!r} runs on {eng.label}, which serves "
                    f"only {' or '.join(repr(a) for a in eng.apis)}; "
                    f"set api = {eng.default_api!r} or leave api out",
                )
            )
    if rehearsal_only(spec):
        return errs  # the simulator runs instead of the engine: its command is not read
    for c in configs:
        if c.url is not None:
            continue  # a running server: no command of this plan starts it
        problem = adapter(c.engine).check_command(server_command(c))
        if problem is not None:
            own = spec.configs[c.base].args or spec.configs[c.base].launch
            errs.append(PlanError(("configs", c.base) if own else ("server",), problem))
    return errs


def check_expanded_names(configs: list[ResolvedConfig]) -> list[PlanError]:
    """No two configs expand to one name."""
    errs: list[PlanError] = []
    first: dict[str, str] = {}
    for c in configs:
        if c.name in first:
            errs.append(
                PlanError(
                    ("configs", c.base, "params") if c.params else ("configs", c.base),
                    f"expands to the name {c.name!r}, which config "
                    f"{first[c.name]!r} also has; rename one",
                )
            )
        else:
            first[c.name] = c.base
    return errs


def check_programs(spec: PlanSpec) -> list[PlanError]:
    """Program paths without control characters."""
    errs: list[PlanError] = []
    for where, program in _programs(spec):
        if any(ord(c) < 32 and c != "\t" for c in program):
            errs.append(
                PlanError(
                    where,
                    f"{program!r} holds a line break or another control character: a program "
                    "path cannot (a service manager refuses to run one)",
                )
            )
    return errs


def _programs(spec: PlanSpec) -> list[tuple[tuple[str | int, ...], str]]:
    """The programs a server command may start with: each ``python`` and each launch's
    first word, with their key paths."""
    tables: list[tuple[tuple[str, ...], Any]] = [(("server",), spec.server)]
    tables += [(("configs", name), cfg) for name, cfg in spec.configs.items()]
    out: list[tuple[tuple[str | int, ...], str]] = []
    for where, table in tables:
        if table.python:
            out.append(((*where, "python"), table.python))
        if table.launch:
            out.append(((*where, "launch", 0), table.launch[0]))
    return out


def check_model(spec: PlanSpec, configs: list[ResolvedConfig]) -> list[PlanError]:
    """A model path wherever a real host runs the servers."""
    needs_model = any(
        not simulated(spec.hosts[h].kind) for h in matrix_hosts(spec) if h in spec.hosts
    )
    started = [c for c in configs if c.url is None]  # a running server has its model
    if needs_model and started and not any(c.model for c in started):
        return [PlanError(("server", "model"), "missing: real hosts need the model path")]
    return []

"""Checks across tables: names that must exist, TP that must fit, templates that must resolve.

Each problem is a PlanError with the key path it is about; the loader adds file and line.
"""

from __future__ import annotations

import re
import string
from typing import Any

from specbench_tui.engines.registry import SIMULATED_ENGINE, adapter
from specbench_tui.plan.capacity import check_capacity
from specbench_tui.plan.check_hosts import check_hosts
from specbench_tui.plan.check_matrix import (
    check_baseline,
    check_matrix,
    check_workloads,
    matrix_hosts,
)
from specbench_tui.plan.check_prompts import check_prompt_sets, check_templates
from specbench_tui.plan.configs import ResolvedConfig, resolve_configs, substitute
from specbench_tui.plan.document import Plan, PlanError
from specbench_tui.plan.log_patterns import compile_pattern
from specbench_tui.plan.model import PLACEHOLDERS, SAFE_NAME, PlanSpec
from specbench_tui.plan.slurm_files import check_job_files

_SAFE = re.compile(SAFE_NAME)


def check_plan(plan: Plan) -> list[PlanError]:
    """Every problem of a plan that its model alone cannot see, table by table."""
    spec = plan.spec
    errs = _check_names(spec) + check_hosts(spec) + _check_config_tables(spec)
    if errs:
        return errs  # the rest needs resolvable configs
    configs = resolve_configs(spec)
    return (
        _check_engines(spec, configs)
        + _check_expanded_names(configs)
        + check_matrix(spec, configs)
        + check_workloads(plan, configs)
        + check_capacity(spec)
        + check_templates(plan, configs)
        + check_prompt_sets(plan)
        + check_job_files(plan)
        + check_baseline(spec, configs)
        + _check_logs(spec)
        + _check_programs(spec)
        + _check_model(spec, configs)
        + _check_forced(spec, configs)
    )


def _check_names(spec: PlanSpec) -> list[PlanError]:
    """Host, config and workload names end up in file names, unit names and shells."""
    errs: list[PlanError] = []
    for table, names in (
        ("hosts", spec.hosts),
        ("configs", spec.configs),
        ("workloads", spec.workloads),
    ):
        for name in names:
            if not _SAFE.match(name):
                errs.append(
                    PlanError(
                        (table, name),
                        f"name {name!r} has characters that are "
                        "unsafe in a file name, a systemd unit name or a shell; "
                        "use letters, digits, '_', '.' and '-'",
                    )
                )
    return errs


def _check_config_tables(spec: PlanSpec) -> list[PlanError]:
    """``[server]`` and ``[configs.NAME]`` as written: params and placeholders."""
    errs: list[PlanError] = []
    for name, cfg in spec.configs.items():
        for key, values in cfg.params.items():
            if not values:
                errs.append(
                    PlanError(
                        ("configs", name, "params", key), "empty list: give at least one value"
                    )
                )
            for v in values:
                if not _SAFE.match(str(v)):
                    errs.append(
                        PlanError(
                            ("configs", name, "params", key),
                            f"value {v!r} cannot be part of a config name",
                        )
                    )
        allowed = set(PLACEHOLDERS) | set(cfg.params)
        templates = (
            [("launch", t) for t in (cfg.launch or [])]
            + [("args", t) for t in cfg.args]
            + [("label", cfg.label or "")]
        )
        errs += _check_placeholders(("configs", name), templates, allowed)
    errs += _check_placeholders(
        ("server",),
        [("launch", t) for t in (spec.server.launch or [])]
        + [("args", t) for t in spec.server.args],
        set(PLACEHOLDERS) | {k for c in spec.configs.values() for k in c.params},
    )
    return errs


def _check_engines(spec: PlanSpec, configs: list[ResolvedConfig]) -> list[PlanError]:
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
    if all(spec.hosts[h].kind == "sim" for h in matrix_hosts(spec) if h in spec.hosts):
        return errs  # the simulator runs instead of the engine: its command is not read
    for c in configs:
        values = {"config": c.name, "python": c.python, "model": c.model, **dict(c.params)}
        command = [substitute(t, values) for t in (*c.launch, *c.args)]
        problem = adapter(c.engine).check_command(command)
        if problem is not None:
            own = spec.configs[c.base].args or spec.configs[c.base].launch
            errs.append(PlanError(("configs", c.base) if own else ("server",), problem))
    return errs


def _check_expanded_names(configs: list[ResolvedConfig]) -> list[PlanError]:
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


def _check_logs(spec: PlanSpec) -> list[PlanError]:
    """``[logs]``: patterns that compile, with named groups."""
    errs: list[PlanError] = []
    for name, pattern in spec.logs.items():
        try:
            rx = compile_pattern(pattern)
        except ValueError as exc:
            errs.append(PlanError(("logs", name), str(exc)))
            continue
        if not rx.groupindex:
            errs.append(
                PlanError(
                    ("logs", name),
                    "has no named group; write e.g. 'accept len: (?P<accept_len>[0-9.]+)'",
                )
            )
    return errs


def _check_programs(spec: PlanSpec) -> list[PlanError]:
    """Program paths without control characters."""
    errs: list[PlanError] = []
    for where, program in _programs(spec):
        if any(ord(c) < 32 and c != "\t" for c in program):
            errs.append(
                PlanError(
                    where,
                    f"{program!r} holds a line break or another control character: a program "
                    "path cannot (systemd refuses to run one)",
                )
            )
    return errs


def _check_model(spec: PlanSpec, configs: list[ResolvedConfig]) -> list[PlanError]:
    """A model path wherever a real host runs the servers."""
    hosts = matrix_hosts(spec)
    errs: list[PlanError] = []
    needs_model = any(spec.hosts[h].kind != "sim" for h in hosts if h in spec.hosts)
    if needs_model and not any(c.model for c in configs):
        errs.append(PlanError(("server", "model"), "missing: real hosts need the model path"))
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


def _check_placeholders(
    where: tuple[str, ...], templates: list[tuple[str, str]], allowed: set[str]
) -> list[PlanError]:
    errs = []
    for key, text in templates:
        try:
            fields = list(string.Formatter().parse(text))
        except ValueError as exc:
            errs.append(
                PlanError(
                    (*where, key),
                    f"{text!r}: {exc}; write {{{{ and }}}} for literal braces, "
                    f"e.g. {_literal_braces(text, allowed)!r}",
                )
            )
            continue
        names = [name for _, name, _, _ in fields if name is not None]
        for _, name, spec, conv in fields:
            if name in allowed and (spec or conv):
                errs.append(
                    PlanError(
                        (*where, key),
                        f"{text!r}: format specs and conversions are not supported in plan "
                        f"templates; write {{{name}}}",
                    )
                )
        for n in names:
            if n not in allowed:
                hint = (
                    f"; for literal braces (JSON such as vLLM's --speculative-config) write "
                    f"{{{{ and }}}}: {_literal_braces(text, allowed)!r}"
                    if not n.isidentifier()
                    else "; write {{ and }} for literal braces"
                )
                errs.append(
                    PlanError(
                        (*where, key),
                        f"unknown placeholder {{{n}}} in {text!r}; "
                        f"known: {', '.join('{' + a + '}' for a in sorted(allowed))}{hint}",
                    )
                )
                break  # one message per value: the hint rewrites the whole of it
    return errs


def _literal_braces(text: str, allowed: set[str]) -> str:
    """``text`` with every brace doubled except around the known placeholders."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "{":
            end = text.find("}", i)
            if end > i and text[i + 1 : end] in allowed:
                out.append(text[i : end + 1])
                i = end + 1
                continue
            out.append("{{")
        elif text[i] == "}":
            out.append("}}")
        else:
            out.append(text[i])
        i += 1
    return "".join(out)


def _check_forced(spec: PlanSpec, configs: list[ResolvedConfig]) -> list[PlanError]:
    """Each ``forced_accept`` value against the command it forces: a speculative one, whose
    engine has the knob, at most k + 1 for its k drafts a step. A rehearsal-only plan is read
    as the simulator (which takes the simulated engine's knob) reads it."""
    errs: list[PlanError] = []
    all_sim = all(spec.hosts[h].kind == "sim" for h in matrix_hosts(spec) if h in spec.hosts)
    for c in configs:
        values = spec.configs[c.base].forced_accept
        if c.forced_accept is not None or not values:
            continue
        eng = adapter(SIMULATED_ENGINE if all_sim else c.engine)
        subs = {"config": c.name, "python": c.python, "model": c.model, **dict(c.params)}
        command = [substitute(t, subs) for t in (*c.launch, *c.args)]
        where = ("configs", c.base, "forced_accept")
        if not eng.requested_speculation(command).on:
            errs.append(
                PlanError(
                    where,
                    f"config {c.name!r} runs no speculative decoding, so there is no verify "
                    "step to force: give it a speculative method or leave forced_accept out",
                )
            )
            continue
        k = eng.draft_tokens(command)
        for i, v in enumerate(values):
            if k is not None and v > k + 1:
                errs.append(
                    PlanError(
                        (*where, i),
                        f"{v:g} is above k + 1 = {k + 1} (config {c.name!r} drafts k = {k} "
                        f"tokens a step, and a step accepts at most those and the bonus "
                        f"token): give values in [1, {k + 1}]",
                    )
                )
                continue
            try:
                eng.forced_accept(command, v)
            except ValueError as e:
                errs.append(PlanError((*where, i), f"config {c.name!r}: {e}"))
    return errs

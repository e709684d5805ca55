"""Checks across tables: names that must exist, TP that must fit, templates that must resolve.

Each problem is a PlanError with the key path it is about; the loader adds file and line.
"""

from __future__ import annotations

import difflib
import re
import string
from typing import Any

from specbench_tui.engines.registry import SIMULATED_ENGINE, adapter
from specbench_tui.plan.capacity import check_capacity
from specbench_tui.plan.check_prompts import check_prompt_sets, check_templates
from specbench_tui.plan.configs import ResolvedConfig, names_matching, resolve_configs, substitute
from specbench_tui.plan.document import Plan, PlanError
from specbench_tui.plan.log_patterns import compile_pattern
from specbench_tui.plan.model import PLACEHOLDERS, SAFE_NAME, SSH_DESTINATION, PlanSpec
from specbench_tui.plan.slurm_files import check_job_files
from specbench_tui.plan.slurm_jobs import check_slurm_host

_SAFE = re.compile(SAFE_NAME)
_SSH = re.compile(SSH_DESTINATION)


def check_plan(plan: Plan) -> list[PlanError]:
    """Every problem of a plan that its model alone cannot see, table by table."""
    spec = plan.spec
    errs = _check_names(spec) + _check_hosts(spec) + _check_config_tables(spec)
    if errs:
        return errs  # the rest needs resolvable configs
    configs = resolve_configs(spec)
    return (
        _check_engines(spec, configs)
        + _check_expanded_names(configs)
        + _check_matrix(spec, configs)
        + _check_workloads(plan, configs)
        + check_capacity(spec)
        + check_templates(plan, configs)
        + check_prompt_sets(plan)
        + check_job_files(plan)
        + _check_baseline(spec, configs)
        + _check_logs(spec)
        + _check_programs(spec)
        + _check_model(spec, configs)
        + _check_forced(spec, configs)
    )


def _matrix_hosts(spec: PlanSpec) -> list[str]:
    m = spec.matrix
    return m.hosts if m.hosts is not None else list(spec.hosts)


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


def _check_hosts(spec: PlanSpec) -> list[PlanError]:
    """``[hosts.NAME]``: one kind each, GPU ids that agree, SSH destinations."""
    errs: list[PlanError] = []
    for name, host in spec.hosts.items():
        chosen = [
            k
            for k, on in (
                ("ssh", host.ssh),
                ("local", host.local),
                ("sim", host.sim),
                ("slurm", host.slurm),
            )
            if on
        ]
        if len(chosen) != 1:
            errs.append(
                PlanError(
                    ("hosts", name),
                    'set exactly one of ssh = "user@host", '
                    "local = true, sim = true, slurm = { login = ... } "
                    f"(found {len(chosen) or 'none'})",
                )
            )
        if host.slurm is not None:
            errs += check_slurm_host(name, host)
        if host.gpu_ids is not None:
            if len(host.gpu_ids) != host.gpus:
                errs.append(
                    PlanError(
                        ("hosts", name, "gpu_ids"),
                        f"lists {len(host.gpu_ids)} "
                        f"GPU ids but gpus = {host.gpus}; make them agree",
                    )
                )
            elif len(set(host.gpu_ids)) != len(host.gpu_ids):
                errs.append(PlanError(("hosts", name, "gpu_ids"), "has a GPU id twice"))
        if host.ssh is not None and not _SSH.match(host.ssh):
            errs.append(
                PlanError(
                    ("hosts", name, "ssh"),
                    f"{host.ssh!r} is not an SSH "
                    "destination; write an alias, user@host or user@host:port",
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
    if all(spec.hosts[h].kind == "sim" for h in _matrix_hosts(spec) if h in spec.hosts):
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


def _check_matrix(spec: PlanSpec, configs: list[ResolvedConfig]) -> list[PlanError]:
    """``[matrix]``: configs and hosts that exist, TP that fits, exclusions that exist."""
    errs: list[PlanError] = []
    m = spec.matrix
    for i, ref in enumerate(m.configs):
        if not names_matching(ref, configs):
            errs.append(PlanError(("matrix", "configs", i), _unknown("config", ref, spec.configs)))
    hosts = _matrix_hosts(spec)
    for i, h in enumerate(hosts):
        if h not in spec.hosts:
            errs.append(PlanError(("matrix", "hosts", i), _unknown("host", h, spec.hosts)))
    for tp in m.tp:
        for h in hosts:
            if h in spec.hosts and tp > spec.hosts[h].gpus:
                errs.append(
                    PlanError(
                        ("matrix", "tp"),
                        f"TP {tp} needs {tp} GPUs but host "
                        f"{h!r} has gpus = {spec.hosts[h].gpus}; drop TP {tp} or "
                        "exclude it for that host",
                    )
                )
    for i, ex in enumerate(m.exclude):
        if ex.config is not None and not names_matching(ex.config, configs):
            errs.append(
                PlanError(
                    ("matrix", "exclude", i, "config"), _unknown("config", ex.config, spec.configs)
                )
            )
        if ex.host is not None and ex.host not in spec.hosts:
            errs.append(
                PlanError(("matrix", "exclude", i, "host"), _unknown("host", ex.host, spec.hosts))
            )
        if ex.workload is not None and ex.workload not in spec.workloads:
            errs.append(
                PlanError(
                    ("matrix", "exclude", i, "workload"),
                    _unknown("workload", ex.workload, spec.workloads),
                )
            )
    return errs


def _check_workloads(plan: Plan, configs: list[ResolvedConfig]) -> list[PlanError]:
    """``[workloads.NAME]``: configs and TP sizes of the matrix (its prompt sets:
    ``check_prompts``)."""
    spec, m = plan.spec, plan.spec.matrix
    errs: list[PlanError] = []
    for wname, w in spec.workloads.items():
        for i, ref in enumerate(w.configs or []):
            if not names_matching(ref, configs):
                errs.append(
                    PlanError(
                        ("workloads", wname, "configs", i), _unknown("config", ref, spec.configs)
                    )
                )
        for tp in w.tp or []:
            if tp not in m.tp:
                errs.append(
                    PlanError(
                        ("workloads", wname, "tp"),
                        f"TP {tp} is not in matrix.tp {m.tp}; the workload can only restrict it",
                    )
                )
    return errs


def _check_baseline(spec: PlanSpec, configs: list[ResolvedConfig]) -> list[PlanError]:
    """``[campaign] baseline``: one config of the matrix."""
    m = spec.matrix
    errs: list[PlanError] = []
    in_matrix = {n for ref in m.configs for n in names_matching(ref, configs)}
    if spec.campaign.baseline is not None:
        b = spec.campaign.baseline
        real = [c for c in configs if c.forced_accept is None]  # its forced variants aside
        if len(names_matching(b, real)) > 1:
            errs.append(
                PlanError(
                    ("campaign", "baseline"),
                    f"{b!r} is parametrized; name one "
                    "expansion, e.g. " + repr(names_matching(b, real)[0]),
                )
            )
        elif b not in in_matrix:
            errs.append(
                PlanError(
                    ("campaign", "baseline"),
                    f"baseline {b!r} is not in "
                    f"matrix.configs {m.configs}; speedups need it measured",
                )
            )
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
    hosts = _matrix_hosts(spec)
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


def _unknown(what: str, name: str, known: object) -> str:
    names = list(known)  # type: ignore[call-overload]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(names)}"
    return f"no {what} named {name!r}; {hint}"


def _check_forced(spec: PlanSpec, configs: list[ResolvedConfig]) -> list[PlanError]:
    """Each ``forced_accept`` value against the command it forces: a speculative one, whose
    engine has the knob, at most k + 1 for its k drafts a step. A rehearsal-only plan is read
    as the simulator (which takes the simulated engine's knob) reads it."""
    errs: list[PlanError] = []
    all_sim = all(spec.hosts[h].kind == "sim" for h in _matrix_hosts(spec) if h in spec.hosts)
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

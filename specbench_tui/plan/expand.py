"""Expand a plan into service groups and cells.

Groups are ordered host, then TP size ascending, then config in plan order: each server starts
once, and a TP size's groups run together (the largest TP, which may need GPUs a foreign
service holds, comes last). GPUs are taken from the top of the host's ids, so small TP sizes
stay clear of GPU 0, where foreign services usually sit.

A cell's id hashes what it measures (the resolved server command with the port left out, the
environment, host, TP, GPUs, the workload slice and, past the first, which of the plan's
``runs`` it belongs to), never its position in the plan. With ``runs = N`` each group is
expanded N times (``<host>.<config>.tp<tp>``, then ``...r2`` to ``...rN``), each a server
start of its own.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from specbench_tui.engines.registry import SIMULATED_ENGINE, adapter
from specbench_tui.hosts.backends import REHEARSAL, HostSpec, batch_kind, simulated
from specbench_tui.plan.chat_template import template_path
from specbench_tui.plan.configs import ResolvedConfig, names_matching, resolve_configs, substitute
from specbench_tui.plan.document import Plan, ServerSays
from specbench_tui.plan.model import (
    AgenticWorkload,
    CapacityWorkload,
    ConcurrencyWorkload,
    PlanSpec,
    SingleWorkload,
    Workload,
)
from specbench_tui.plan.prompt_sets import PromptLibrary, session_tasks
from specbench_tui.results.cells import Cell, ServiceGroup


@dataclass(frozen=True)
class Expansion:
    groups: list[ServiceGroup]
    cells: list[Cell]

    def cells_of(self, group_id: str) -> list[Cell]:
        return [c for c in self.cells if c.group == group_id]


def expand(plan: Plan, *, sim: bool = False) -> Expansion:
    """``sim``: rehearse on the embedded simulated host instead of the plan's hosts."""
    spec = plan.spec
    lib = plan.prompts
    configs = {c.name: c for c in resolve_configs(spec)}
    matrix_configs = [
        n for ref in spec.matrix.configs for n in names_matching(ref, list(configs.values()))
    ]
    matrix_configs = list(dict.fromkeys(matrix_configs))
    host_names = spec.matrix.hosts if spec.matrix.hosts is not None else list(spec.hosts)

    pack = spec.campaign.pack
    groups: list[ServiceGroup] = []
    cells: list[Cell] = []
    for host_name in host_names:
        host = spec.hosts[host_name]
        host_groups: list[ServiceGroup] = []
        configs_of: dict[str, ResolvedConfig] = {}
        for tp in sorted(spec.matrix.tp):
            # Every config once, then every config again (``runs``): a run's servers are
            # restarted, and a drift over the hours of a campaign falls on every config alike.
            for run in range(1, spec.campaign.runs + 1):
                for cname in matrix_configs:
                    cfg = configs[cname]
                    if excluded(spec, host=host_name, config=cfg, tp=tp, workload=None):
                        continue
                    group = _group(
                        spec,
                        host_name,
                        host,
                        cfg,
                        tp,
                        sim=sim,
                        packed=pack,
                        plan_dir=plan.dir,
                        says=plan.running,
                    )
                    if run > 1:
                        group = replace(group, id=f"{group.id}.r{run}", run=run)
                    group_cells = _cells(spec, group, cfg, lib)
                    if not group_cells:
                        continue
                    groups.append(group)
                    cells.extend(group_cells)
                    host_groups.append(group)
                    configs_of[group.id] = cfg
        if pack:
            for solo, solo_cells in _controls(spec, host_groups, configs_of, lib):
                groups.append(solo)
                cells.extend(solo_cells)
    return Expansion(groups=groups, cells=cells)


def _controls(
    spec: PlanSpec,
    host_groups: list[ServiceGroup],
    configs_of: dict[str, ResolvedConfig],
    lib: PromptLibrary,
) -> list[tuple[ServiceGroup, list[Cell]]]:
    """A packed host's controls: groups once more, alone on the host. Every cell of the
    host's first group under ``pack_control``, on a server of its own started with every GPU
    free; the first ``interference_check`` of each group otherwise, on the group's own server
    once its packed cells are done (``rides``), with no other group measuring meanwhile: the
    same server, so packing is all that differs."""
    check = spec.campaign.interference_check
    out = []
    for i, group in enumerate(host_groups):
        whole = spec.campaign.pack_control and i == 0
        if not (whole or check):
            continue
        rides = None if whole else group.id
        solo = replace(group, id=f"{group.id}.solo", packed=False, exclusive=True, rides=rides)
        solo_cells = _cells(spec, solo, configs_of[group.id], lib)
        out.append((solo, solo_cells if whole else solo_cells[:check]))
    return out


def excluded(
    spec: PlanSpec, *, host: str, config: ResolvedConfig, tp: int, workload: str | None = None
) -> bool:
    """Whether the matrix's excludes take out the group (``workload`` None) or a workload of
    it."""
    for ex in spec.matrix.exclude:
        if ex.host is not None and ex.host != host:
            continue
        if ex.config is not None and ex.config not in (config.name, config.base):
            continue
        if ex.tp is not None and ex.tp != tp:
            continue
        if ex.workload is not None and ex.workload != workload:
            continue
        if ex.workload is not None and workload is None:
            continue  # excludes a workload only, not the whole group
        return True
    return False


def _group(
    spec: PlanSpec,
    host_name: str,
    host: HostSpec,
    cfg: ResolvedConfig,
    tp: int,
    *,
    sim: bool,
    packed: bool = False,
    plan_dir: Path | None = None,
    says: dict[str, ServerSays] | None = None,
) -> ServiceGroup:
    ids = host.gpu_ids if host.gpu_ids is not None else list(range(host.gpus))
    gpu_ids = tuple(sorted(ids)[-tp:])
    kind = REHEARSAL if sim else host.kind
    rehearsed = simulated(kind)
    batch = batch_kind(kind) is not None
    if batch:
        gpu_ids = ()  # the job's allocation decides, on whichever node the cluster picks
    if cfg.url is not None and not rehearsed:  # measured where it runs, as it is
        named = spec.configs[cfg.base].engine or spec.server.engine
        return _running(host_name, kind, cfg, tp, (says or {}).get(cfg.url), named is not None)
    port = cfg.port
    values: dict[str, object] = {
        "python": cfg.python,
        "model": cfg.model or "model",
        "tp": tp,
        "port": port,
        "host": "127.0.0.1",
        "config": cfg.name,
    }
    values.update({k: v for k, v in cfg.params})
    if rehearsed:
        speed = host.sim_speed
        command = (
            sys.executable,
            "-m",
            "specbench_tui.sim",
            "--model-path",
            cfg.model or "simulated-model",
            "--tp-size",
            str(tp),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *cfg.args,
            "--speed",
            f"{speed:g}",
            "--seed",
            str(spec.campaign.seed),
        )
    else:
        command = tuple(substitute(t, values) for t in cfg.launch) + cfg.args
    env = dict(cfg.env)
    if cfg.forced_accept is not None:
        command = _forced(command, env, cfg, sim=rehearsed)
    if not batch:  # a batch job sets it from its allocation
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpu_ids))
    # What the config asks for is read from the plan's command, as its engine reads it; a
    # rehearsal runs the simulator, which speaks SIMULATED_ENGINE's wire format.
    asked = adapter(cfg.engine).requested_speculation(
        [*(substitute(t, values) for t in cfg.launch), *cfg.args]
    )
    return ServiceGroup(
        id=f"{host_name}.{cfg.name}.tp{tp}",
        host=host_name,
        host_kind=kind,
        config=cfg.name,
        label=cfg.label,
        tp=tp,
        gpu_ids=gpu_ids,
        port=port,
        command=command,
        env=tuple(sorted(env.items())),
        api=cfg.api,
        ready_timeout_s=cfg.ready_timeout_s,
        speculative=asked.on,
        stop_before=tuple(host.stop_before) if not rehearsed else (),
        packed=packed,
        engine=SIMULATED_ENGINE if rehearsed else cfg.engine,
        served_model_name=cfg.served_model_name,
        spec_algorithm=asked.algorithm,
        model=cfg.model,
        chat_template=template_path(cfg.chat_template, plan_dir),
        chat_template_on=cfg.chat_template_on,
        forced_accept=cfg.forced_accept,
    )


def _running(
    host_name: str,
    kind: str,
    cfg: ResolvedConfig,
    tp: int,
    says: ServerSays | None,
    engine_named: bool,
) -> ServiceGroup:
    """The group of a server already running (``url``): no command, environment or GPUs of
    its own (it is not started), on the port of its address. Its engine (where the plan
    names none) and its speculation are what it said of itself before the run (``says``;
    none in a dry run: off, the plan's engine); the matrix's TP size is checked against
    what it reports when it starts."""
    says = says or ServerSays()
    engine = cfg.engine if engine_named or says.engine is None else says.engine
    return ServiceGroup(
        id=f"{host_name}.{cfg.name}.tp{tp}",
        host=host_name,
        host_kind=kind,
        config=cfg.name,
        label=cfg.label,
        tp=tp,
        gpu_ids=(),
        port=url_port(cfg.url or ""),
        command=(),
        env=(),
        api=cfg.api,
        ready_timeout_s=cfg.ready_timeout_s,
        speculative=bool(says.speculative),
        engine=engine,
        spec_algorithm=says.algorithm if says.speculative else None,
        served_model_name=cfg.served_model_name,
        chat_template=None,
        chat_template_on=cfg.chat_template_on,
        url=cfg.url,
    )


def url_port(url: str) -> int:
    """The port of a server's address (its scheme's default where it names none)."""
    parsed = urlsplit(url)
    try:
        port = parsed.port
    except ValueError:
        port = None
    return port or (443 if parsed.scheme == "https" else 80)


def _forced(
    command: tuple[str, ...], env: dict[str, str], cfg: ResolvedConfig, *, sim: bool
) -> tuple[str, ...]:
    """The command (and, in ``env``, the environment) of a forced-acceptance server: the
    engine's own knob (validation made sure it has one). A rehearsal's simulator takes the
    simulated engine's, or where that cannot read the command's speculation (a rehearsal of
    another engine's plan) the config engine's, which the simulator reads too (through that
    engine's adapter); failing both it runs unforced, and the forced check says so."""
    assert cfg.forced_accept is not None
    engines = [SIMULATED_ENGINE, cfg.engine] if sim else [cfg.engine]
    for name in engines:
        try:
            knob = adapter(name).forced_accept(command, cfg.forced_accept)
        except ValueError:
            if not sim:
                raise
            continue
        env.update(knob.env)
        return knob.command
    return command


def _cells(
    spec: PlanSpec, group: ServiceGroup, cfg: ResolvedConfig, lib: PromptLibrary
) -> list[Cell]:
    out: list[Cell] = []
    # The hash sees the command with its port blanked: moving a server to another port
    # does not change what a cell measures.
    server_identity: dict[str, Any] = {
        "host": group.host,
        "tp": group.tp,
        "gpus": list(group.gpu_ids),
        "api": group.api,
        "command": _command_identity(group),
        "env": dict(group.env),
    }
    # Only where the plan says: the ids of plans that leave the template alone stay as they were.
    if group.url is not None:  # a running server is what its address reaches
        server_identity["url"] = group.url
    if cfg.chat_template is not None:
        server_identity["chat_template"] = cfg.chat_template
    if cfg.chat_template_on != "client":
        server_identity["chat_template_on"] = cfg.chat_template_on
    if batch_kind(group.host_kind) is not None:
        # Allocated per job, not what the cell measures: the kind stands for the GPUs.
        server_identity["gpus"] = group.host_kind
    if group.packed or group.exclusive:
        # Placed at run time: which GPUs is not known here, and is not what the cell
        # measures; that it shared the host (or had it alone) is.
        server_identity["gpus"] = "packed" if group.packed else "alone"
        server_identity["env"] = {k: v for k, v in group.env if k != "CUDA_VISIBLE_DEVICES"}
    for wname, w in spec.workloads.items():
        if w.tp is not None and group.tp not in w.tp:
            continue
        if w.configs is not None and not any(r in (cfg.name, cfg.base) for r in w.configs):
            continue
        if excluded(spec, host=group.host, config=cfg, tp=group.tp, workload=wname):
            continue
        kwargs = {**dict(cfg.chat_template_kwargs), **w.chat_template_kwargs}
        # Only what the plan sets joins a cell's identity: plans that leave these out keep
        # the ids they had.
        shaping: dict[str, Any] = (
            {"chat_template_kwargs": tuple(sorted(kwargs.items()))} if kwargs else {}
        )
        for key, value in (("top_p", w.top_p), ("top_k", w.top_k), ("sampling_seed", w.seed)):
            if value is not None:
                shaping[key] = value
        common: dict[str, Any] = dict(
            group=group.id,
            host=group.host,
            config=cfg.name,
            tp=group.tp,
            workload=wname,
            kind=w.kind,
            timeout_s=w.timeout,
            params=cfg.params,
            run=group.run,
        )
        if cfg.forced_accept is not None:
            common["forced_accept"] = cfg.forced_accept
        temps = w.temperatures
        for temp in temps:
            # A temperature axis names its cells: ".../t0", ".../t1".
            at = f"/t{temp:g}" if len(temps) > 1 else ""
            fields = dict(shaping, temperature=temp)
            if isinstance(w, CapacityWorkload) and spec.slo is not None:
                # The SLO decides which levels the search tries: part of what it measures.
                fields["slo"] = tuple(sorted(spec.slo.limits().items()))
                fields["slo_target"] = spec.slo.target
            out.extend(
                _workload_cells(
                    lib, spec.campaign.seed, server_identity, common, group, wname, w, at, fields
                )
            )
    return out


def _workload_cells(
    lib: PromptLibrary,
    seed: int,
    server_identity: dict[str, Any],
    common: dict[str, Any],
    group: ServiceGroup,
    wname: str,
    w: Workload,
    at: str,
    fields: dict[str, Any],
) -> list[Cell]:
    """One workload's cells at one temperature. A set with categories gives a cell per
    category to single and agentic workloads (each category a prompt-set value of its own);
    a concurrency level mixes all the workload's prompts."""
    out: list[Cell] = []
    if isinstance(w, SingleWorkload):
        for pset in (name for entry in w.prompts for name in lib.cell_sets(entry)):
            for mt in w.max_tokens:
                out.append(
                    _cell(
                        server_identity,
                        common,
                        f"{group.id}/{wname}/{pset}/{mt}{at}",
                        prompt_set=pset,
                        prompts=(pset,),
                        max_tokens=mt,
                        concurrency=None,
                        samples=w.samples,
                        repeats=w.repeats,
                        warmup=w.warmup,
                        prefix_cache=w.prefix_cache,
                        **fields,
                    )
                )
    elif isinstance(w, AgenticWorkload):
        split = [n for entry in w.prompts for n in lib.cell_sets(entry) if "/" in n]
        pooled = tuple(e for e in w.prompts if lib.cell_sets(e) == [e])
        slices = [(f"/{n}", (n,)) for n in split] + ([("", pooled)] if pooled else [])
        for suffix, names in slices:
            pool = [p for n in names for p in lib.load(n)]
            sessions = w.sessions if w.sessions is not None else len(pool)
            extra: dict[str, Any] = {}
            if any(p.session_turns for p in pool):  # the questions' own turns: as drawn
                tasks = session_tasks(pool, sessions, common["workload"], seed)
                extra["requests"] = sum(min(w.turns, t.session_turns or w.turns) for t in tasks)
            out.append(
                _cell(
                    server_identity,
                    common,
                    f"{group.id}/{wname}{suffix}{at}",
                    prompt_set=names[0] if len(names) == 1 else None,
                    prompts=names,
                    max_tokens=w.max_tokens,
                    concurrency=None,
                    sessions=sessions,
                    turns=w.turns,
                    tool_output_tokens=w.tool_output_tokens,
                    **extra,
                    **fields,
                )
            )
    elif isinstance(w, ConcurrencyWorkload):
        for level in w.levels:
            out.append(
                _cell(
                    server_identity,
                    common,
                    f"{group.id}/{wname}/c{level}{at}",
                    prompt_set=w.prompts[0] if len(w.prompts) == 1 else None,
                    prompts=tuple(w.prompts),
                    max_tokens=w.max_tokens,
                    concurrency=level,
                    requests=w.requests,
                    # Only where the plan sets it: other plans keep their cells' ids.
                    **({"warmup": w.warmup} if w.warmup else {}),
                    **fields,
                )
            )
    elif isinstance(w, CapacityWorkload):
        out.append(
            _cell(
                server_identity,
                common,
                f"{group.id}/{wname}{at}",
                prompt_set=w.prompts[0] if len(w.prompts) == 1 else None,
                prompts=tuple(w.prompts),
                max_tokens=w.max_tokens,
                concurrency=None,
                requests=w.requests,
                warmup=w.warmup,
                levels=tuple(w.levels),
                max_points=w.max_points,
                **fields,
            )
        )
    return out


def _command_identity(group: ServiceGroup) -> list[str]:
    """The command as it decides results: port blanked, and the simulator's interpreter path
    (which differs per machine) replaced by its placeholder."""
    cmd = [a if a != str(group.port) else "{port}" for a in group.command]
    if simulated(group.host_kind):
        cmd[0] = "{python}"
    return cmd


def _cell(
    server_identity: dict[str, Any], common: dict[str, Any], name: str, **fields: Any
) -> Cell:
    measured = {k: v for k, v in fields.items()}
    identity = {
        "server": server_identity,
        "workload": common["workload"],
        "kind": common["kind"],
        **measured,
    }
    if common["run"] > 1:  # run 1 keeps the id a plan without ``runs`` gives it
        identity["run"] = common["run"]
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=list).encode())
    return Cell(id=digest.hexdigest()[:12], name=name, **common, **fields)

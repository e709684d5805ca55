"""Config resolution: server defaults merged with each config, ``params`` expanded.

``ddtree`` with ``params = { budget = [8, 16] }`` becomes ``ddtree-8`` and ``ddtree-16``, with
``{budget}`` substituted in args and label; ``forced_accept = [1.5, 2.5]`` adds a forced
variant of each (``ddtree-8-fa1.5``, ...), whose server the engine adapter changes at
expansion. Placeholders for the launch template itself
(``{python}``, ``{tp}``, ...) are left for expansion into groups.
"""

from __future__ import annotations

import itertools
import string
from dataclasses import dataclass, replace
from typing import Any

from specbench_tui.engines.adapter import OPENAI_API
from specbench_tui.engines.registry import DEFAULT_ENGINE, adapter, engine_starting
from specbench_tui.plan.model import ConfigSpec, ParamValue, PlanSpec


@dataclass(frozen=True)
class ResolvedConfig:
    name: str  # expanded name, e.g. "ddtree-16"
    base: str  # the [configs.NAME] it came from
    label: str
    launch: tuple[str, ...]
    python: str
    model: str
    port: int
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    api: str
    ready_timeout_s: float
    params: tuple[tuple[str, ParamValue], ...]
    engine: str = DEFAULT_ENGINE
    served_model_name: str | None = None
    chat_template: str | None = None  # the plan's template file (as the plan spells it)
    chat_template_kwargs: tuple[tuple[str, Any], ...] = ()  # [server]'s, then the config's
    chat_template_on: str = "client"
    # Forced acceptance (``forced_accept``): the accept length the engine is made to give, and
    # the real-acceptance config this one forces; None for a config that runs as it is.
    forced_accept: float | None = None
    forced_of: str | None = None
    # A server already running (``url``): measured as it is, never started or stopped.
    url: str | None = None


def forced_name(name: str, accept_length: float) -> str:
    """The name of a config's forced variant: ``ngram-fa2.5``."""
    return f"{name}-fa{accept_length:g}"


def placeholders(text: str) -> list[str]:
    """Names of the ``{name}`` fields of a template (raises ValueError on a broken brace)."""
    return [name for _, name, _, _ in string.Formatter().parse(text) if name is not None]


def substitute(text: str, values: dict[str, object]) -> str:
    """Fill only the placeholders we know; unknown ones were rejected at validation."""
    out = []
    for literal, name, spec, conv in string.Formatter().parse(text):
        out.append(literal)
        if name is not None:
            if name in values:
                out.append(format(values[name], spec or ""))
            else:
                out.append(
                    "{" + name + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
                )
    return "".join(out)


def _format_value(v: ParamValue) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def param_combinations(cfg: ConfigSpec) -> list[tuple[tuple[str, ParamValue], ...]]:
    if not cfg.params:
        return [()]
    keys = list(cfg.params)
    return [
        tuple(zip(keys, combo, strict=True))
        for combo in itertools.product(*(cfg.params[k] for k in keys))
    ]


def expanded_name(base: str, combo: tuple[tuple[str, ParamValue], ...]) -> str:
    return "-".join([base, *(_format_value(v) for _, v in combo)])


def resolve_configs(spec: PlanSpec) -> list[ResolvedConfig]:
    """All configs after params expansion, in plan order.

    A config's engine is its own ``engine``, else the one its own launch command starts, else
    the ``[server]`` one (named, or started by its launch), else the default engine
    (``engines/registry.py``): a plan that launches an engine and names none gets that
    engine's counters and log lines, not the default's. The ``[server]`` launch template and
    api apply to configs of the ``[server]`` engine only; a config of another engine gets that
    engine's defaults unless it sets its own. A config with a ``url`` (its own or
    ``[server]``'s) names a running server, whose engine ``engine/url_servers.py`` reads from
    it before a run.
    """
    server = spec.server
    server_engine = server.engine or engine_starting(server.launch or ()) or DEFAULT_ENGINE
    out: list[ResolvedConfig] = []
    for base, cfg in spec.configs.items():
        engine = cfg.engine or engine_starting(cfg.launch or ()) or server_engine
        url = cfg.url or server.url
        same = engine == server_engine
        eng = adapter(engine)
        for combo in param_combinations(cfg):
            values = {k: _format_value(v) for k, v in combo}
            name = expanded_name(base, combo)
            args = [*server.args, *cfg.args]
            env = {**server.env, **cfg.env}
            out.append(
                ResolvedConfig(
                    name=name,
                    base=base,
                    label=substitute(cfg.label or name, values),
                    launch=tuple(
                        cfg.launch or (server.launch if same else None) or eng.default_launch
                    ),
                    python=cfg.python or server.python or "python3",
                    model=cfg.model or server.model or "",
                    port=cfg.port or server.port or 30000,
                    args=tuple(substitute(a, values) for a in args),
                    env=tuple(sorted((k, substitute(v, values)) for k, v in env.items())),
                    # A running server renders its own chat template (its model directory
                    # may be on no host this tool reads): chat completions, unless the plan
                    # says otherwise.
                    api=cfg.api
                    or (server.api if same else None)
                    or (OPENAI_API if url else eng.default_api),
                    # A running server answers at once, or after the request it is busy on.
                    ready_timeout_s=cfg.ready_timeout
                    or server.ready_timeout
                    or (60.0 if url else 900.0),
                    params=combo,
                    engine=engine,
                    served_model_name=cfg.served_model_name or server.served_model_name,
                    chat_template=cfg.chat_template or server.chat_template,
                    chat_template_kwargs=tuple(
                        sorted({**server.chat_template_kwargs, **cfg.chat_template_kwargs}.items())
                    ),
                    chat_template_on=cfg.chat_template_on
                    or server.chat_template_on
                    or (
                        "server"
                        if url and not (cfg.chat_template or server.chat_template)
                        else "client"
                    ),
                    url=url,
                )
            )
            real = out[-1]
            out.extend(
                replace(
                    real,
                    name=forced_name(name, v),
                    label=f"{real.label} (forced accept {v:g})",
                    forced_accept=float(v),
                    forced_of=name,
                )
                for v in dict.fromkeys(cfg.forced_accept)
            )
    return out


def names_matching(ref: str, configs: list[ResolvedConfig]) -> list[str]:
    """A reference is an expanded name or a parametrized base standing for all expansions;
    a config's forced-acceptance variants come with it."""
    exact = [c.name for c in configs if ref in (c.name, c.forced_of)]
    return exact or [c.name for c in configs if c.base == ref]

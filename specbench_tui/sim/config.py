"""The simulator's command line: the arguments a real launch of the simulated engine passes,
plus a few of our own. What a flag says about speculation is its engine's adapter's to read
(``EngineAdapter.speculation_flags``, ``launch_speculation``): a rehearsal of any engine's
plan passes that engine's flags.

A campaign appends whatever server args the plan lists, so the parser must swallow every flag
the engine knows without a table of them: an unknown ``--flag`` takes the next token as its
value unless that token is itself a flag (the engine takes no positional arguments, so this
is unambiguous), and ``--flag=value`` always works. Unknown flags are kept and shown in
``/get_server_info`` the way the engine names them, because a client may read them back.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from specbench_tui.engines.adapter import EngineAdapter, LaunchArgsError
from specbench_tui.engines.registry import SIMULATED_ENGINE, adapter, adapters

ALGORITHMS = ("DFLASH", "DDTREE", "EAGLE", "EAGLE3", "NEXTN")


class SimArgsError(ValueError):
    """A command line the simulator cannot run, reported the way argparse would (exit 2)."""


@dataclass(frozen=True)
class Fault:
    """A failure injected on purpose so that tests can exercise the client's error paths."""

    name: str
    value: float = 0.0


@dataclass
class SimConfig:
    """Everything the simulated server needs to know, already validated and defaulted."""

    model_path: str = "sim-model"
    served_model_name: str | None = None
    tp_size: int = 1
    host: str = "127.0.0.1"
    port: int = 30000
    algorithm: str | None = None
    num_draft_tokens: int | None = None
    ddtree_budget: int | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    draft_model_path: str | None = None
    max_running_requests: int | None = None
    context_length: int = 262144
    mem_fraction_static: float = 0.85
    speed: float = 1.0
    seed: int = 0
    faults: tuple[Fault, ...] = ()
    gpu_state_dir: str | None = None
    # Fail as the engine does when --model-path names a local path that does not exist. Off by
    # default: a rehearsal of a real plan (/dev/shm/...) must not need the model files.
    require_model: bool = False
    gpu_ids: tuple[int, ...] = ()
    # Tokens held back until this many are new (or the request ends), then sent as one SSE
    # event: a server that bursts, as a speculative or a lagging one does.
    burst: int = 1
    # A JSON Lines file that gets each finished request's record (what was sent and when):
    # the truth a test holds the client's figures to after the server has gone.
    record_path: str | None = None
    # A file each request's prompt is appended to (one JSON object a line): what the server
    # received, for tests that check the client's rendering.
    record_prompts: str | None = None
    # Forced acceptance, as an engine's adapter reads its knob (launch_speculation): every
    # verify step of a speculative server accepts this many tokens on average, bonus
    # included, whatever the drafts (model.py draws them as a synthetic rejection sampler
    # does).
    forced_accept: float | None = None
    # The algorithm as the command named it, where that is not the simulator's own (another
    # engine's method, simulated as a chain drafter): what server info says.
    named_algorithm: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # The engine whose wire face the server shows (its log lines, its model owner): the
    # registry's simulated engine unless --sim-engine names another with simulated lines.
    engine: str = SIMULATED_ENGINE

    @property
    def speculative(self) -> bool:
        return self.algorithm is not None

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model_path

    def fault(self, name: str) -> Fault | None:
        return next((f for f in self.faults if f.name == name), None)

    def server_info(self) -> dict[str, Any]:
        """Server args under the engine's names, so a client reading them cannot tell us apart."""
        info: dict[str, Any] = dict(self.extra)
        info.update(
            model_path=self.model_path,
            tokenizer_path=self.model_path,
            served_model_name=self.model_name,
            tp_size=self.tp_size,
            host=self.host,
            port=self.port,
            context_length=self.context_length,
            mem_fraction_static=self.mem_fraction_static,
            max_running_requests=self.max_running_requests,
            random_seed=self.seed,
            speculative_algorithm=self.named_algorithm or self.algorithm,
            speculative_draft_model_path=self.draft_model_path,
            speculative_num_draft_tokens=self.num_draft_tokens,
            speculative_num_steps=self.num_steps,
            speculative_eagle_topk=self.eagle_topk,
            speculative_ddtree_budget=self.ddtree_budget,
            version="sim-0.1",
            simulated=True,
        )
        return info


# Flags we interpret; anything else is accepted and kept verbatim in ``extra``.
_ALIASES = {
    "model": "model_path",
    "tp": "tp_size",
    "tensor_parallel_size": "tp_size",
    "random_seed": "seed",
    "sim_seed": "seed",
}
_BOOLEAN_FLAGS = {
    "trust_remote_code",
    "speculative_ddtree_allow_hybrid_unsafe",
    "help",
    "sim_require_model",
}


def _split(argv: list[str]) -> list[tuple[str, str | None]]:
    """Pair each ``--flag`` with its value (or None), tolerating both spellings."""
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--") or token == "--":
            raise SimArgsError(f"unexpected argument {token!r}: the server takes only --flags")
        name, eq, value = token[2:].partition("=")
        key = name.replace("-", "_")
        if eq:
            pairs.append((key, value))
            i += 1
        elif key not in _BOOLEAN_FLAGS and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            pairs.append((key, argv[i + 1]))
            i += 2
        else:
            pairs.append((key, None))
            i += 1
    return pairs


def _int(key: str, value: str | None) -> int:
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise SimArgsError(f"--{key.replace('_', '-')} needs an integer, got {value!r}") from None


def _float(key: str, value: str | None) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise SimArgsError(f"--{key.replace('_', '-')} needs a number, got {value!r}") from None


def _parse_fault(spec: str) -> Fault:
    name, _, arg = spec.partition(":")
    if name in ("diverge", "crash-at-start", "never-ready", "ignore-forced"):
        return Fault(name)
    if name in (
        "crash-after",
        "crash-once-after",
        "slow",
        "leak",
        "slow-stop",
        "diverge-tp",
        "neighbours",
    ):
        try:
            value = float(arg)
        except ValueError:
            raise SimArgsError(f"--sim-fault {name} needs a number: {name}:N") from None
        if value <= 0:
            raise SimArgsError(f"--sim-fault {name}:{arg}: the number must be positive")
        return Fault(name, value)
    raise SimArgsError(
        f"unknown --sim-fault {spec!r}; known: diverge, crash-at-start, never-ready, "
        "ignore-forced, "
        "crash-after:N, crash-once-after:N, slow:X, leak:N, slow-stop:S, diverge-tp:N, "
        "neighbours:X"
    )


def _gpu_ids(tp_size: int, env: dict[str, str]) -> tuple[int, ...]:
    visible = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if not visible:
        return tuple(range(tp_size))
    try:
        ids = tuple(int(x) for x in visible.split(",") if x.strip())
    except ValueError:
        raise SimArgsError(f"CUDA_VISIBLE_DEVICES={visible!r} is not a list of ids") from None
    return ids[:tp_size]


def _speculation_flags() -> dict[str, tuple[EngineAdapter, str]]:
    """Every engine's speculation flags by their key here (``--speculative-num-steps`` is
    ``speculative_num_steps``): a rehearsal of any engine's plan passes its own flags."""
    return {
        flag.lstrip("-").replace("-", "_"): (a, flag)
        for a in adapters()
        for flag in a.speculation_flags
    }


def _apply_speculation(
    cfg: SimConfig, given: dict[EngineAdapter, dict[str, str | None]], env: dict[str, str]
) -> None:
    """What each engine's flags and environment state about speculation, as its adapter
    reads them; where two engines state the same field, the first in the registry's order
    wins. An engine's own algorithm that the simulator does not run is simulated as a chain
    drafter (EAGLE) of the depth it states, under its own name."""
    for a in adapters():
        try:
            spec = a.launch_speculation(given.get(a, {}), env, ALGORITHMS)
        except LaunchArgsError as exc:
            raise SimArgsError(str(exc)) from None
        if spec is None:
            continue
        for f in fields(spec):
            value = getattr(spec, f.name)
            if value is not None and getattr(cfg, f.name) is None:
                setattr(cfg, f.name, value)
        if spec.algorithm is None and spec.named_algorithm is not None and cfg.algorithm is None:
            cfg.algorithm = "EAGLE"


def _face(name: str) -> str:
    """The engine whose wire face the server shows: one with simulated log lines."""
    try:
        found = adapter(name)
    except ValueError as exc:
        raise SimArgsError(f"--sim-engine: {exc}") from None
    if found.log_format is None:
        raise SimArgsError(f"--sim-engine {name!r}: {found.label} has no simulated server")
    return found.name


def _text(key: str, value: str | None, now: Any) -> Any:
    return value


#: Each option the simulator reads: the config field it sets and how its value is read
#: (``(option, value, the field's value now) -> new value``); any other is kept in ``extra``.
_OPTIONS: dict[str, tuple[str, Callable[[str, str | None, Any], Any]]] = {
    "model_path": ("model_path", lambda k, v, now: v or now),
    "host": ("host", lambda k, v, now: v or now),
    "served_model_name": ("served_model_name", _text),
    "tp_size": ("tp_size", lambda k, v, now: _int(k, v)),
    "port": ("port", lambda k, v, now: _int(k, v)),
    "max_running_requests": ("max_running_requests", lambda k, v, now: _int(k, v)),
    "context_length": ("context_length", lambda k, v, now: _int(k, v)),
    "seed": ("seed", lambda k, v, now: _int(k, v)),
    "sim_burst": ("burst", lambda k, v, now: _int(k, v)),
    "mem_fraction_static": ("mem_fraction_static", lambda k, v, now: _float(k, v)),
    "speed": ("speed", lambda k, v, now: _float(k, v)),
    "sim_engine": ("engine", lambda k, v, now: _face(v or "")),
    "sim_gpu_state": ("gpu_state_dir", _text),
    "sim_require_model": ("require_model", lambda k, v, now: True),
    "sim_record": ("record_path", _text),
    "sim_record_prompts": ("record_prompts", lambda k, v, now: v or None),
}


def parse_args(argv: list[str], env: dict[str, str] | None = None) -> SimConfig:
    """Build a :class:`SimConfig` from a launch command line and environment."""
    env = dict(os.environ) if env is None else env
    cfg = SimConfig()
    faults: list[Fault] = []
    spec_flags = _speculation_flags()
    given: dict[EngineAdapter, dict[str, str | None]] = {}
    for raw_key, value in _split(argv):
        key = _ALIASES.get(raw_key, raw_key)
        if key in spec_flags:
            engine, flag = spec_flags[key]
            given.setdefault(engine, {})[flag] = value
            continue
        if key == "sim_fault":
            faults.append(_parse_fault(value or ""))
        elif key in _OPTIONS:
            attr, read = _OPTIONS[key]
            setattr(cfg, attr, read(key, value, getattr(cfg, attr)))
        else:
            cfg.extra[key] = True if value is None else value
    if cfg.tp_size < 1:
        raise SimArgsError("--tp-size must be at least 1")
    if cfg.speed <= 0:
        raise SimArgsError("--speed must be positive")
    if cfg.burst < 1:
        raise SimArgsError("--sim-burst must be at least 1")
    if not 0 < cfg.port < 65536:
        raise SimArgsError(f"--port {cfg.port} is not a TCP port")
    _apply_speculation(cfg, given, env)
    _apply_spec_defaults(cfg)
    cfg.faults = tuple(faults)
    cfg.gpu_state_dir = cfg.gpu_state_dir or env.get("SPECBENCH_SIM_STATE") or None
    if cfg.fault("ignore-forced"):  # a server that drops the forced-acceptance knob
        cfg.forced_accept = None
    cfg.gpu_ids = _gpu_ids(cfg.tp_size, env)
    return cfg


def _apply_spec_defaults(cfg: SimConfig) -> None:
    """Fill what the engine would infer, and pick a running-request cap the KV budget allows."""
    if cfg.algorithm == "DFLASH":
        cfg.num_draft_tokens = cfg.num_draft_tokens or 16
    elif cfg.algorithm == "DDTREE":
        cfg.num_draft_tokens = cfg.num_draft_tokens or 16
        cfg.ddtree_budget = cfg.ddtree_budget or 32
    elif cfg.algorithm is not None:
        cfg.num_steps = cfg.num_steps or 3
        cfg.eagle_topk = cfg.eagle_topk or 1
        cfg.num_draft_tokens = cfg.num_draft_tokens or cfg.num_steps + 1
    for name in ("num_draft_tokens", "ddtree_budget", "num_steps"):
        value = getattr(cfg, name)
        if value is not None and value < 1:
            raise SimArgsError(f"--speculative-{name.replace('_', '-')} must be at least 1")
    if cfg.max_running_requests is None:
        # Wide trees reserve verify slots per request, so fewer requests fit; this is what
        # makes a concurrency sweep queue beyond some level, as it does on the real server.
        if cfg.algorithm == "DDTREE":
            cfg.max_running_requests = max(4, min(32, 2048 // (cfg.ddtree_budget or 32)))
        elif cfg.algorithm is not None:
            cfg.max_running_requests = 32
        else:
            cfg.max_running_requests = 48

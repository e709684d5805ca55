"""The expanded plan: service groups (one server start each) and cells (one measurement each).

These are plain frozen dataclasses so that the engine, the simulator and the console can use
them without pydantic, and so that they serialise to the dry-run JSON as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

from specbench_tui.results.jsontypes import FieldTypeError, check_fields, conforms

WorkloadKind = Literal["single", "agentic", "concurrency", "capacity"]
Api = str  # one of an engine's APIs, by its plan name (engines/registry.py API_NAMES)


@dataclass(frozen=True)
class ServiceGroup:
    """One server process: a config at a TP size on a host, started once for all its cells."""

    id: str  # "<host>.<config>.tp<tp>", safe in a file name and a service unit name
    host: str
    host_kind: str  # the host's kind: its backend's name (hosts/backends/__init__.py)
    config: str
    label: str
    tp: int
    gpu_ids: tuple[int, ...]
    port: int
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    api: Api
    ready_timeout_s: float
    speculative: bool
    stop_before: tuple[str, ...] = ()
    # Packed (``[campaign] pack``): placed at run time on free GPUs beside other groups, so
    # ``gpu_ids`` and ``port`` here are the plan's defaults, not where it ran.
    packed: bool = False
    # Runs only with every GPU of the host free: the unpacked control of a packed group.
    exclusive: bool = False
    # The engine by its plan name (engines/registry.py); "" in logs written before groups
    # recorded it, which read as the default engine.
    engine: str = ""
    served_model_name: str | None = None  # the plan's override of the name requests carry
    spec_algorithm: str | None = None  # the algorithm the command asks for, as the engine names it
    model: str = ""  # the model directory on the host (where its chat template is read)
    chat_template: str | None = None  # the plan's template file, absolute (None: the model's)
    chat_template_on: str = "client"  # who renders the template: "client" or "server"
    run: int = 1  # which of the plan's ``[campaign] runs`` (a fresh server each)
    # The accept length its engine is made to give (``forced_accept``; None: real acceptance).
    forced_accept: float | None = None
    # A server already running, by its address (the config's ``url``): measured as it is,
    # never started, stopped or restarted; None for a server this tool starts.
    url: str | None = None
    # The group whose server runs this one's cells (an interference check's ``.solo``: its
    # cells once more on the same server, measured with no other group of the host
    # measuring); None for a group with a server of its own.
    rides: str | None = None

    def to_json(self) -> dict[str, Any]:
        # Shallow, as Cell.to_json: asdict() deep-copies, which dominates a big dry run.
        d = {name: getattr(self, name) for name in _GROUP_FIELDS}
        d["gpu_ids"] = list(self.gpu_ids)
        d["command"] = list(self.command)
        d["env"] = dict(self.env)
        d["stop_before"] = list(self.stop_before)
        return d

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ServiceGroup:
        """Rebuild a group from its JSON (the log of a campaign, the dry-run document).

        Keys this version does not know are ignored and missing ones take their defaults, so
        a log written by another version of the tool still reads.
        """
        d = _known(cls, obj)
        check_fields(cls, d, skip=("env",))
        env = d.get("env", ())
        if not (
            isinstance(env, dict) and all(isinstance(v, str) for v in env.values())
        ) and not conforms(env, tuple[tuple[str, str], ...]):
            raise FieldTypeError(f"'env' is {type(env).__name__}, not an object of strings")
        d["gpu_ids"] = tuple(int(g) for g in d.get("gpu_ids", ()))
        d["command"] = tuple(str(a) for a in d.get("command", ()))
        d["env"] = tuple(sorted(env.items())) if isinstance(env, dict) else tuple(map(tuple, env))
        d["stop_before"] = tuple(d.get("stop_before", ()))
        for key, default in _GROUP_DEFAULTS.items():
            d.setdefault(key, default)
        return cls(**d)


@dataclass(frozen=True)
class Cell:
    """One measurement: a workload (or one slice of it) against one service group.

    ``id`` is a hash of everything that decides what the cell measures, so the same plan gives
    the same ids and a change to one config only renews that config's cells.
    """

    id: str
    name: str  # human readable: "<group>/<workload>[/<prompt_set>/<max_tokens>|/c<level>]"
    group: str
    host: str
    config: str
    tp: int
    workload: str
    kind: WorkloadKind
    prompt_set: str | None
    max_tokens: int
    concurrency: int | None
    prompts: tuple[str, ...]  # prompt sets used (single: the one; agentic/concurrency: all)
    samples: int | None = None  # prompts drawn per set; None = all
    repeats: int = 1
    warmup: int = 0
    temperature: float = 0.0
    sessions: int = 0
    turns: int = 0
    tool_output_tokens: int = 0
    requests: int = 0  # concurrency: requests at this level; agentic: where sessions run
    # their questions' own turns, the requests of all of them
    timeout_s: float = 600.0
    params: tuple[tuple[str, Any], ...] = field(default=())
    # "cold": each measured request without a cached prefix; "warm": the server's cache kept
    # (what agentic and concurrency workloads measure by nature).
    prefix_cache: str = "warm"
    # Sampling beyond the temperature (None: the server's default) and the chat template's
    # kwargs (the workload's over the config's over [server]'s), as sorted (key, value) pairs.
    top_p: float | None = None
    top_k: int | None = None
    sampling_seed: int | None = None
    chat_template_kwargs: tuple[tuple[str, Any], ...] = ()
    run: int = 1  # which of the plan's ``[campaign] runs`` (its group's server started afresh)
    # Forced acceptance: the accept length its server was made to give (None: real
    # acceptance). Such a cell measures what an accept length buys, never the drafter: it is
    # reported apart, never pooled with real-acceptance cells, nor judged for greedy outputs.
    forced_accept: float | None = None
    # A capacity search (``plan/capacity.py``): the plan's levels (its bracket and the points
    # tried first), the most levels it tries, and the [slo] it judges them by: limits in
    # seconds as sorted (name, seconds) pairs, and the target share. ``requests`` and
    # ``warmup`` are per level tried.
    levels: tuple[int, ...] = ()
    max_points: int = 0
    slo: tuple[tuple[str, float], ...] = ()
    slo_target: float = 0.0

    def to_json(self) -> dict[str, Any]:
        # A shallow copy: asdict() deep-copies, which dominates a 10,000-cell dry run.
        d = {name: getattr(self, name) for name in _CELL_FIELDS}
        d["prompts"] = list(self.prompts)
        d["params"] = dict(self.params)
        d["chat_template_kwargs"] = dict(self.chat_template_kwargs)
        d["levels"] = list(self.levels)
        d["slo"] = dict(self.slo)
        return d

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Cell:
        """Rebuild a cell from its JSON; unknown keys are ignored (see ServiceGroup.from_json)."""
        d = _known(cls, obj)
        check_fields(cls, d, skip=("params", "chat_template_kwargs", "slo"))
        for key in ("params", "chat_template_kwargs", "slo"):  # objects in JSON, pairs here
            if not isinstance(d.get(key, {}), dict | list):
                raise FieldTypeError(f"{key!r} is {type(d[key]).__name__}, not an object")
        d["prompts"] = tuple(d.get("prompts", ()))
        params = d.get("params", ())
        d["params"] = tuple(params.items()) if isinstance(params, dict) else tuple(params)
        kwargs = d.get("chat_template_kwargs", ())
        d["chat_template_kwargs"] = (
            tuple(sorted(kwargs.items())) if isinstance(kwargs, dict) else tuple(map(tuple, kwargs))
        )
        d["levels"] = tuple(int(v) for v in d.get("levels", ()))
        slo = d.get("slo", ())
        d["slo"] = tuple(sorted((str(k), float(v)) for k, v in dict(slo).items()))
        for key, default in _CELL_DEFAULTS.items():
            d.setdefault(key, default)
        return cls(**d)


_CELL_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Cell))
_GROUP_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(ServiceGroup))
# What an old log may lack: enough to rebuild a cell or group that can be shown and reported.
_CELL_DEFAULTS: dict[str, Any] = {
    "name": "",
    "group": "",
    "host": "",
    "config": "",
    "tp": 0,
    "workload": "",
    "kind": "single",
    "prompt_set": None,
    "max_tokens": 0,
    "concurrency": None,
}
_GROUP_DEFAULTS: dict[str, Any] = {
    "host": "",
    "host_kind": "sim",
    "config": "",
    "label": "",
    "tp": 0,
    "port": 0,
    "api": "",
    "ready_timeout_s": 900.0,
    "speculative": False,
}


def _known(cls: type, obj: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in obj.items() if k in names}


def planned_requests(cell: Cell, n_prompts: int | None = None) -> int:
    """Measured requests a cell will send (warm-up excluded).

    Only single cells need ``n_prompts`` (the size of their prompt set), and only when
    ``cell.samples`` is unset or may exceed the set; the other kinds never read prompts for it.
    """
    if cell.kind == "agentic":
        # ``requests`` where the sessions run their questions' own turns (MT-Bench).
        return cell.requests or cell.sessions * cell.turns
    if cell.kind == "concurrency":
        return cell.requests
    if cell.kind == "capacity":  # at most: the search may end in fewer levels
        return cell.requests * cell.max_points
    if n_prompts is None:
        if cell.samples is None:
            raise ValueError(f"cell {cell.name}: the prompt count is needed (samples = all)")
        n = cell.samples
    else:
        n = n_prompts if cell.samples is None else min(cell.samples, n_prompts)
    return n * cell.repeats


def baseline_config(ref: str | None, known: list[str]) -> str | None:
    """The config that is the plan's baseline ``ref`` among ``known`` (plan order): a
    parametrized base name stands for its first expansion."""
    if not ref:
        return None
    expanded = [n for n in known if n.startswith(ref + "-")]
    return ref if ref in known or not expanded else expanded[0]

"""The registry of plan host kinds: one folder a backend (``hosts/backends/<name>/``, its
``BACKEND``: a ``Backend``, ``hosts/backend.py``), and the plan's ``HostSpec`` built from them,
the shared keys (``host_table.py``) and one optional key per backend, named as it.

The plan, the engine and the console ask this registry (its traits, its builders and checks)
and never name a kind. A new backend is its folder and its name in ``BUILT_IN``; a backend
kept outside the product (a test's, a site's own) is a module that exports ``BACKEND``, named
in ``SPECBENCH_BACKENDS`` (comma-separated) before the plan is read. The plan loads this
module, so what runs a host is imported only when it is built.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Optional, TypeVar

from pydantic import Field, create_model, model_validator

from specbench_tui.errors import InputError
from specbench_tui.hosts.backend import Backend, HostBuild
from specbench_tui.hosts.batch_kind import BatchKind
from specbench_tui.hosts.host_table import HostTable
from specbench_tui.hosts.options import HostOptions
from specbench_tui.results.cells import ServiceGroup
from specbench_tui.table_types import PlanError

T = TypeVar("T")

if TYPE_CHECKING:
    from specbench_tui.hosts.host import Host, HostReport

#: The product's backends, each a folder here, in the order a plan's messages list them.
BUILT_IN = ("ssh", "local", "sim", "slurm")
#: Modules of backends kept outside the product, each exporting ``BACKEND``.
PLUGINS_VARIABLE = "SPECBENCH_BACKENDS"


def _load() -> dict[str, Backend]:
    names = [f"{__name__}.{b}" for b in BUILT_IN]
    names += [m.strip() for m in os.environ.get(PLUGINS_VARIABLE, "").split(",") if m.strip()]
    out: dict[str, Backend] = {}
    for module in names:
        try:
            entry = importlib.import_module(module).BACKEND
        except (ImportError, AttributeError) as e:
            raise InputError(
                f"{PLUGINS_VARIABLE} names {module!r}, which is not a module exporting BACKEND "
                f"({e})"
            ) from e
        if entry.name in out:
            raise InputError(f"two backends are named {entry.name!r} ({module})")
        out[entry.name] = entry
    return out


BACKENDS: dict[str, Backend] = _load()


class _Kinds(HostTable):
    """What a host table says of its kind, from the registry."""

    @property
    def kinds_set(self) -> list[str]:
        """The backends whose key this table sets (a valid table sets exactly one)."""
        return [k for k in BACKENDS if getattr(self, k) not in (None, False)]

    @property
    def kind(self) -> str:
        """The host's kind: the backend whose key it sets (a simulated one wins, as a
        rehearsal's host does; the first backend when none is set, which the table's check
        reports)."""
        chosen = sorted(self.kinds_set, key=lambda k: not BACKENDS[k].simulated)
        return chosen[0] if chosen else next(iter(BACKENDS))

    @property
    def sim_speed(self) -> float:
        """How much faster than real time this host's simulator runs: its ``speed`` on a sim
        host, and for a rehearsal (``--sim``) of a real host x50 unless it sets one."""
        return self.speed if simulated(self.kind) or "speed" in self.model_fields_set else 50.0


def _filled(cls: type, data: Any) -> Any:
    """Each backend's own defaults of the table's shared keys (``Backend.fill_table``)."""
    if isinstance(data, dict):
        for b in BACKENDS.values():
            if b.fill_table is not None and b.name in data:
                data = b.fill_table(data)
    return data


def _key(b: Backend) -> tuple[Any, Any]:
    """The plan key of a backend: a flag (false by default) or an optional value; the first
    says that a table sets exactly one of them."""
    said = b.meaning
    if b is next(iter(BACKENDS.values())):
        said += f" A host sets exactly one of {', '.join(BACKENDS)}."
    if b.table is bool:
        return (bool, Field(default=False, description=said))
    return (Optional[b.table], Field(default=None, description=said))  # noqa: UP045


#: A ``[hosts.NAME]`` table: the shared keys and each backend's own.
HostSpec = create_model(  # type: ignore[call-overload]
    "HostSpec",
    __base__=_Kinds,
    __module__=__name__,
    __validators__={"_filled": model_validator(mode="before")(classmethod(_filled))},
    **{b.name: _key(b) for b in BACKENDS.values()},
)


#: The kind every host of a rehearsal (``--sim``) is built as.
REHEARSAL = next(b.name for b in BACKENDS.values() if b.simulated)
#: The kind a batch job's own node is to the job: the machine it runs on.
THIS_MACHINE = next(b.name for b in BACKENDS.values() if b.on_this_machine and not b.simulated)


def simulated(kind: str) -> bool:
    """Whether hosts of ``kind`` are the embedded simulator."""
    return backend(kind).simulated


def on_this_machine(kind: str) -> bool:
    """Whether hosts of ``kind`` run their servers on the machine the campaign runs on."""
    return backend(kind).on_this_machine


def backend(kind: str) -> Backend:
    try:
        return BACKENDS[kind]
    except KeyError:
        raise ValueError(f"no backend for hosts of kind {kind!r}") from None


def batch_kind(kind: str) -> BatchKind | None:
    """The plan side of a batch host's jobs; None for a machine host."""
    return backend(kind).batch


def job_gpu_variables() -> tuple[str, ...]:
    """Every batch backend's variables that name a job's GPUs."""
    return tuple(v for b in BACKENDS.values() for v in b.job_gpu_variables)


def check_host_table(name: str, host: HostSpec) -> list[PlanError]:
    """A ``[hosts.NAME]`` table: one kind, then each kind's own checks."""
    chosen = host.kinds_set
    errs: list[PlanError] = []
    if len(chosen) != 1:
        words = ", ".join(b.plan_words for b in BACKENDS.values())
        found = len(chosen) or "none"
        errs.append(PlanError(("hosts", name), f"set exactly one of {words} (found {found})"))
    for kind in chosen:
        errs += backend(kind).check_table(name, host)
    return errs


def build_host(
    hs: HostSpec, name: str, campaign: str, options: HostOptions | None = None, **kw: Any
) -> Host:
    """The Host of a machine host of the plan (``kw``: the rest of ``HostBuild``; ``kind``
    builds it as another kind, as a rehearsal does)."""
    entry = backend(kw.pop("kind", None) or hs.kind)
    if entry.host is None:
        raise ValueError(f"host {name}: a {entry.name} host runs batch jobs, not a Host")
    kw.setdefault("gpu_ids", hs.gpu_ids)
    return entry.host(HostBuild(name, hs, campaign, options or HostOptions(), **kw))


async def check_host(
    hs: HostSpec,
    name: str,
    campaign: str,
    kind: str,
    groups: list[ServiceGroup],
    options: HostOptions,
) -> HostReport:
    """``--dry-run --check`` of one host: reached as a campaign would, left as it was."""
    entry = backend(kind)
    if entry.batch_check is not None:
        return await entry.batch_check(hs, name, campaign, groups, options)
    host = build_host(hs, name, campaign, options, kind=kind, groups=groups)
    return await _closing(host, host.check(groups))


async def preflight_host(
    hs: HostSpec,
    name: str,
    campaign: str,
    kind: str,
    groups: list[ServiceGroup],
    options: HostOptions,
    **kw: Any,
) -> None:
    """Before a campaign: raise InputError with the first thing that would stop the host's
    groups (nothing for a host that needs no reaching)."""
    entry = backend(kind)
    if not entry.preflights:
        return
    if entry.batch_check is None:
        host = build_host(hs, name, campaign, options, kind=kind, groups=groups, **kw)
        await _closing(host, host.preflight(groups))  # type: ignore[attr-defined]
        return
    report = await entry.batch_check(hs, name, campaign, groups, options)
    if report.problems:
        raise InputError(f"host {name}: {report.problems[0]}")


async def _closing(host: Host, work: Awaitable[T]) -> T:
    """``work`` on a host built for it alone, closed after whatever it did."""
    try:
        return await work
    finally:
        await host.close()

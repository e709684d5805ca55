"""A backend kept outside the product, as a site would keep its own: ``shelf = { label = ... }``
hosts are machines of this one, told apart by a label. It is named in ``SPECBENCH_BACKENDS``
and registers by exporting ``BACKEND``; no product file names it."""

from __future__ import annotations

from typing import Any

from specbench_tui.hosts.backend import Backend, HostBuild
from specbench_tui.table_types import PlanError, Strict


class ShelfTable(Strict):
    label: str  # which shelf of the rack


def _host(b: HostBuild) -> Any:
    from specbench_tui.hosts.host import Host

    host = Host(b.name, b.gpus, **b.common())
    host.kind = "shelf"
    return host


def _check(name: str, host: Any) -> list[PlanError]:
    if not host.shelf.label.strip():
        return [PlanError(("hosts", name, "shelf", "label"), "name the shelf")]
    return []


BACKEND = Backend(
    "shelf",
    describe=lambda h, _: f"shelf {h.shelf.label}, {h.gpus} GPUs",
    table=ShelfTable,
    meaning="A machine of this one on a labelled shelf (a backend kept in the tests).",
    example={"label": "rack 3"},
    check_table=_check,
    host=_host,
    on_this_machine=True,
    plan_words='shelf = { label = "..." }',
)

"""Server deaths: per service group, how often its server died while the group needed it and
how many attempts of its cells were set aside unfinished. A death is an infrastructure fault,
never a result: the attempt it cut keeps its rows apart (never counted) and the cell ran again
on a new server, so the figures of the other tables hold no request lost to a dead server.
The section is there only when something died or was cut."""

from __future__ import annotations

from specbench_tui.report.blocks import Cell, Column, Para, Section, Table, text
from specbench_tui.report.inputs import Inputs


def build(inp: Inputs) -> Section | None:
    groups = [g for g in inp.state.groups.values() if g.deaths or g.interrupted]
    if not groups:
        return None
    deaths = sum(len(g.deaths) for g in groups)
    cut = sum(g.interrupted for g in groups)
    sec = Section("Server deaths and interrupted attempts")
    sec.add(
        Para(
            text(
                f"{deaths} server death(s) and {cut} interrupted attempt(s) in "
                f"{len(groups)} service group(s). An attempt cut by a death, a dropped link, "
                "a pause or abort, or a crash of the tool keeps its rows apart from the "
                "counted ones and ran again whole; a group fails its cells only once its "
                "server restarts are spent."
            )
        )
    )
    rows = []
    for g in sorted(groups, key=lambda g: g.id):
        last = g.deaths[-1] if g.deaths else None
        what = ""
        if last is not None:
            where = f" during {last.cell}" if last.cell else " between cells"
            what = f"{last.reason}{where}"
        rows.append(
            [
                Cell(g.id, code=True),
                Cell(str(len(g.deaths))),
                Cell(str(g.interrupted)),
                Cell(what or "—"),
            ]
        )
    sec.add(
        Table(
            "Server deaths and interrupted attempts per group",
            [
                Column("Group", "l"),
                Column("Deaths"),
                Column("Interrupted"),
                Column("Last death", "p", 0.5),
            ],
            rows,
            small=True,
        )
    )
    return sec

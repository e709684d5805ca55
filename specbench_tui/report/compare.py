"""Several campaigns side by side (``--report A B ...``): the same configs across two runs, or
two engines, with the change of each figure against the first campaign and whether it is beyond
noise (Welch's test on the units of the two campaigns, 5%).

Noise here is what changes from one run of a server to the next: a campaign with the plan's
``[campaign] runs`` has one unit per run (each a fresh server), and its figures' spread is
that variation. A campaign of one run knows only the spread of the repeats inside that run,
which a restart, a warmer GPU or another node can exceed many times over; its comparisons say
"within-run only" and never "beyond noise". Rows present in one campaign only are listed in a
table of their own, never dropped.

Rows are matched on TP, workload kind, workload, concurrency level and config, and on the host
too where the campaigns share host names; campaigns on different hosts are compared config by
config and the report says so. Each campaign's figures are its own comparison frame
(report/frames.py), so the numbers are those of each campaign's own report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from specbench_tui.bench.figures import FIGURE_NAMES, defined
from specbench_tui.report import format as f
from specbench_tui.report.blocks import (
    Bullets,
    Cell,
    Chart,
    Charts,
    Column,
    Para,
    Point,
    Section,
    Series,
    Table,
    bold,
    code,
    text,
)
from specbench_tui.report.build import Report, title_of
from specbench_tui.report.frames import FAILED_MARK, UNCHECKED_MARK
from specbench_tui.report.inputs import Inputs, load_inputs
from specbench_tui.report.sections.common import FIELLER_BARS, compared
from specbench_tui.report.sections.summary import cells_text, status_text
from specbench_tui.report.stats import Mean, Ratio, ratio_ci

KEYS = ("tp", "kind", "workload", "concurrency", "config")


def _mean(r: dict[str, Any]) -> Mean:
    return Mean(
        r["decode_tok_s"], r["n"], r["decode_tok_s_sd"], r["decode_tok_s_lo"], r["decode_tok_s_hi"]
    )


def _letter(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else f"#{i + 1}"


def build_comparison(roots: list[Path]) -> Report:
    inps = [load_inputs(r) for r in roots]
    frames = [compared(i) for i in inps]
    host_sets = [set(fr["host"].to_list()) for fr in frames]
    keys = match_keys(frames)
    by_host = "host" in keys
    sec = Section("Campaigns compared")
    sec.add(
        Table(
            "The campaigns",
            [
                Column("", "l"),
                Column("Campaign", "l"),
                Column("Status", "p", 0.28),
                Column("Cells", "p", 0.22),
                Column("Hosts", "l"),
                Column("Plan hash", "l"),
            ],
            [
                [
                    Cell(_letter(i), bold=True),
                    Cell(inp.state.campaign or inp.root.name, code=True),
                    Cell(status_text(inp) + (" (simulated)" if inp.state.simulated else "")),
                    Cell(cells_text(inp)),
                    Cell(", ".join(sorted(host_sets[i])) or "—"),
                    Cell(inp.state.plan_hash or "—", code=True),
                ]
                for i, inp in enumerate(inps)
            ],
            small=True,
        )
    )
    notes = [
        text(
            defined("decode_tok_s_total"),
            " Each campaign's mean carries its 95% Student-t interval over its units; the "
            "unit is a run (a fresh server each, ",
            code("[campaign] runs"),
            ") where a campaign has two or more, else a repeat (a session for agentic). The "
            "change is the ratio to campaign A with its 95% interval (Fieller); beyond noise "
            "where that interval excludes 1 (a t-test at 5%) and both campaigns' units are "
            "runs. Where either has a single run its interval knows only the repeats inside "
            "that run, not what changes from one server start to the next: such a change "
            "says 'within-run only', whatever its interval. A concurrency level of one run "
            "is a single cell: no verdict.",
        )
    ]
    if not by_host:
        notes.append(
            text(
                bold("Different hosts: "),
                "the campaigns share no host, so configs are compared across hosts.",
            )
        )
    if any(i.state.simulated for i in inps):
        notes.append(text(bold("Simulated: "), "some campaigns ran on the simulated host."))
    sec.add(Bullets(notes))
    rows, alone = matched(frames, keys)
    if not rows:
        sec.add(Para(text("The campaigns have no config, TP and workload in common."), "warning"))
    for kind in ("single", "agentic", "concurrency"):
        part = [r for r in rows if r["key"]["kind"] == kind]
        if part:
            sec.add(*_kind_blocks(kind, part, len(inps)))
    if alone:
        sec.add(_alone_table(alone, len(inps)))
    labels = " · ".join(f"{_letter(i)} = {r.name}" for i, r in enumerate(roots))
    return Report(
        title=f"{len(roots)} campaigns side by side",
        subtitle=labels,
        simulated=any(i.state.simulated for i in inps),
        sections=[sec, *(_per_campaign(inp, i) for i, inp in enumerate(inps))],
    )


def _per_campaign(inp: Inputs, i: int) -> Section:
    s = Section(f"Campaign {_letter(i)}: {title_of(inp)}", level=1)
    s.add(Para(text("Results directory ", code(str(inp.root)), f"; {cells_text(inp)}.")))
    return s


def match_keys(frames: list[pl.DataFrame]) -> list[str]:
    """What rows are matched on: ``KEYS``, and the host where every campaign shares a host
    name with the first (else configs are compared across hosts)."""
    host_sets = [set(fr["host"].to_list()) for fr in frames]
    by_host = all(h & host_sets[0] for h in host_sets[1:])
    return list(KEYS) + (["host"] if by_host else [])


def matched(
    frames: list[pl.DataFrame], keys: list[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The keys present in campaign A and at least one other (compared), and every other key
    (in one campaign only, or in several but not in A): listed, never dropped. Each entry is
    ``{"key": ..., "rows": [the row of each campaign, or None]}``."""
    index = []
    for fr in frames:
        index.append({tuple(r[k] for k in keys): r for r in fr.to_dicts()})
    every: dict[tuple[Any, ...], None] = {}
    for ix in index:
        every.update(dict.fromkeys(ix))
    matched, alone = [], []
    for k in every:
        rows = [ix.get(k) for ix in index]
        entry = {"key": dict(zip(keys, k, strict=True)), "rows": rows}
        if rows[0] is not None and any(o is not None for o in rows[1:]):
            matched.append(entry)
        else:
            alone.append(entry)
    return matched, alone


def _change(a: dict[str, Any], b: dict[str, Any] | None) -> tuple[str, str, Any]:
    """The ratio of B's figure to A's, with its interval, and the verdict on it."""
    if b is None or a["untimed"] or b["untimed"]:
        return "—", "", None
    verdict, ratio = noise_verdict(a, b, _mean(a), _mean(b))
    if ratio is None:
        return "—", "", None
    return f.with_ci(ratio.value, ratio.lo, ratio.hi, f.speedup), verdict, ratio


def noise_verdict(
    a: dict[str, Any], b: dict[str, Any], ma: Mean, mb: Mean
) -> tuple[str, Ratio | None]:
    """The noise test of one figure of a matched row: ``mb`` over ``ma`` (the figure's mean
        over the units of campaign B's row ``b`` and of A's row ``a``) with Fieller's interval,
        and the verdict on it: "beyond noise" or "within noise" where both rows' units are runs;
        "within-run only", "(differs within a run)" added where the interval excludes 1, where
        either row's units lie inside one run; "too few units" where the ratio has no interval
    (one unit a side, or a mean's interval reaching zero: report/stats.py); "single
        run" for a concurrency level of one run (one cell). No ratio where a mean is not positive.
    """
    ratio = ratio_ci(mb, ma)
    if ratio is None:
        return "", None
    across = bool(a.get("between_runs")) and bool(b.get("between_runs"))
    if a["kind"] == "concurrency" and not across:
        verdict = "single run"
    elif ratio.lo is None:  # one unit a side, or an interval too wide to bound (stats.py)
        verdict = "too few units"
    elif not across:
        verdict = "within-run only" + (" (differs within a run)" if ratio.beyond_one else "")
    else:
        verdict = "beyond noise" if ratio.beyond_one else "within noise"
    return verdict, ratio


def _name(rows: list[dict[str, Any] | None]) -> str:
    """A config's label, marked where it failed a check (or is unchecked) in any campaign."""
    present = [x for x in rows if x is not None]
    marks = []
    for i, x in enumerate(rows):
        if x is not None and (x.get("failed_check") or x.get("unchecked")):
            what = FAILED_MARK if x.get("failed_check") else UNCHECKED_MARK
            marks.append(f"{what} in {_letter(i)}")
    return present[0]["label"] + (f" [{', '.join(marks)}]" if marks else "")


def _alone_table(entries: list[dict[str, Any]], n: int) -> Table:
    """The rows not compared: each with the campaigns it is in and its figure there."""
    body = []
    order = {"single": 0, "agentic": 1, "concurrency": 2}
    for e in sorted(
        entries,
        key=lambda e: (
            order.get(e["key"]["kind"], 3),
            str(e["key"].get("host") or ""),
            e["key"]["tp"],
            str(e["key"]["workload"]),
            e["key"]["concurrency"] or 0,
            str(e["key"]["config"]),
        ),
    ):
        present = [x for x in e["rows"] if x is not None]
        first = present[0]
        hosts = sorted({str(x["host"]) for x in present})
        n = first["concurrency"]
        level = f" ({n} client{'s' * (n != 1)})" if first["kind"] == "concurrency" else ""
        body.append(
            [
                Cell("/".join(hosts)),
                Cell(_name(e["rows"])),
                Cell(str(first["tp"])),
                Cell(f"{first['workload']}{level}"),
                Cell(", ".join(_letter(i) for i, x in enumerate(e["rows"]) if x is not None)),
                *(
                    Cell(
                        f.with_ci(
                            x["decode_tok_s"], x["decode_tok_s_lo"], x["decode_tok_s_hi"], f.toks
                        )
                        if x
                        else "—"
                    )
                    for x in e["rows"]
                ),
            ]
        )
    return Table(
        "Rows not compared: present in one campaign only (or not in A), with their decode tok/s",
        [
            Column("Host", "l"),
            Column("Config", "l"),
            Column("TP"),
            Column("Workload", "l"),
            Column("In", "l"),
            *(Column(f"{_letter(i)} {FIGURE_NAMES['decode_tok_s_total']}") for i in range(n)),
        ],
        body,
        small=True,
        key_columns=4,
    )


def _kind_blocks(kind: str, rows: list[dict[str, Any]], n: int) -> list[Any]:
    blocks: list[Any] = []
    title = {"single": "Single-stream", "agentic": "Agentic", "concurrency": "Concurrency"}[kind]
    cols = [Column("Host", "l"), Column("Config", "l"), Column("TP"), Column("Workload", "l")]
    if kind == "concurrency":
        cols.append(Column("Clients"))
    cols += [Column(f"{_letter(i)} {FIGURE_NAMES['decode_tok_s_total']}") for i in range(n)]
    cols += [c for i in range(1, n) for c in (Column(f"{_letter(i)}/A"), Column("", "l"))]
    body = []
    charted = rows[0]["key"]["workload"]  # one chart per kind: its first workload
    chart_points: dict[tuple[int, int], list[tuple[str, Any]]] = {}
    configs: list[str] = []
    for r in rows:
        a = r["rows"][0]
        hosts = sorted({str(x["host"]) for x in r["rows"] if x})
        name = _name(r["rows"])
        line = [Cell("/".join(hosts)), Cell(name), Cell(str(a["tp"])), Cell(a["workload"])]
        if kind == "concurrency":
            line.append(Cell(str(a["concurrency"])))
        for x in r["rows"]:
            line.append(
                Cell(
                    f.with_ci(x["decode_tok_s"], x["decode_tok_s_lo"], x["decode_tok_s_hi"], f.toks)
                    if x
                    else "—"
                )
            )
        for i, x in enumerate(r["rows"][1:], start=1):
            txt, verdict, ratio = _change(a, x)
            line += [Cell(txt, bold=verdict == "beyond noise"), Cell(verdict)]
            if ratio is not None and kind != "concurrency" and a["workload"] == charted:
                if name not in configs:
                    configs.append(name)
                chart_points.setdefault((i, a["tp"]), []).append((name, ratio))
        body.append(line)
    blocks.append(
        Table(
            f"{title}: decode tok/s per campaign and the change against A",
            cols,
            body,
            small=True,
            key_columns=5 if kind == "concurrency" else 4,
        )
    )
    charts = []
    for i in range(1, n):
        series = []
        for j, tp in enumerate(sorted({tp for (ii, tp) in chart_points if ii == i})):
            pts = [
                Point(configs.index(lbl), r.value, r.lo, r.hi) for lbl, r in chart_points[(i, tp)]
            ]
            series.append(Series(f"TP {tp}", sorted(pts, key=lambda p: p.x), color=j))
        chart = Chart(
            f"{title} ({charted}): decode tok/s of {_letter(i)} over A per config and TP",
            "bars",
            "",
            f"{_letter(i)} / A",
            series,
            categories=configs,
            hline=1.0,
            ymin=0.0,
            wide=True,
            bars=FIELLER_BARS,
        )
        if chart.has_points:
            charts.append(chart)
    if charts:
        blocks.append(Charts(charts))
    return blocks

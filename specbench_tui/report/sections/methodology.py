"""How the numbers were made: what each workload sent (prompts, lengths, repeats, warm-up,
sessions, levels), in what order, the prefix-cache policy and what the cache actually served,
the figures' definitions and the interval method."""

from __future__ import annotations

from typing import Any

import polars as pl

from specbench_tui.bench.figures import DEFINITIONS, FIGURE_NAMES
from specbench_tui.report import format as f
from specbench_tui.report.blocks import (
    Bullets,
    Cell,
    Column,
    Section,
    Table,
    bold,
    code,
    text,
)
from specbench_tui.report.frames import (
    accept_definitions,
    baseline,
    decode_left_out_by_kind,
    label,
    ran_adapters,
    requests,
)
from specbench_tui.report.inputs import Inputs
from specbench_tui.report.stats import METHOD

#: The report's table of figures: each figure's name and its one definition (bench/figures.py).
FIGURES = tuple(
    (name[:1].upper() + name[1:], DEFINITIONS[key])
    for key in DEFINITIONS
    for name in (FIGURE_NAMES[key],)
)


def _workloads(inp: Inputs) -> list[dict[str, Any]]:
    """One entry per workload, from the cells the campaign planned (what actually ran)."""
    out: dict[str, dict[str, Any]] = {}
    for c in inp.state.cells.values():
        cell = c.cell
        if cell is None:
            continue
        w = out.setdefault(
            cell.workload,
            {
                "name": cell.workload,
                "kind": cell.kind,
                "prompts": set(),
                "max_tokens": set(),
                "levels": set(),
                "temperatures": set(),
                "cell": cell,
                "cells": 0,
            },
        )
        w["prompts"].update(cell.prompts or ((cell.prompt_set,) if cell.prompt_set else ()))
        w["max_tokens"].add(cell.max_tokens)
        w["temperatures"].add(cell.temperature)
        if cell.concurrency:
            w["levels"].add(cell.concurrency)
        w["cells"] += 1
    return list(out.values())


def _what(w: dict[str, Any]) -> str:
    c = w["cell"]
    if w["kind"] == "single":
        samples = "all prompts" if c.samples is None else f"{c.samples} prompts"
        return (
            f"{samples} of each set, {f.plural(c.repeats, 'repeat')} of each prompt back to "
            f"back after {f.plural(c.warmup, 'warm-up request')} with that prompt"
        )
    if w["kind"] == "agentic":
        return (
            f"{f.plural(c.sessions, 'session')} of {f.plural(c.turns, 'turn')}, "
            f"{c.tool_output_tokens} tool-output tokens added per turn, "
            f"{f.plural(c.warmup, 'warm-up request')} first"
        )
    levels = ", ".join(str(v) for v in sorted(w["levels"]))
    return (
        f"{c.requests} requests per level at {levels} clients, "
        f"{f.plural(c.warmup, 'warm-up request')} first"
    )


def _cache_policy(inp: Inputs) -> str:
    """How the prefix cache stood for each workload's measured requests, as the cells
    recorded it (``prefix_cache`` in their figures), and the plan's policy behind it."""
    seen: dict[str, set[str]] = {}
    for c in inp.state.cells.values():
        if c.status == "done" and c.cell is not None:
            how = c.figures.get("prefix_cache") or (
                "warm" if c.cell.prefix_cache == "warm" else "not recorded"
            )
            seen.setdefault(c.workload, set()).add(str(how))
    if not seen:
        return "no cell finished yet"
    parts = [f"{w}: {'; '.join(sorted(h))}" for w, h in sorted(seen.items())]
    return (
        "; ".join(parts)
        + '. Single-stream workloads are cold unless the plan sets prefix_cache = "warm" '
        "(then repeats, and the warm-up before them, are served from the cache); agentic and "
        "concurrency workloads keep the cache, as the workloads they model do"
    )


def _order(inp: Inputs) -> str:
    """How the groups were scheduled: one after another, or packed side by side on disjoint
    GPUs (the plan's ``pack``), and each host on its own at the same time."""
    hosts = inp.state.hosts or sorted({g.host for g in inp.state.groups.values() if g.host})
    campaign = inp.plan.get("campaign") or {}
    out = "Service groups run in plan order, one server start each"
    if campaign.get("pack"):
        out += (
            "; packed: groups that fit on disjoint GPUs of a host run side by side, so "
            "neighbours may disturb each other's timings"
        )
        if campaign.get("pack_control"):
            out += " (each host's first group ran once more alone, for comparison)"
    else:
        out += ", one after another on each host"
    if len(hosts) > 1:
        out += f"; the {len(hosts)} hosts work at the same time"
    return out + ". Within a group its cells run in plan order, one at a time."


def build(inp: Inputs) -> Section:
    sec = Section("Methodology")
    base = baseline(inp)
    ws = _workloads(inp)
    runs = max((c.cell.run for c in inp.state.cells.values() if c.cell is not None), default=1)
    rows = [
        [
            Cell(w["name"], code=True),
            Cell(w["kind"]),
            Cell(", ".join(sorted(w["prompts"])) or "—"),
            Cell(", ".join(str(m) for m in sorted(w["max_tokens"]))),
            Cell(", ".join(f"{t:g}" for t in sorted(w["temperatures"]))),
            Cell(_what(w)),
            Cell(str(w["cells"])),
        ]
        for w in ws
    ]
    sec.add(
        Table(
            "Workloads as planned",
            [
                Column("Workload", "l"),
                Column("Kind", "l"),
                Column("Prompt sets", "p", 0.16),
                Column("Max tokens", "l"),
                Column("Temp."),
                Column("What was sent", "p", 0.38),
                Column("Cells"),
            ],
            rows,
            small=True,
        )
    )
    req = requests(inp)
    cached = []
    if req.height:
        agg = (
            req.group_by("kind")
            .agg(
                (
                    pl.col("cached_tokens").sum().cast(pl.Float64)
                    / pl.col("prompt_tokens").sum().cast(pl.Float64)
                ).alias("share")
            )
            .sort("kind")
        )
        cached = [f"{r['kind']} {f.share(r['share'])}" for r in agg.to_dicts()]
    sec.add(
        Bullets(
            [
                text(bold("Order. "), _order(inp)),
                text(
                    bold("Warm-up. "),
                    "Warm-up requests are sent and discarded before each cell's measured "
                    "requests (single-stream: before each prompt's repeats); they take CUDA "
                    "graph capture, JIT and allocator growth out of the measurement.",
                ),
                text(bold("Prefix cache. "), _cache_policy(inp) + "."),
                text(
                    bold("Served from the prefix cache "),
                    "(cached over prompt tokens, as the server reported them): "
                    + (", ".join(cached) if cached else "not recorded")
                    + ".",
                ),
                text(bold("Baseline. "), f"{label(inp, base)} (", code(base), ").")
                if base
                else text(bold("Baseline. "), "none: the plan names none, so no speed-ups."),
                text(bold("Statistics. "), METHOD[0].upper() + METHOD[1:] + "."),
                text(
                    bold("Units. "),
                    "Single-stream: a repeat (one pass over the workload's prompts and output "
                    "lengths). Agentic: a session. Concurrency: a level is one cell, reported "
                    "without an interval. Results of different hosts, TP sizes and workload "
                    "kinds are never pooled."
                    + (
                        f" The plan ran every group {runs} times ([campaign] runs), each with "
                        "a fresh server: where a figure has two or more runs its unit is the "
                        "run (the mean over that run's units), so its interval spans "
                        "run-to-run variation, a concurrency level's too."
                        if runs > 1
                        else " One run of each group: the intervals span the repeats within "
                        "that run, not what changes from one server start to the next "
                        "(set [campaign] runs for that)."
                    ),
                ),
            ]
        )
    )
    figures = [*_figures(inp), ("Accept length", _accept_definition(inp))]
    sec.add(
        Table(
            "Figures, named once",
            [Column("Figure", "l"), Column("Definition", "p", 0.7)],
            [[Cell(n, bold=True), Cell(d)] for n, d in figures],
            small=True,
        )
    )
    left = decode_left_out_by_kind(inp)
    if left:
        sec.add(
            Bullets(
                [
                    text(
                        bold("Left out of decode tok/s. "),
                        "; ".join(f"{kind}: {why}" for kind, why in left.items()) + ".",
                    )
                ]
            )
        )
    return sec


def _figures(inp: Inputs) -> list[tuple[str, str]]:
    """:data:`FIGURES`, where a definition depends on the engine, worded for the engines this
    campaign ran (their adapters say where a chunk's token count comes from)."""
    chunk_tokens = " or ".join(f"{a.chunk_tokens_source} ({a.label})" for a in ran_adapters(inp))
    return [(name, d.replace("{chunk_tokens}", chunk_tokens)) for name, d in FIGURES]


def _accept_definition(inp: Inputs) -> str:
    """Each engine's own definition, for the engines this campaign ran."""
    return (
        f"mean accepted tokens per verify step, bonus token included, as the engine defines it "
        f"({accept_definitions(inp)}), over the counts summed over a cell's (or a row's) "
        "requests, which is what the engine's own counters give; the plain mean of the "
        "requests' accept lengths is shown beside it as 'request mean'."
    )

"""Correctness checks: the verdicts the campaign recorded (``check_verdict`` events, through the
reducer), each config's first divergences from the baseline as the check located them (token
by token where the engine returned ids, one row per prompt), the noise floor each verdict was
judged against and what it cost, each config against itself across TP sizes, and what the
state-leak probe saw."""

from __future__ import annotations

from typing import Any

from specbench_tui.report.blocks import Cell, Column, Para, Section, Table, code, text
from specbench_tui.report.frames import label
from specbench_tui.report.inputs import Inputs

DIVERGENT_LIMIT = 50


def _where(d: dict[str, Any]) -> Cell:
    at = f"token {d['token']}" if d.get("token") is not None else f"word {d.get('word')}"
    return Cell(
        "",
        spans=text(
            f"{at} (char {d.get('char')}): ",
            code(str(d.get("ours") or "")),
            " vs ",
            code(str(d.get("theirs") or "")),
        ),
    )


def _floor(detail: dict[str, Any]) -> str:
    """The noise floor a verdict was judged against, and how many self-comparisons made it."""
    first = detail.get("noise_floor")
    said = "never" if first is None else str(first)
    if "floor_compared" not in detail:  # a verdict recorded before the counts were
        return said
    n = detail["floor_compared"] or 0
    return f"{said} ({n} compared)" if n else "not measured"


def _across(detail: dict[str, Any]) -> str:
    """Its outputs against its own at other TP sizes: where they first differ, and the call."""
    parts = []
    for otp, a in sorted((detail.get("across_tp") or {}).items(), key=lambda kv: int(kv[0])):
        if a.get("first") is None:
            parts.append(f"TP {otp}: equal ({a.get('compared')})")
        else:
            verdict = {"fail": "beyond noise", "noise": "within noise"}.get(a.get("status"), "")
            blame = "" if a.get("counted") or a.get("status") != "fail" else f", blamed on TP {otp}"
            parts.append(f"TP {otp}: from {a['first']} ({verdict}{blame})")
    return "; ".join(parts) or "—"


def _probe_para(inp: Inputs, v: Any) -> Para:
    d = v.detail
    first = d.get("first")
    saw = (
        "it never differed from itself"
        if first is None
        else f"{d.get('diverged')} of {d.get('compared')} outputs differed from position {first}"
    )
    return Para(
        text(
            f"Noise-floor probe on {label(inp, v.config)} at TP {v.tp} ({v.host}): "
            f"{d.get('requests')} requests (its probe prompts alone, again, and batched "
            f"{d.get('batch')} at a time, up to {d.get('max_tokens')} tokens): {saw}."
        )
    )


def _sampled(inp: Inputs) -> str:
    """What greedy equivalence leaves out: the cells sampled at a temperature above 0, where
    two configs' outputs differ by design and the check does not apply."""
    hot = [c for c in inp.state.cells.values() if c.cell is not None and c.cell.temperature > 0]
    if not hot:
        return ""
    temps = sorted({c.cell.temperature for c in hot if c.cell is not None})
    workloads = sorted({c.workload for c in hot})
    return (
        f"Greedy equivalence does not apply at temperature > 0: the {len(hot)} cells at "
        f"T = {', '.join(f'{t:g}' for t in temps)} (workloads {', '.join(workloads)}) sample, so "
        "their outputs are not compared with the baseline's; only the temperature-0 cells are "
        "checked."
    )


def build(inp: Inputs) -> Section:
    sec = Section("Correctness checks")
    verdicts = sorted(inp.state.checks.values(), key=lambda v: (v.host, v.tp, v.config, v.check))
    if verdicts:
        sec.add(
            Table(
                "Check verdicts: recorded by the campaign, or (marked *) judged from the "
                "outputs it stored, where it ended before judging them",
                [
                    Column("Check", "l"),
                    Column("Host", "l"),
                    Column("Config", "l"),
                    Column("TP"),
                    Column("Verdict", "l"),
                    Column("What", "p", 0.45),
                ],
                [
                    [
                        Cell(v.check),
                        Cell(v.host),
                        Cell(label(inp, v.config)),
                        Cell(str(v.tp)),
                        Cell(
                            v.status + (" *" if v.detail.get("judged") else ""),
                            bold=v.status == "fail",
                        ),
                        Cell(v.text),
                    ]
                    for v in verdicts
                ],
                small=True,
            )
        )
    greedy = [v for v in verdicts if v.check == "greedy"]
    sampled = _sampled(inp)
    if sampled and (inp.plan.get("checks") or {}).get("greedy_equivalence"):
        sec.add(Para(text(sampled)))
    if not greedy:
        if (inp.plan.get("checks") or {}).get("greedy_equivalence"):
            sec.add(Para(text("Greedy equivalence: no config had outputs to compare yet.")))
        else:
            sec.add(
                Para(
                    text(
                        "Greedy equivalence not checked (the plan's ",
                        code("[checks] greedy_equivalence"),
                        " is off).",
                    )
                )
            )
    else:
        sec.add(
            Table(
                "Greedy equivalence against the baseline (every workload kind)",
                [
                    Column("Host", "l"),
                    Column("Config", "l"),
                    Column("TP"),
                    Column("Compared"),
                    Column("Diverged"),
                    Column("Baseline's own noise from", "r"),
                    Column("Against its other TP sizes", "p", 0.3),
                ],
                [
                    [
                        Cell(v.host),
                        Cell(label(inp, v.config)),
                        Cell(str(v.tp)),
                        Cell(str(v.detail.get("compared", "—"))),
                        Cell(
                            str(v.detail.get("diverged", "—")),
                            bold=v.status == "fail" and bool(v.detail.get("diverged")),
                        ),
                        Cell(_floor(v.detail)),
                        Cell(_across(v.detail)),
                    ]
                    for v in greedy
                ],
                small=True,
            )
        )
        rows = []
        more = 0
        for v in greedy:
            against = [("baseline", d) for d in v.detail.get("divergent") or []]
            for otp, a in sorted((v.detail.get("across_tp") or {}).items()):
                if a.get("counted") and a.get("finding") and a.get("status") != "pass":
                    against.append((f"itself at TP {otp}", a["finding"]))
            for what, d in against:
                if len(rows) >= DIVERGENT_LIMIT:
                    more += 1
                    continue
                rows.append(
                    [
                        Cell(label(inp, v.config)),
                        Cell(str(v.tp)),
                        Cell(str(d.get("kind") or "—")),
                        Cell(str(d.get("prompt") or "—"), code=True),
                        Cell(str(d.get("context") or "—")),
                        _where(d),
                        Cell(what),
                    ]
                )
        if rows:
            sec.add(
                Table(
                    "Outputs that differ from the baseline, or from their own at another TP size "
                    "(one row per prompt, its earliest)",
                    [
                        Column("Config", "l"),
                        Column("TP"),
                        Column("Kind", "l"),
                        Column("Prompt", "l"),
                        Column("Turn", "l"),
                        Column("First difference", "p", 0.4),
                        Column("Against", "l"),
                    ],
                    rows,
                    [f"... and {more} more."] if more else [],
                    small=True,
                )
            )
        else:
            sec.add(Para(text("All compared outputs match the baseline.")))
    for v in verdicts:
        if v.check == "noise_floor":
            sec.add(_probe_para(inp, v))
    leaks = [v for v in verdicts if v.check == "state_leak" and v.status == "fail"]
    for v in leaks:
        sec.add(
            Para(
                text(
                    f"State leak in {label(inp, v.config)} at TP {v.tp}: alone ",
                    code(str(v.detail.get("alone", ""))[:160]),
                    "; after a long unrelated request ",
                    code(str(v.detail.get("after_long", ""))[:160]),
                ),
                "warning",
            )
        )
    return sec

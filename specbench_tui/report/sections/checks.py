"""Correctness checks: the verdicts the campaign recorded (``check_verdict`` events, through the
reducer) and the temperature-0 comparison of each config's single-stream outputs with the
baseline's, prompt by prompt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from specbench_tui.bench.greedy import Divergence, first_difference
from specbench_tui.report.blocks import Cell, Column, Para, Section, Table, code, text
from specbench_tui.report.frames import baseline, config_rank, label, requests
from specbench_tui.report.inputs import Inputs
from specbench_tui.results.layout import ResultsLayout

DIVERGENT_LIMIT = 50


def _first_difference(root: Path, row: dict[str, Any]) -> Divergence | None:
    """Where a divergent output leaves the baseline's, from the texts kept beside the request
    rows (rows hold only hashes); None when either text is not on disk."""

    def text_of(cell: Any, attempt: Any) -> str | None:
        try:
            path = ResultsLayout(root).texts_path(str(cell), int(attempt))
            return json.loads(path.read_text()).get(str(row["prompt_id"]))
        except (OSError, ValueError, TypeError):
            return None

    ours = text_of(row.get("cell_id"), row.get("attempt"))
    theirs = text_of(row.get("base_cell"), row.get("base_attempt"))
    if ours is None or theirs is None:
        return None
    return first_difference(ours, theirs)


def greedy(inp: Inputs) -> dict[str, Any]:
    """Temperature-0 single-stream outputs compared with the baseline's by SHA-256, per host,
    TP, workload, prompt set, prompt, max tokens and repeat."""
    enabled = bool((inp.plan.get("checks") or {}).get("greedy_equivalence"))
    res: dict[str, Any] = {
        "enabled": enabled,
        "note": "",
        "summary": [],
        "divergent": [],
        "more": 0,
    }
    base = baseline(inp)
    if not enabled:
        return res
    if base is None:
        res["note"] = "the plan names no baseline config to compare against"
        return res
    keys = ["host", "tp", "workload", "prompt_set", "prompt_id", "max_tokens", "repeat"]
    df = (
        requests(inp)
        .filter((pl.col("kind") == "single") & pl.col("output_sha256").is_not_null())
        .select(*keys, "config", "output_sha256", "cell_id", "attempt")
    )
    # Unknown temperature: the plan default is 0, so such rows are compared.
    hot = [c.id for c in inp.state.cells.values() if c.cell is not None and c.cell.temperature]
    if hot:
        df = df.filter(~pl.col("cell_id").cast(pl.String).is_in(hot))
    if df.height == 0:
        res["note"] = "no temperature-0 single-stream outputs were recorded"
        return res
    ref = (
        df.filter(pl.col("config") == base)
        .group_by(keys)
        .agg(
            pl.col("output_sha256").first().alias("base_sha"),
            pl.col("cell_id").first().alias("base_cell"),
            pl.col("attempt").first().alias("base_attempt"),
        )
    )
    if ref.height == 0:
        res["note"] = f"the baseline {base!r} has no temperature-0 single-stream outputs"
        return res
    cmp = (
        df.filter(pl.col("config") != base)
        .join(ref, on=keys, how="inner", nulls_equal=True)
        .with_columns((pl.col("output_sha256") != pl.col("base_sha")).alias("diverges"))
    )
    if cmp.height == 0:
        res["note"] = "no other config has outputs for the baseline's prompts"
        return res
    order = config_rank(inp)

    def rank_key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["host"], r["tp"], order.get(r["config"], len(order)), r["config"])

    summ = cmp.group_by("host", "config", "tp").agg(
        pl.len().alias("compared"), pl.col("diverges").sum().alias("diverged")
    )
    res["summary"] = sorted(summ.to_dicts(), key=rank_key)
    div = cmp.filter(pl.col("diverges")).to_dicts()
    div.sort(key=lambda r: (*rank_key(r), *(str(r[k]) for k in keys[2:])))
    res["divergent"] = [
        {**r, "first": _first_difference(inp.root, r)} for r in div[:DIVERGENT_LIMIT]
    ]
    res["more"] = max(0, len(div) - DIVERGENT_LIMIT)
    return res


def build(inp: Inputs) -> Section:
    sec = Section("Correctness checks")
    verdicts = sorted(inp.state.checks.values(), key=lambda v: (v.host, v.tp, v.config, v.check))
    if verdicts:
        sec.add(
            Table(
                "Check verdicts recorded by the campaign",
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
                        Cell(v.status, bold=v.status == "fail"),
                        Cell(v.text),
                    ]
                    for v in verdicts
                ],
                small=True,
            )
        )
    g = greedy(inp)
    if not g["enabled"]:
        sec.add(
            Para(
                text(
                    "Greedy equivalence not checked (the plan's ",
                    code("[checks] greedy_equivalence"),
                    " is off).",
                )
            )
        )
        return sec
    if g["note"]:
        sec.add(Para(text(f"Greedy equivalence not checked: {g['note']}.")))
        return sec
    sec.add(
        Para(
            text(
                "Temperature-0 single-stream outputs compared with "
                f"{label(inp, baseline(inp) or '')} by SHA-256, per host, TP, workload, "
                "prompt set, prompt, max tokens and repeat. A lossless speculative config "
                "reproduces the baseline's tokens exactly, up to the hardware's numerics."
            )
        )
    )
    sec.add(
        Table(
            "Greedy equivalence against the baseline",
            [
                Column("Host", "l"),
                Column("Config", "l"),
                Column("TP"),
                Column("Compared"),
                Column("Diverged"),
            ],
            [
                [
                    Cell(s["host"]),
                    Cell(label(inp, s["config"])),
                    Cell(str(s["tp"])),
                    Cell(str(s["compared"])),
                    Cell(str(s["diverged"]), bold=bool(s["diverged"])),
                ]
                for s in g["summary"]
            ],
            small=True,
        )
    )
    if g["divergent"]:
        rows = []
        for d in g["divergent"]:
            first = d["first"]
            where = (
                Cell(
                    "",
                    spans=text(
                        f"word {first.word} (char {first.char}): ",
                        code(first.ours),
                        " vs ",
                        code(first.theirs),
                    ),
                )
                if first
                else Cell("—")
            )
            rows.append(
                [
                    Cell(label(inp, d["config"])),
                    Cell(str(d["tp"])),
                    Cell(d["workload"]),
                    Cell(d["prompt_set"] or "—"),
                    Cell(d["prompt_id"] or "—", code=True),
                    Cell(str(d["max_tokens"])),
                    Cell("—" if d["repeat"] is None else str(d["repeat"])),
                    where,
                ]
            )
        sec.add(
            Table(
                "Outputs that differ from the baseline",
                [
                    Column("Config", "l"),
                    Column("TP"),
                    Column("Workload", "l"),
                    Column("Prompt set", "l"),
                    Column("Prompt", "l"),
                    Column("Max tokens"),
                    Column("Repeat"),
                    Column("First difference", "p", 0.35),
                ],
                rows,
                [f"... and {g['more']} more."] if g["more"] else [],
                small=True,
            )
        )
    else:
        sec.add(Para(text("All compared outputs match the baseline.")))
    return sec

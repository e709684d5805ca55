"""The report tells one story (issue: one value per label, readable tables, every mark
everywhere, the table a user deploys from), on a rehearsal built to strain it: a lossy
config (the simulator's ``diverge``), temperatures 0 and 1, TP 1 and 4, a host with a long
name and a concurrency sweep, compiled with TeX and read back."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from conftest import ROOT, free_port, need_program
from support.report_pdf import duplicate_destinations, overfull_boxes, pdf_text

from specbench_tui.report.frames import FAILED_MARK

pytestmark = pytest.mark.system

HOST = "gpu-node-017.rack-b12.cluster.example.org"
PLAN = f"""\
[campaign]
name = "story"
baseline = "ar"
seed = 0

[hosts."{HOST}"]
sim = true
gpus = 8
speed = 50

[server]
model = "Qwen3.6-27B"
port = {{port}}
api = "sglang"

[configs.ar]
label = "Autoregressive"

[configs.dflash]
label = "DFlash (block 16)"
args = ["--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "16"]

[configs.lossy]
label = "DFlash lossy"
args = ["--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "16",
        "--sim-fault", "diverge"]

[matrix]
configs = ["ar", "dflash", "lossy"]
tp = [1, 4]

[workloads.single]
kind = "single"
prompts = ["code", "chat"]
samples = 2
max_tokens = [48]
temperature = [0, 1]
repeats = 2

[workloads.load]
kind = "concurrency"
levels = [1, 2]
requests = 4
prompts = ["chat"]
max_tokens = 48

[checks]
greedy_equivalence = true
"""


def _tables(md: str) -> list[list[str]]:
    """The Markdown report's table rows outside the correctness checks' own section (whose
    rows are the verdicts themselves)."""
    body = re.sub(r"(?s)\n## Correctness checks\n.*?(?=\n## )", "\n", md)
    return [line.split("|") for line in body.splitlines() if line.startswith("| ")]


def _plain(cell: str) -> str:
    """A Markdown cell's text without its bold."""
    return cell.replace("**", "")


def _captioned(md: str) -> dict[str, list[dict[str, str]]]:
    """The Markdown report's tables by caption: each row as header -> cell text."""
    out: dict[str, list[dict[str, str]]] = {}
    for block in md.split("\n**Table ")[1:]:
        caption = block.split("**", 1)[0].split(": ", 1)[1]
        rest = block.splitlines()
        start = next(i for i, x in enumerate(rest) if x.startswith("| "))
        end = next((i for i, x in enumerate(rest[start:], start) if not x.startswith("|")), None)
        lines = [x for x in rest[start:end] if "| ---" not in x]

        def cells(line: str) -> list[str]:
            return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]

        out[caption] = [dict(zip(cells(lines[0]), cells(x), strict=True)) for x in lines[1:]]
    return out


def test_the_report_of_a_strained_rehearsal_tells_one_story(tmp_path: Path) -> None:
    need_program("pdflatex")
    plan = tmp_path / "story.toml"
    plan.write_text(PLAN.replace("{port}", str(free_port())))
    argv = [sys.executable, "-m", "specbench_tui", str(plan), "--headless"]
    proc = subprocess.run(
        [*argv, "--results", str(tmp_path / "res")],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]  # lossy: exit 1
    root = tmp_path / "res" / "story"
    md = (root / "report.md").read_text()

    # Every table row of the lossy config carries its mark.
    rows = [r for r in _tables(md) if any("DFlash lossy" in c for c in r)]
    assert rows
    unmarked = [r for r in rows if not any(FAILED_MARK in c for c in r)]
    assert not unmarked, unmarked

    # Temperature is a key: the accept-length table and the server view split by it.
    assert "single T=0 accept" in md and "single T=1 accept" in md
    assert "| single T=0 |" in md and "| single T=1 |" in md

    # The deploy table is Table 1 and answers every TP size and level.
    t1 = md[md.index("**Table 1:") : md.index("**Table 2:")]
    assert "What to deploy per TP size and concurrency level" in t1
    answers = [line.split("|") for line in t1.splitlines() if re.match(r"\| [14] \|", line)]
    assert sorted((r[1].strip(), r[3].strip()) for r in answers) == [
        ("1", "1"),
        ("1", "2"),
        ("4", "1"),
        ("4", "2"),
    ]
    assert all(r[4].strip() for r in answers)

    # One label, one value: the summary's answer is its scope's row of the single-stream table,
    # figure for figure.
    tables = _captioned(md)
    (answers,) = [t for c, t in tables.items() if c.startswith("The fastest config per host")]
    for a in answers:
        (scope,) = [
            t
            for c, t in tables.items()
            if c.startswith(f"Single-stream decode speed, {a['Workload']}, TP {a['TP']} on")
        ]
        (row,) = [r for r in scope if _plain(r["Config"]) == _plain(a["Fastest"])]
        for figure in ("Decode tok/s \\[95% CI]", "Speed-up \\[95% CI]"):
            assert _plain(row[figure]) == _plain(a[figure]), (a, row)

    # The concurrency table's ratio of throughputs has a name of its own, not "Speed-up".
    (level,) = [t for c, t in tables.items() if c.startswith("Concurrency, load, TP 1 on")]
    assert "Throughput speed-up" in level[0] and not any(k.startswith("Speed-up") for k in level[0])

    # A rehearsal's cells have valid energy (the counter read at their edges).
    cells = pl.read_parquet(root / "cells.parquet")
    assert cells["energy_valid"].fill_null(False).mean() > 0.9

    # The PDF: every table fits, no anchor twice, the long host name breaks.
    work = tmp_path / "tex"
    assert overfull_boxes(root / "report.tex", work) == []
    assert duplicate_destinations(work) == []
    _, text = pdf_text(root / "report.pdf")
    assert "What to deploy" in text
    # In the PDF too, every line that names the lossy config marks it, outside the checks'
    # own section (its rows are the verdicts) and the summary's list of failed configs.
    start = [m for m in re.finditer(r"^\d+\s+Correctness checks\s*$", text, re.M)][-1]
    number = int(start.group().split()[0])
    after = re.compile(rf"^{number + 1}\s+[A-Z]", re.M).search(text, start.end())
    body = text[: start.start()] + (text[after.start() :] if after else "")
    lines = body.splitlines()
    unmarked = [
        line  # its row says "failed check", on the line or, wrapped in a cell, the next
        for line, below in zip(lines, [*lines[1:], ""], strict=True)
        if "DFlash lossy" in line and "failed" not in line + below and ": greedy: lossy" not in line
    ]
    assert unmarked == [], unmarked

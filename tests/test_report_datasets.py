"""A Spec-Bench-format and an MT-Bench-format file run as prompt sets at temperature 0 and 1,
on the simulated server; the report has the per-dataset table (speed-up and accept length for every
category, a mean column, both temperatures), and every table and chart is also a CSV."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import ROOT, free_port
from tests.test_prompt_formats import fastchat

pytestmark = [pytest.mark.slow, pytest.mark.system]

PLAN = """\
[campaign]
name = "datasets"
baseline = "ar"

[hosts.sim]
sim = true
gpus = 2
speed = 50

[server]
port = {port}

[configs.ar]
label = "AR"

[configs.dflash]
label = "DFlash"
args = ["--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "8"]

[matrix]
configs = ["ar", "dflash"]
tp = [1]

[prompt_sets.specbench]
format = "spec-bench"
path = "q.jsonl"

[prompt_sets.mtbench]
format = "mt-bench"
path = "q.jsonl"
categories = ["writing", "coding"]

[workloads.single]
kind = "single"
prompts = ["specbench", "mtbench"]
samples = "all"
max_tokens = [24]
repeats = 2
temperature = [0, 1]

[workloads.talk]
kind = "agentic"
prompts = ["mtbench"]
sessions = "all"
max_tokens = 16

[checks]
greedy_equivalence = true
noise_floor = false
"""


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("datasets")
    fastchat(tmp / "q.jsonl")
    plan = tmp / "plan.toml"
    plan.write_text(PLAN.format(port=free_port()))
    proc = subprocess.run(
        [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results",
         str(tmp / "res")],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return tmp / "res" / "datasets"


def test_cells_split_by_category_and_temperature(campaign: Path) -> None:
    cells = pl.read_parquet(campaign / "cells.parquet")
    single = cells.filter((pl.col("config") == "ar") & (pl.col("kind") == "single"))
    assert sorted(single["name"].to_list()) == sorted(
        f"sim.ar.tp1/single/{s}/24/t{t}"
        for s in (
            "specbench/mt_bench",
            "specbench/translation",
            "specbench/qa",
            "specbench/rag",
            "mtbench/writing",
            "mtbench/coding",
        )
        for t in (0, 1)
    )
    assert set(cells["status"]) == {"done"}
    assert sorted(set(single["temperature"])) == [0.0, 1.0]  # cells.parquet splits by it
    rows = pl.read_parquet(campaign / "requests.parquet")
    # MT-Bench in the agentic workload: a session of each question's two turns.
    talk = rows.filter((pl.col("workload") == "talk") & (pl.col("config") == "ar"))
    assert sorted(talk["prompt_set"].unique().to_list()) == ["mtbench/coding", "mtbench/writing"]
    assert talk.group_by("prompt_set", "session").agg(pl.len())["len"].to_list() == [2] * 4


def test_report_has_the_per_dataset_table_at_both_temperatures(campaign: Path) -> None:
    md = (campaign / "report.md").read_text()
    assert "Per-dataset speed-up and accept length" in md
    head = next(ln for ln in md.splitlines() if ln.startswith("| Config | T |"))
    for d in (
        "specbench/mt\\_bench",
        "specbench/translation",
        "specbench/qa",
        "specbench/rag",
        "mtbench/writing",
        "mtbench/coding",
    ):
        assert f"{d} speed-up" in head and f"{d} accept length" in head, head
    assert "Mean speed-up" in head and "Mean accept length" in head
    lines = md[md.index(head) :].splitlines()[2:]
    body = lines[: next(i for i, ln in enumerate(lines) if not ln.startswith("|"))]
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in body]
    # The name without its marks: a rehearsal on a loaded machine may be marked not
    # comparable (host load), which this test does not judge.
    by = {(r[0].strip("*").split(" \\[")[0], r[1]): r for r in rows}
    assert set(by) == {("AR", "0"), ("DFlash", "0"), ("AR", "1"), ("DFlash", "1")}
    for t in ("0", "1"):
        dflash = by[("DFlash", t)]
        speedups = [float(v.strip("*x")) for v in dflash[2:-2:2]]
        taus = [float(v) for v in dflash[3:-2:2]]
        assert len(speedups) == len(taus) == 6
        # Measured speed-ups, whose size depends on the machine's load: no bound here.
        assert all(s > 0 for s in speedups), dflash
        assert all(tau > 1.5 for tau in taus), dflash
        assert float(dflash[-2].strip("x")) == pytest.approx(sum(speedups) / 6, abs=0.011)
        assert by[("AR", t)][2] == "1.00x"
    assert "none is chosen after the fact" in md
    assert "Greedy equivalence does not apply at temperature > 0" in md


def test_every_table_and_chart_is_a_csv(campaign: Path) -> None:
    files = sorted((campaign / "tables").glob("report-*.csv"))
    md = (campaign / "report.md").read_text()
    tables = len(re.findall(r"^\*\*Table \d+:", md, flags=re.M))
    assert len([f for f in files if "-table-" in f.name]) == tables > 0
    assert any("-chart-" in f.name for f in files)
    (per_dataset,) = [f for f in files if "speed-up-and-accept-length-per-dataset" in f.name]
    rows = list(csv.DictReader(per_dataset.open()))
    dflash = [r for r in rows if r["config"] == "dflash" and r["dataset"] != "mean"]
    assert {r["temperature"] for r in dflash} == {"0.0", "1.0"}
    assert len(dflash) == 12 and all(
        float(r["speedup"]) > 0 and float(r["tau"]) > 1 for r in dflash
    )
    # Two repeats a side: an interval around the ratio, or (t at 1 degree of freedom is 12.7)
    # the word that there are too few units to bound it, never an empty pair with no reason.
    for r in dflash:
        if r["speedup_too_few"] == "True":
            assert not r["speedup_lo"] and not r["speedup_hi"]
        else:
            assert float(r["speedup_lo"]) <= float(r["speedup"]) <= float(r["speedup_hi"])
    means = [r for r in rows if r["dataset"] == "mean" and r["config"] == "dflash"]
    assert len(means) == 2
    json.dumps(rows)  # plain values only

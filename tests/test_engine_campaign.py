"""The engine end to end on the simulated host: real server processes, real HTTP, real files."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from specbench_tui.sim.config import parse_args
from specbench_tui.sim.model import PerfModel
from tests.conftest import MINIMAL_PLAN, ROOT

pytestmark = pytest.mark.system

PLAN = MINIMAL_PLAN.replace(
    "max_tokens = [32]\n",
    """max_tokens = [32, 48]
repeats = 2

[workloads.load]
kind = "concurrency"
levels = [1, 3]
requests = 6
prompts = ["code"]
max_tokens = 24
""",
)


def headless(
    plan: Path, results: Path, *extra: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "specbench_tui",
            str(plan),
            "--headless",
            "--results",
            str(results),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def events(root: Path) -> list[dict]:
    return [json.loads(line) for line in (root / "events.jsonl").read_text().splitlines()]


def test_campaign_writes_every_contract_file(write_plan, tmp_path: Path) -> None:
    plan = write_plan(PLAN)
    proc = headless(plan, tmp_path / "res")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    root = tmp_path / "res" / "t"
    for name in (
        "plan.toml",
        "events.jsonl",
        "requests.parquet",
        "cells.parquet",
        "telemetry.parquet",
        "report.md",
        "report.tex",
    ):
        assert (root / name).exists(), name
    assert sorted(p.name for p in (root / "logs").iterdir()) == [
        "sim.ar.tp1.log",
        "sim.dflash.tp1.log",
    ]
    assert "ready to roll" in (root / "logs" / "sim.ar.tp1.log").read_text()

    ev = events(root)
    names = Counter(e["event"] for e in ev)
    assert names["cell_finished"] == 8 and names["group_started"] == 2
    assert names["service_ready"] == 2 and names["campaign_finished"] == 1
    assert all(e["ts"].endswith("Z") for e in ev)
    started = next(e for e in ev if e["event"] == "campaign_started")
    assert started["simulated"] is True and started["plan_hash"]

    req = pl.read_parquet(root / "requests.parquet")
    # single: 2 prompts x 2 repeats x 2 max_tokens; concurrency: 6 x 2 levels; per config
    assert req.height == 2 * (8 + 12)
    assert req["error"].null_count() == req.height
    assert (req["ttft_s"] > 0).all() and (req["e2e_s"] >= req["ttft_s"]).all()
    spec = req.filter(pl.col("config") == "dflash")
    ar = req.filter(pl.col("config") == "ar")
    assert ar["accept_length"].null_count() == ar.height  # not speculative: null
    # accept length per request from meta_info: completion_tokens / spec_verify_ct
    assert (
        spec["accept_length"] - spec["output_tokens"] / spec["spec_verify_ct"]
    ).abs().max() < 1e-9
    # near what the simulator was configured for (DFlash, 8 draft tokens, chat prompts)
    model = PerfModel(
        parse_args(["--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "8"])
    )
    chat = spec.filter(pl.col("prompt_set") == "chat")["accept_length"]
    expected = model.mean_accept("chat")
    assert abs(chat.mean() - expected) < 0.3 * expected, (chat.mean(), expected)
    # a speculative server sends several tokens per chunk; tokens come from the server's counts
    assert (spec["chunks"] < spec["output_tokens"]).all()
    assert (ar["itl_s"].list.len() == ar["chunks"] - 1).all()

    cells = pl.read_parquet(root / "cells.parquet")
    assert cells.height == 8 and set(cells["status"]) == {"done"}
    for col in (
        "cell_id",
        "group",
        "host",
        "config",
        "tp",
        "workload",
        "kind",
        "prompt_set",
        "max_tokens",
        "concurrency",
        "attempt",
        "requests",
        "errors",
        "wall_s",
        "throughput_tok_s",
        "ttft_s_p50",
        "itl_s_p99",
        "output_tok_s_mean",
        "accept_length_mean",
    ):
        assert col in cells.columns, col
    tele = pl.read_parquet(root / "telemetry.parquet")
    assert tele.height > 0 and set(tele["gpu"]) <= {0, 1, 2, 3}
    assert "SIMULATED" in (root / "report.md").read_text().upper()

    # Running the same plan again resumes: nothing left to run, nothing repeated.
    again = headless(plan, tmp_path / "res")
    assert again.returncode == 0
    assert "8 already done, 0 to run" in again.stdout
    assert Counter(e["event"] for e in events(root))["cell_started"] == 8


def test_server_exiting_at_start_fails_its_group_and_campaign_goes_on(write_plan, tmp_path) -> None:
    text = PLAN.replace('label = "AR"', 'label = "AR"\nargs = ["--sim-fault", "crash-at-start"]')
    proc = headless(write_plan(text), tmp_path / "res")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    ev = events(tmp_path / "res" / "t")
    failed = next(e for e in ev if e["event"] == "service_failed")
    assert failed["group"] == "sim.ar.tp1"
    assert "exited with code 1 during start-up" in failed["reason"]
    assert failed["log_tail"] and any("CUDA" in ln or "rror" in ln for ln in failed["log_tail"])
    cell_failed = [e for e in ev if e["event"] == "cell_failed"]
    assert len(cell_failed) == 4 and all(e["group"] == "sim.ar.tp1" for e in cell_failed)
    assert sum(1 for e in ev if e["event"] == "cell_finished") == 4  # dflash ran after it
    assert "FAILED to start" in proc.stdout


def test_kill_9_then_rerun_loses_nothing_and_repeats_nothing(write_plan, tmp_path) -> None:
    plan = write_plan(PLAN.replace("speed = 50", "speed = 8"))
    results = tmp_path / "res"
    root = results / "t"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results", str(results)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if (root / "events.jsonl").exists():
                done = sum(1 for e in events(root) if e["event"] == "cell_finished")
                if done >= 3:
                    break
            time.sleep(0.05)
        else:
            pytest.fail("the campaign did not finish 3 cells in time")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    first = events(root)
    finished_before = {e["cell_id"] for e in first if e["event"] == "cell_finished"}
    assert first[-1]["event"] != "campaign_finished"

    again = headless(plan, results)
    assert again.returncode == 0, again.stdout + again.stderr
    ev = events(root)
    second = ev[len(first) :]
    restarted = {e["cell_id"] for e in second if e["event"] == "cell_started"}
    assert not restarted & finished_before  # a finished cell never runs again
    finished = [e["cell_id"] for e in ev if e["event"] == "cell_finished"]
    assert len(finished) == len(set(finished)) == 8  # each cell finished exactly once
    req = pl.read_parquet(root / "requests.parquet")
    cells = pl.read_parquet(root / "cells.parquet")
    counted = req.join(cells.select("cell_id", "attempt"), on=["cell_id", "attempt"])
    assert counted.height == 2 * (8 + 12)  # no duplicated rows, none lost
    assert counted.group_by("cell_id", "attempt").len()["len"].max() <= 8


def test_greedy_divergence_is_located_live_and_in_the_report(write_plan, tmp_path: Path) -> None:
    text = PLAN.replace(
        '"--speculative-num-draft-tokens", "8"]',
        '"--speculative-num-draft-tokens", "8", "--sim-fault", "diverge"]',
    ).replace("[matrix]", "[checks]\ngreedy_equivalence = true\n\n[matrix]")
    proc = headless(write_plan(text), tmp_path / "res")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # a lossy config fails the run
    assert "check failed: dflash" in proc.stdout
    root = tmp_path / "res" / "t"
    notices = [e["text"] for e in events(root) if e["event"] == "notice"]
    warned = [n for n in notices if n.startswith("greedy outputs differ: dflash vs ar")]
    assert warned  # diverge starts 8-47 tokens in, so the 48-token cell at least differs
    assert "token" in warned[0] and "char" in warned[0]  # located by token id
    report = (root / "report.md").read_text()
    assert "Outputs that differ from the baseline" in report
    assert re.search(r"\| token \d+ \(char \d+\): `", report)


def test_identical_greedy_outputs_raise_no_warning(write_plan, tmp_path: Path) -> None:
    text = PLAN.replace("[matrix]", "[checks]\ngreedy_equivalence = true\n\n[matrix]")
    proc = headless(write_plan(text), tmp_path / "res")
    assert proc.returncode == 0
    notices = [e["text"] for e in events(tmp_path / "res" / "t") if e["event"] == "notice"]
    assert not [n for n in notices if n.startswith("greedy outputs differ")]
    assert (
        "All compared outputs match the baseline"
        in (tmp_path / "res" / "t" / "report.md").read_text()
    )


def test_a_truncated_part_is_said_headless_and_its_cell_runs_again(write_plan, tmp_path) -> None:
    """The store's notice reaches a headless run's output, and the run measures the cell again
    (a new attempt; the other cells keep their rows and are not run again)."""
    from specbench_tui.results.layout import ResultsLayout

    plan = write_plan(PLAN)
    results = tmp_path / "res"
    root = results / "t"
    first = headless(plan, results)
    assert first.returncode == 0, first.stdout + first.stderr
    before = events(root)
    done = [e for e in before if e["event"] == "cell_finished"]
    victim = done[1]
    layout = ResultsLayout(root)
    part = layout.part_path(victim["cell_id"], victim["attempt"])
    part.write_bytes(part.read_bytes()[:300])

    again = headless(plan, results)
    assert again.returncode == 0, again.stdout + again.stderr
    said = [line for line in again.stdout.splitlines() if part.name in line]
    assert said and "could not be read" in said[0] and "runs again" in said[0], again.stdout
    second = events(root)[len(before) :]
    rerun = [e for e in second if e["event"] == "cell_finished"]
    assert [(e["cell_id"], e["attempt"]) for e in rerun] == [
        (victim["cell_id"], victim["attempt"] + 1)
    ]
    assert not part.exists()
    assert any(p.name.startswith(part.name) for p in layout.set_aside.iterdir())
    req = pl.read_parquet(root / "requests.parquet")
    cells = pl.read_parquet(root / "cells.parquet")
    counted = req.join(cells.select("cell_id", "attempt"), on=["cell_id", "attempt"])
    assert counted.height == 2 * (8 + 12)  # every cell's rows, the victim's from its rerun

"""What the report's environment, methodology and summary sections say, not just their titles:
the GPU model and driver each host reported (the simulator's, and a real H200's through the
nvidia-smi stand-in that replays one), the workloads as they were sent, and a campaign's exact
status when it ended with cells never run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from conftest import MINIMAL_PLAN, ROOT, free_port, tiny_model
from support.results_builder import ResultsBuilder

from specbench_tui.report.blocks import Table
from specbench_tui.report.build import build_report
from specbench_tui.report.inputs import load_inputs
from specbench_tui.report.render import render_texts
from specbench_tui.report.sections import environment
from specbench_tui.sim.fake_nvml import SIM_NAME

SUPPORT = Path(__file__).parent / "support"


def _hosts_table(root: Path) -> dict[str, dict[str, str]]:
    """The environment section's hosts table: host -> column title -> text."""
    sec = environment.build(load_inputs(root))
    (table,) = [b for b in sec.blocks if isinstance(b, Table) and "Hosts" in b.caption]
    titles = [c.title for c in table.columns]
    return {r[0].text: dict(zip(titles, (c.text for c in r), strict=True)) for r in table.rows}


def _events(root: Path) -> list[dict]:
    return [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]


def _section(md: str, title: str) -> str:
    start = md.index(f"## {title}\n")
    end = md.find("\n## ", start + 1)
    return md[start : end if end != -1 else None]


@pytest.mark.system
def test_a_simulated_host_records_its_gpu_model(write_plan, tmp_path: Path) -> None:
    plan = write_plan(MINIMAL_PLAN.replace("speed = 50", "speed = 200"))
    cmd = [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results"]
    proc = subprocess.run(
        [*cmd, str(tmp_path / "res")], capture_output=True, text=True, timeout=180, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    root = tmp_path / "res" / "t"
    (chosen,) = [e for e in _events(root) if e["event"] == "telemetry_chosen"]
    assert chosen["source"] == "sim" and chosen["gpus"] == 4
    tel = pl.read_parquet(root / "telemetry.parquet")
    assert tel.height and set(tel["name"]) == {SIM_NAME}
    row = _hosts_table(root)["sim"]
    assert row["Model"] == SIM_NAME and row["GPUs"] == "4" and "(simulated)" in row["Model"]
    assert row["Memory"] != "—"
    md = (root / "report.md").read_text()
    assert SIM_NAME in _section(md, "Environment")


LOCAL_PLAN = """\
[campaign]
name = "here"
baseline = "ar"

[hosts.here]
local = true
gpus = 1

[server]
python = "{python}"
model = "{model}"
port = {port}
launch = ["{{python}}", "-m", "specbench_tui.sim", "--model-path", "{{model}}", "--tp-size",
          "{{tp}}", "--host", "127.0.0.1", "--port", "{{port}}", "--speed", "200"]
ready_timeout = "60s"

[configs.ar]

[matrix]
configs = ["ar"]
tp = [1]

[workloads.single]
kind = "single"
prompts = ["chat"]
samples = 1
max_tokens = [16]
"""


@pytest.mark.system
def test_an_nvidia_smi_host_records_the_h200_model_and_driver(tmp_path: Path) -> None:
    """A local host read through nvidia-smi: the stand-in replays a real H200's answers
    (driver 580.159.04); the venv's pynvml finds no driver here, so NVML is passed over."""
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has a real nvidia-smi: its GPUs are not the capture's")
    plan = tmp_path / "plan.toml"
    plan.write_text(
        LOCAL_PLAN.format(python=sys.executable, port=free_port(), model=tiny_model(tmp_path))
    )
    state = tmp_path / "smi-state"
    state.write_text("idle")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECBENCH_SIM_")}
    env["PATH"] = f"{SUPPORT}:{env['PATH']}"
    env["SPECBENCH_FAKE_NVIDIA_SMI_STATE"] = str(state)
    cmd = [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results"]
    proc = subprocess.run(
        [*cmd, str(tmp_path / "res")],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    root = tmp_path / "res" / "here"
    (chosen,) = [e for e in _events(root) if e["event"] == "telemetry_chosen"]
    assert chosen["source"] == "nvidia-smi"
    assert chosen["driver"] == "580.159.04" and chosen["gpus"] == 1
    tel = pl.read_parquet(root / "telemetry.parquet")
    assert set(tel["name"]) == {"NVIDIA H200"} and set(tel["host"]) == {"here"}
    row = _hosts_table(root)["here"]
    assert row["Model"] == "NVIDIA H200" and row["Driver"] == "580.159.04"
    assert row["GPUs"] == "1" and row["Memory"] == "140 GiB"  # 143771 MiB
    env_md = _section((root / "report.md").read_text(), "Environment")
    assert "NVIDIA H200" in env_md and "580.159.04" in env_md


def test_an_older_directory_without_the_model_says_not_recorded(tmp_path: Path) -> None:
    b = ResultsBuilder(tmp_path / "old")
    b.cell("s1", "ar", 1, "single", "single")
    b.finished("s1", [dict(prompt_id="p", repeat=0)])
    b.telemetry({"time": [1.0], "host": ["sim"], "gpu": [0], "mem_total_mib": [1024.0]})
    row = _hosts_table(b.write())["sim"]
    assert row["Model"] == "not recorded" and row["Driver"] == "not recorded"
    assert row["Memory"] == "1 GiB"


def _methodology_campaign(root: Path) -> Path:
    b = ResultsBuilder(root)
    b.cell("s1", "ar", 1, "single", "single", samples=4, repeats=3, warmup=1, label="AR")
    b.cell("s2", "dflash", 1, "single", "single", samples=4, repeats=3, warmup=1, max_tokens=128)
    b.cell(
        "a1",
        "ar",
        1,
        "agent",
        "agentic",
        sessions=2,
        turns=5,
        tool_output_tokens=200,
        warmup=1,
        prompt_set=None,
        prompts=("chat", "code"),
        label="AR",
    )
    b.ready("sim.ar.tp1")
    rows = [dict(prompt_id="p", repeat=r, prompt_tokens=100, cached_tokens=0) for r in range(3)]
    b.finished("s1", rows, figures={"prefix_cache": "cold"})
    turns = [
        dict(
            prompt_id="p", session=0, turn=t, kind="agentic", prompt_tokens=1000, cached_tokens=750
        )
        for t in range(2)
    ]
    b.finished("a1", turns, figures={"prefix_cache": "warm"})
    return b.write(plan='[campaign]\nname = "syn"\nbaseline = "ar"\n')


def test_the_methodology_says_what_was_sent_and_how_it_was_counted(tmp_path: Path) -> None:
    md = render_texts(build_report(_methodology_campaign(tmp_path / "syn")))[0]
    sec = _section(md, "Methodology")
    single = next(x for x in sec.splitlines() if x.startswith("| `single` |"))
    assert "| chat | 64, 128 | 0 |" in single and single.endswith("| 2 |")
    assert (
        "4 prompts of each set, 3 repeats of each prompt back to back after 1 warm-up request "
        "with that prompt" in single
    )
    agent = next(x for x in sec.splitlines() if x.startswith("| `agent` |"))
    assert "| agentic | chat, code |" in agent and agent.endswith("| 1 |")
    assert "2 sessions of 5 turns, 200 tool-output tokens added per turn" in agent
    assert "**Prefix cache.** agent: warm; single: cold." in sec  # as the cells recorded it
    assert "(cached over prompt tokens, as the server reported them): agentic 75%, single 0%" in sec
    assert "**Baseline.** AR (`ar`)." in sec
    assert "Student-t 95% interval" in sec and "Fieller" in sec
    assert "| **Decode tok/s** | token-weighted: sum(output tokens - 1) / sum(e2e - TTFT)" in sec
    assert "SGLang: completion tokens / verify steps" in sec  # the engine this campaign ran
    assert "never pooled" in sec
    assert (
        "**Order.** Service groups run in plan order, one server start each, one after another "
        "on each host. Within a group its cells run in plan order, one at a time." in sec
    )


def test_the_methodology_says_when_groups_were_packed_side_by_side(tmp_path: Path) -> None:
    b = ResultsBuilder(tmp_path / "syn")
    b.cell("s1", "ar", 1, "single", "single")
    b.cell("s2", "ar", 1, "single", "single", host="other")
    b.finished("s1", [dict(prompt_id="p", repeat=0)])
    plan = '[campaign]\nname = "syn"\npack = true\npack_control = true\n'
    sec = _section(render_texts(build_report(b.write(plan=plan)))[0], "Methodology")
    assert "packed: groups that fit on disjoint GPUs of a host run side by side" in sec
    assert "first group ran once more alone" in sec and "the 2 hosts work at the same time" in sec
    assert "one after another" not in sec


def test_the_methodology_of_a_campaign_with_no_baseline_says_so(tmp_path: Path) -> None:
    b = ResultsBuilder(tmp_path / "syn")
    b.cell("s1", "ar", 1, "single", "single")
    b.finished("s1", [dict(prompt_id="p", repeat=0)])
    md = render_texts(build_report(b.write(plan='[campaign]\nname = "syn"\n')))[0]
    sec = _section(md, "Methodology")
    assert "**Baseline.** none: the plan names none, so no speed-ups." in sec
    assert "**Prefix cache.** single: warm." in sec  # none recorded: the cell's planned policy


def _status(root: Path) -> tuple[str, str]:
    md = render_texts(build_report(root))[0]
    summary = _section(md, "Summary")
    status = next(x for x in summary.splitlines() if x.startswith("| Status |"))
    cells = next(x for x in summary.splitlines() if x.startswith("| Cells |"))
    return status, cells


def _two_of_three(root: Path) -> ResultsBuilder:
    b = ResultsBuilder(root)
    for cid in ("c1", "c2", "c3"):
        b.cell(cid, "ar", 1, "single", "single", max_tokens=int(cid[1]) * 32)
    b.finished("c1", [dict(prompt_id="p", repeat=0)])
    b.failed("c2", "server exited")
    return b


def test_the_summary_calls_a_campaign_that_ended_with_cells_never_run_partial(
    tmp_path: Path,
) -> None:
    status, cells = _status(_two_of_three(tmp_path / "partial").write())
    assert "**partial: the campaign ended with planned cells never run**" in status
    assert "3 planned: 1 done, 1 failed, 1 never run" in cells

    b = _two_of_three(tmp_path / "aborted")
    b.aborted("by the operator at 12:00")
    status, cells = _status(b.write())
    assert "aborted (by the operator at 12:00)" in status and "partial" not in status
    assert "1 never run" in cells

    status, cells = _status(_two_of_three(tmp_path / "cut").write(finished=False))
    assert "interrupted: the log has no end" in status
    assert "1 pending" in cells and "never run" not in cells

    b = _two_of_three(tmp_path / "ended-failed")
    b.finished("c3", [dict(prompt_id="p", repeat=0)])
    status, _ = _status(b.write())
    assert "**finished: 2 of 3 planned cells done (1 failed: see Every planned cell)**" in status

    b = ResultsBuilder(tmp_path / "whole")
    for cid in ("c1", "c2"):
        b.cell(cid, "ar", 1, "single", "single", max_tokens=int(cid[1]) * 32)
        b.finished(cid, [dict(prompt_id="p", repeat=0)])
    status, _ = _status(b.write())
    assert "**finished: every planned cell ran**" in status

    # Every cell ended, but not every one ran: the status says so, as the cell table does.
    b = _two_of_three(tmp_path / "ended")
    b.skipped("c3", "its server never started")
    status, cells = _status(b.write())
    assert "every planned cell ran" not in status
    assert (
        "**finished: 1 of 3 planned cells done (1 failed, 1 skipped: see Every planned cell)**"
        in status
    )
    assert "3 planned: 1 done, 1 failed, 1 skipped" in cells

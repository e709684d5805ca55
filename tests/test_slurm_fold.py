"""A batch job's share run the way its script runs it (``--headless --job``, here without
Slurm), then its event log folded into a campaign: exactly once, whatever the coordinator
read before it stopped, with the campaign's attempts and the rows in the campaign's parts."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from conftest import ROOT, free_port

from specbench_tui import __version__
from specbench_tui.engine.campaign import Campaign, CampaignOptions
from specbench_tui.engine.job_fold import JobFolder, JobRun
from specbench_tui.hosts.batch_jobs import JobPaths, JobSpec
from specbench_tui.plan.expand import expand
from specbench_tui.plan.loader import load_plan
from specbench_tui.results.events import CampaignStarted, Event
from specbench_tui.results.files import read_events
from specbench_tui.results.layout import ResultsLayout

pytestmark = pytest.mark.system

PLAN = f"""\
[campaign]
name = "folded"
baseline = "ar"

[hosts.cluster.slurm]
login = "login"
gpus_per_node = 8
shared_dir = "/shared"
venv = "{sys.prefix}"

[server]
python = "{sys.executable}"
model = "m"
port = @PORT@
launch = ["{{python}}", "-m", "specbench_tui.sim", "--model-path", "{{model}}", "--tp-size",
          "{{tp}}", "--host", "127.0.0.1", "--port", "{{port}}", "--speed", "50"]
ready_timeout = "60s"

[configs.ar]
[configs.dflash]
args = ["--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "8"]

[matrix]
configs = ["ar", "dflash"]
tp = [2]

[workloads.single]
kind = "single"
prompts = ["chat"]
samples = 2
max_tokens = [16, 32, 48]
"""


@pytest.fixture
def plan_path(tmp_path: Path) -> Path:
    p = tmp_path / "plan.toml"
    p.write_text(PLAN.replace("@PORT@", str(free_port())))
    return p


def run_job(plan_path: Path, job_dir: Path, group: str, cells: list[str] | None = None) -> str:
    """The job script's command, on this machine, with the GPUs Slurm would have set."""
    plan = load_plan(plan_path)
    exp = expand(plan)
    ids = cells if cells is not None else [c.id for c in exp.cells_of(group)]
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "plan.toml").write_text(plan.text)
    spec = JobSpec("folded", group, 1, tuple(ids), plan.hash, __version__)
    (job_dir / "job.json").write_text(spec.dumps())
    (job_dir / "commands.jsonl").write_text("")
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "specbench_tui",
            str(job_dir / "plan.toml"),
            "--headless",
            "--results",
            str(job_dir / "results"),
            "--job",
            str(job_dir / "job.json"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "5,6"},
        timeout=120,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res.stdout


def coordinator(plan_path: Path, results: Path) -> Campaign:
    """A campaign as the coordinator opens it, its run started (nothing submitted)."""
    plan = load_plan(plan_path)
    c = Campaign.prepare(
        plan, ResultsLayout.for_campaign(results, "folded"), CampaignOptions(control_socket=False)
    )
    c.hub.emit(
        CampaignStarted(
            campaign="folded",
            groups=list(c.groups),
            cells=list(c.cells.values()),
            selected=list(c.selected),
        )
    )
    return c


async def local(path: str) -> bytes | None:
    p = Path(path)
    return p.read_bytes() if p.exists() else None


def job_events(job_dir: Path) -> list[Event]:
    return read_events(job_dir / "results" / "folded" / "events.jsonl")


async def fold_all(c: Campaign, job: JobRun, evs: list[Event]) -> None:
    folder = JobFolder(c.ctx, local)
    for ev in evs:
        await folder.fold(job, ev)


def job_run(c: Campaign, job_dir: Path, group: str) -> JobRun:
    g = next(g for g in c.groups if g.id == group)
    return JobRun(g, 1, JobPaths(str(job_dir), "folded", group), job_id="77")


async def test_a_job_runs_its_group_on_its_gpus_and_folds_exactly_once(
    tmp_path: Path, plan_path: Path
) -> None:
    group = "cluster.dflash.tp2"
    job_dir = tmp_path / "shared" / "folded" / "jobs" / group / "1"
    out = run_job(plan_path, job_dir, group)
    assert "finished folded: 3 done, 0 failed" in out
    evs = job_events(job_dir)
    started = [e for e in evs if e.name == "group_started"]
    assert [e.gpu_ids for e in started] == [[5, 6]]  # the allocation, not the plan's ids
    plan_port = load_plan(plan_path).spec.server.port
    assert started[0].port != plan_port  # a free port: other jobs may share the node
    assert not (job_dir / "results" / "folded" / "report.md").exists()  # the campaign's job

    results = tmp_path / "results"
    c = coordinator(plan_path, results)
    job = job_run(c, job_dir, group)
    # The coordinator reads half the log, then dies (its store closed mid-campaign).
    half = len(evs) // 2
    await fold_all(c, job, evs[:half])
    c.store.close()
    # A new coordinator reads the whole log from the start.
    c2 = coordinator(plan_path, results)
    job2 = job_run(c2, job_dir, group)
    await fold_all(c2, job2, evs)
    c2.store.close()
    # And a third one again, after everything was folded.
    c3 = coordinator(plan_path, results)
    await fold_all(c3, job_run(c3, job_dir, group), evs)
    c3.store.close()

    log = read_events(results / "folded" / "events.jsonl")
    finished = Counter(e.cell_id for e in log if e.name == "cell_finished")  # type: ignore[attr-defined]
    assert len(finished) == 3 and set(finished.values()) == {1}
    assert Counter(e.name for e in log)["group_started"] == 1
    assert Counter(e.name for e in log)["group_finished"] == 1
    state = c3.state
    for cid in finished:
        cs = state.cells[cid]
        assert cs.status == "done"
        part = results / "folded" / "parts" / f"{cid}.a{cs.attempt}.parquet"
        rows = pl.read_parquet(part)
        assert rows.height == 2 and set(rows["attempt"]) == {cs.attempt}
        assert (results / "folded" / "parts" / f"{cid}.a{cs.attempt}.texts.json").exists()
    # The half-read cell was interrupted by the first coordinator's end: the second saw
    # that start again (same key) and its end, so nothing ran twice and one attempt counts.
    assert {state.cells[c].attempt for c in finished} == {1}


async def test_a_restarted_job_leaves_its_cut_cell_queued_again(
    tmp_path: Path, plan_path: Path
) -> None:
    """A job killed mid-cell and started again (Slurm's requeue): its log has two runs. The
    cut cell's first attempt is queued again, its second counts, as attempt 2."""
    group = "cluster.ar.tp2"
    job_dir = tmp_path / "job"
    run_job(plan_path, job_dir, group)
    evs = job_events(job_dir)
    first_cell = next(e for e in evs if e.name == "cell_started")
    # What a kill -9 mid-cell and a second run leave: the first start, no end, a new run.
    cut = evs[: evs.index(first_cell) + 1]
    second = [
        CampaignStarted(campaign="folded", ts=first_cell.ts + 1.0),
        dataclasses.replace(first_cell),
        *[e for e in evs[evs.index(first_cell) + 1 :]],
    ]
    for e in second[1:]:
        e.ts += 2.0
        if getattr(e, "cell_id", None) == first_cell.cell_id:  # type: ignore[attr-defined]
            e.attempt = 2  # type: ignore[attr-defined]
    c = coordinator(plan_path, tmp_path / "results")
    job = job_run(c, job_dir, group)
    # Its parts under the job's attempt 2, as the second run would have written them.
    parts = job_dir / "results" / "folded" / "parts"
    for suffix in (".parquet", ".texts.json"):
        src = parts / f"{first_cell.cell_id}.a1{suffix}"  # type: ignore[attr-defined]
        src.rename(parts / f"{first_cell.cell_id}.a2{suffix}")  # type: ignore[attr-defined]
    await fold_all(c, job, [*cut, *second])
    log = read_events(tmp_path / "results" / "folded" / "events.jsonl")
    mine = [e for e in log if getattr(e, "cell_id", None) == first_cell.cell_id]  # type: ignore[attr-defined]
    assert [(e.name, e.attempt) for e in mine] == [  # type: ignore[attr-defined]
        ("cell_started", 1),
        ("cell_queued", 2),
        ("cell_started", 2),
        ("cell_finished", 2),
    ]
    assert c.state.cells[first_cell.cell_id].status == "done"  # type: ignore[attr-defined]
    assert all(c.state.cells[x].status == "done" for x in c.state.groups[group].cells)
    c.store.close()


def test_a_job_file_that_does_not_fit_the_plan_is_one_line(tmp_path: Path, plan_path: Path) -> None:
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    plan = load_plan(plan_path)
    (job_dir / "plan.toml").write_text(plan.text)
    for spec, says in (
        (JobSpec("folded", "cluster.nope.tp2", 1, (), plan.hash, ""), "run as batch jobs"),
        (JobSpec("folded", "cluster.ar.tp2", 1, ("feedbeef",), plan.hash, ""), "are not cells"),
        (JobSpec("folded", "cluster.ar.tp2", 1, (), "0" * 16, ""), "written for plan"),
    ):
        (job_dir / "job.json").write_text(spec.dumps())
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "specbench_tui",
                str(job_dir / "plan.toml"),
                "--headless",
                "--results",
                str(job_dir / "r"),
                "--job",
                str(job_dir / "job.json"),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        assert res.returncode == 2 and says in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
    (job_dir / "job.json").write_text(json.dumps({"group": 1}))
    res = subprocess.run(
        [sys.executable, "-m", "specbench_tui", str(job_dir / "plan.toml"), "--job", "x"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert res.returncode == 2 and "--job goes with --headless" in res.stderr

"""Folding a job's log, in the small: its telemetry (its cells' energy under the campaign's
attempts, its GPU sample files copied once each by their name, whichever coordinator reads
them, their samples passed to the console) and what a time limit is judged by (the cell set
aside while it had the job's run to itself, and how long it had run)."""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
from conftest import free_port

from specbench_tui.engine.campaign import Campaign, CampaignOptions
from specbench_tui.engine.job_fold import JobFolder, JobRun
from specbench_tui.hosts.batch_jobs import JobPaths
from specbench_tui.plan.loader import load_plan
from specbench_tui.results.events import (
    Aborted,
    CampaignStarted,
    CellEnergy,
    CellFinished,
    CellQueued,
    CellStarted,
    Event,
    GpuSample,
)
from specbench_tui.results.files import read_events, write_parquet_atomic
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.schema import TELEMETRY_SCHEMA

PLAN = f"""\
[campaign]
name = "tel"

[hosts.cluster.slurm]
login = "login"
gpus_per_node = 8
shared_dir = "/shared"
venv = "{sys.prefix}"

[server]
python = "{sys.executable}"
model = "m"
port = @PORT@
launch = ["{{python}}", "-m", "specbench_tui.sim", "--model-path", "{{model}}"]

[configs.ar]

[matrix]
configs = ["ar"]
tp = [1]

[workloads.single]
kind = "single"
prompts = ["chat"]
samples = 1
max_tokens = [16, 32]
"""

GROUP = "cluster.ar.tp1"


def campaign(tmp_path: Path) -> Campaign:
    plan_path = tmp_path / "plan.toml"
    plan_path.write_text(PLAN.replace("@PORT@", str(free_port())))
    c = Campaign.prepare(
        load_plan(plan_path),
        ResultsLayout.for_campaign(tmp_path / "results", "tel"),
        CampaignOptions(control_socket=False),
    )
    c.hub.emit(
        CampaignStarted(
            campaign="tel",
            groups=list(c.groups),
            cells=list(c.cells.values()),
            selected=list(c.selected),
        )
    )
    return c


async def fetch(path: str) -> bytes | None:
    p = Path(path)
    return p.read_bytes() if p.exists() else None


def job_of(c: Campaign, job_dir: Path) -> JobRun:
    g = next(g for g in c.groups if g.id == GROUP)
    return JobRun(g, 1, JobPaths(str(job_dir), "tel", GROUP), job_id="9")


def samples_file(path: Path, t0: float, n: int) -> None:
    rows = [
        {"time": t0 + i, "host": "cluster", "gpu": 0, "power_w": 100.0 + i, "util_pct": 50.0}
        for i in range(n)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_parquet_atomic(pl.DataFrame(rows, schema=TELEMETRY_SCHEMA, orient="row"), path)


async def test_cell_energy_takes_the_campaigns_attempt(tmp_path: Path) -> None:
    c = campaign(tmp_path)
    cell = next(iter(c.cells.values()))
    # An earlier job ran attempt 1 of the cell and was cut: the campaign is at attempt 1.
    c.hub.emit(CellStarted(cell_id=cell.id, group=GROUP, cell=cell.name, attempt=1, ts=1.0))
    c.hub.emit(CellQueued(cell_id=cell.id, group=GROUP, cell=cell.name, attempt=2, ts=2.0))
    folder = JobFolder(c.ctx, fetch)
    job = job_of(c, tmp_path / "job")
    # This job numbers from 1 again: its attempt 1 is the campaign's 2.
    await folder.fold(job, CampaignStarted(campaign="tel", ts=10.0))
    await folder.fold(job, CellStarted(cell_id=cell.id, group=GROUP, attempt=1, ts=11.0))
    energy = CellEnergy(
        cell_id=cell.id, group=GROUP, attempt=1, figures={"gpu_energy_j": 5.0}, ts=12.0
    )
    await folder.fold(job, energy)
    await folder.fold(job, energy)  # read twice (a coordinator that came back): once
    # One of an attempt the campaign never saw start is not the campaign's.
    await folder.fold(job, CellEnergy(cell_id=cell.id, group=GROUP, attempt=7, ts=13.0))
    c.store.close()
    log: list[Event] = read_events(tmp_path / "results" / "tel" / "events.jsonl")
    got = [e for e in log if isinstance(e, CellEnergy)]
    assert [(e.attempt, e.figures) for e in got] == [(2, {"gpu_energy_j": 5.0})]


async def test_a_jobs_sample_files_are_copied_once_and_reach_the_console(tmp_path: Path) -> None:
    c = campaign(tmp_path)
    job_dir = tmp_path / "job"
    job = job_of(c, job_dir)
    tel = Path(str(job.paths.layout.telemetry_parts))
    samples_file(tel / "000001.parquet", 100.0, 5)
    (tel / ".000002.parquet.tmp").write_bytes(b"half")  # a write in progress: not taken
    seen: list[GpuSample] = []
    c.hub.taps.append(lambda ev: seen.append(ev) if isinstance(ev, GpuSample) else None)
    folder = JobFolder(c.ctx, fetch)
    names = sorted(p.name for p in tel.iterdir())
    assert await folder.telemetry(job, names) == 1
    assert await folder.telemetry(job, names) == 0  # the same listing again: nothing new
    samples_file(tel / "000002.parquet", 105.0, 3)  # the job's next flush
    assert await folder.telemetry(job, sorted(p.name for p in tel.iterdir())) == 1
    here = tmp_path / "results" / "tel" / "telemetry"
    assert sorted(p.name for p in here.iterdir()) == [
        "job.cluster.ar.tp1.1.000001.parquet",
        "job.cluster.ar.tp1.1.000002.parquet",
    ]
    assert [(s.host, s.gpu, s.power_w, s.ts) for s in seen][:2] == [
        ("cluster", 0, 100.0, 100.0),
        ("cluster", 0, 101.0, 101.0),
    ]
    assert len(seen) == 8
    # A coordinator that came back (new folder, new job record): nothing copied twice.
    again = JobFolder(c.ctx, fetch)
    assert await again.telemetry(job_of(c, job_dir), sorted(p.name for p in tel.iterdir())) == 0
    c.store.close()
    frame = pl.concat([pl.read_parquet(p) for p in sorted(here.iterdir())])
    assert frame.height == 8 and set(frame["host"]) == {"cluster"}


async def test_only_a_cell_cut_while_it_had_the_run_to_itself_is_judged(tmp_path: Path) -> None:
    c = campaign(tmp_path)
    a, b = list(c.cells.values())[:2]
    folder = JobFolder(c.ctx, fetch)
    job = job_of(c, tmp_path / "job")

    async def fold(*evs: Event) -> None:
        for ev in evs:
            await folder.fold(job, ev)

    # Run 1: a cell ends, then the next is cut by SIGTERM: it did not have the run to itself.
    await fold(
        CampaignStarted(campaign="tel", ts=10.0),
        CellStarted(cell_id=a.id, group=GROUP, attempt=1, ts=11.0),
        CellFinished(cell_id=a.id, group=GROUP, attempt=1, ts=12.0),
        CellStarted(cell_id=b.id, group=GROUP, attempt=1, ts=13.0),
        Aborted(by="SIGTERM", ts=40.0),
        CellQueued(cell_id=b.id, group=GROUP, attempt=2, by="aborted", ts=41.0),
    )
    assert job.cut == {} and job.signalled == 40.0 and job.run_started == 10.0
    # Run 2 (requeued): it runs first and is cut again: judged, with how long it ran.
    await fold(
        CampaignStarted(campaign="tel", ts=100.0),
        CellStarted(cell_id=b.id, group=GROUP, attempt=2, ts=105.0),
        Aborted(by="SIGTERM", ts=130.0),
        CellQueued(cell_id=b.id, group=GROUP, attempt=3, by="aborted", ts=131.5),
    )
    assert job.cut == {b.id: 26.5} and job.signalled == 130.0
    # A new run starts afresh.
    await fold(CampaignStarted(campaign="tel", ts=200.0))
    assert job.cut == {} and job.signalled is None
    c.store.close()

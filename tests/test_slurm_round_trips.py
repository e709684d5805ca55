"""SSH work to the login node pipelined: the round trips one poll costs for N jobs, counted
on a login node that answers each command after a delay. Jobs that left the queue are asked
how they ended at once (a few channels of the one connection), their last files read in one
command, and a submission's files written in one command, whose script a real shell runs."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_slurm_job_fold import GROUP, campaign

from specbench_tui.engine.batch_scheduler import BatchScheduler
from specbench_tui.engine.job_fold import JobRun
from specbench_tui.hosts.backends.slurm.slurm import SlurmCluster, write_script
from specbench_tui.hosts.batch_jobs import JobPaths
from specbench_tui.hosts.ssh import CommandResult

DELAY_S = 0.05


class Login:
    """A login node over one connection: counts commands and how many were in flight."""

    def __init__(self) -> None:
        self.commands: list[str] = []
        self.inputs: list[str | None] = []
        self.now = 0
        self.most = 0

    async def run(self, line: str, *, input: Any = None, **_: Any) -> CommandResult:
        self.commands.append(line)
        self.inputs.append(input)
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            await asyncio.sleep(DELAY_S)
        finally:
            self.now -= 1
        if line.startswith("squeue"):
            return CommandResult(0, "", "")  # every job left the queue
        if line.startswith("scontrol show job"):
            return CommandResult(0, "JobId=1 JobState=COMPLETED ExitCode=0:0 NodeList=n1", "")
        if line.startswith("r()"):
            return CommandResult(0, "-\n\n" * line.count("; r "), "")
        return CommandResult(0, "", "")

    async def close(self) -> None:
        pass


def scheduler(tmp_path: Path) -> tuple[BatchScheduler, Login]:
    c = campaign(tmp_path)
    login = Login()
    cluster = SlurmCluster("cluster", "login", ssh=login)  # type: ignore[arg-type]
    return BatchScheduler(c.ctx, list(c.groups), "cluster", cluster=cluster), login


@pytest.mark.parametrize("n", [1, 8])
async def test_one_poll_of_jobs_that_ended_costs_a_few_round_trips(tmp_path: Path, n: int) -> None:
    sched, login = scheduler(tmp_path)
    group = next(g for g in sched.groups if g.id == GROUP)
    jobs = [
        JobRun(group, i, JobPaths(f"/shared/j{i}", "tel", GROUP), job_id=str(i), starts=1)
        for i in range(1, n + 1)
    ]
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await sched._refresh_queue(jobs)
    took = loop.time() - t0
    assert all(j.ended and j.state == "COMPLETED" for j in jobs)
    kinds = [c.split()[0] for c in login.commands]
    # squeue, one scontrol per job, one listing of their sample files, one read of all.
    assert kinds.count("scontrol") == n and len(login.commands) == n + 3, kinds
    reads = [c for c in login.commands if c.startswith("r()")]
    assert len(reads) == 1 and reads[0].count("; r ") == 2 * n  # events and log of each
    assert login.most == min(n, 4)  # the ends asked side by side, four at a time
    # In rounds of DELAY_S: 1 squeue + ceil(n/4) scontrol + listing + read (serially it
    # was 1 + 2n: each job's end, then its files).
    rounds = 3 + -(-n // 4)
    print(f"\n{n} jobs ended: {len(login.commands)} commands in {rounds} rounds ({took:.2f}s)")
    assert took < (rounds + 2 * n) * DELAY_S + 5.0  # bounded however loaded the machine


@pytest.mark.system  # a real shell runs the script
async def test_a_submissions_files_are_written_in_one_command(tmp_path: Path) -> None:
    login = Login()
    cluster = SlurmCluster("cluster", "login", ssh=login)  # type: ignore[arg-type]
    base = tmp_path / "shared" / "job 1"
    files = {
        str(base / "job.json"): '{"cells": ["a"]}\n',
        str(base / "commands.jsonl"): "",
        str(base / "prompts" / "p.jsonl"): "naïve \u00e9t\u00e9 — 雪\n" * 500,
        str(base / "job.sh"): "#!/bin/bash -l\necho 'it''s' \"$HOME\"\n",
    }
    await cluster.write_files(files)
    assert len(login.commands) == 1  # one transfer for the batch (it was one per file)
    # The same script, run by a real shell: every file whole, the empty one empty.
    script, data = write_script(files)
    res = subprocess.run(["sh", "-c", script], input=data.encode(), capture_output=True, timeout=30)
    assert res.returncode == 0, res.stderr
    for path, text in files.items():
        assert Path(path).read_text(encoding="utf-8") == text, path
    assert sorted(p.name for p in base.iterdir()) == [
        "commands.jsonl",
        "job.json",
        "job.sh",
        "prompts",
    ]  # no temp file left
    # Nothing on the input at all (every file empty) still ends.
    empty = {str(base / "a"): "", str(base / "b"): ""}
    script, data = write_script(empty)
    assert data == ""
    res = subprocess.run(
        ["sh", "-c", script], stdin=subprocess.DEVNULL, capture_output=True, timeout=30
    )
    assert res.returncode == 0 and (base / "a").read_text() == ""

"""Slurm hosts in a plan: the keys, their checks, the groups they expand to, and the job
scripts the dry run shows (what the coordinator submits)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from specbench_tui.errors import InputError
from specbench_tui.hosts.backends.slurm.slurm import (
    parse_chunks,
    parse_sacct,
    parse_scontrol_job,
    parse_squeue,
)
from specbench_tui.hosts.backends.slurm.slurm_jobs import (
    job_comment,
    job_paths,
    job_script,
    job_warnings,
    parse_comment,
    sbatch_argv,
    slurm_time,
)
from specbench_tui.plan.expand import expand
from specbench_tui.plan.loader import load_plan

PLAN = """\
[campaign]
name = "cl"
baseline = "ar"

[hosts.gpu]
@HOST@

[server]
model = "/models/m"
port = 30000

[configs.ar]
[configs.dflash]
args = ["--speculative-algorithm", "DFLASH"]

[matrix]
configs = ["ar", "dflash"]
tp = [1, 4]

[workloads.single]
kind = "single"
prompts = ["chat"]
samples = 2
max_tokens = [32]
"""

HOST = """\
[hosts.gpu.slurm]
login = "me@login.cluster"
partition = "h200"
gpus_per_node = 8
account = "proj-1"
time_limit = "2h"
sbatch_args = ["--constraint=nvlink", "--exclusive"]
setup = ["module load cuda/12.4"]
shared_dir = "/lustre/me/specbench"
venv = "/lustre/me/venvs/specbench"
max_jobs = 3
"""


def plan_with(tmp_path: Path, host: str = "", extra: str = "") -> Path:
    text = PLAN.replace("@HOST@", extra) + "\n" + (host or HOST)
    p = tmp_path / "plan.toml"
    p.write_text(text)
    return p


def error_of(tmp_path: Path, host: str = "", extra: str = "") -> str:
    with pytest.raises(InputError) as e:
        load_plan(plan_with(tmp_path, host, extra))
    return str(e.value)


def test_a_slurm_host_takes_gpus_from_its_nodes_and_expands_to_allocated_groups(
    tmp_path: Path,
) -> None:
    plan = load_plan(plan_with(tmp_path))
    host = plan.spec.hosts["gpu"]
    assert host.kind == "slurm" and host.gpus == 8
    exp = expand(plan)
    assert {g.host_kind for g in exp.groups} == {"slurm"}
    for g in exp.groups:
        assert g.gpu_ids == () and "CUDA_VISIBLE_DEVICES" not in dict(g.env)
    # The rehearsal of the same plan runs on the simulated host, as for any real host.
    assert {g.host_kind for g in expand(plan, sim=True).groups} == {"sim"}


@pytest.mark.parametrize(
    ("host", "extra", "says"),
    [
        (
            HOST.replace("max_jobs = 3", 'max_jobs = 3\nshared = "/x"'),
            "",
            "did you mean 'shared_dir'",
        ),
        (HOST, 'ssh = "box"', "set exactly one of"),
        (HOST, "gpus = 4", "gpus = 4 but slurm.gpus_per_node = 8"),
        (HOST, 'stop_before = ["x.service"]', "stop_before does not apply to a Slurm host"),
        (HOST.replace('"--exclusive"', '"--gres=gpu:8"'), "", "--gres is set by the tool"),
        (HOST.replace('"--exclusive"', '"-Jname"'), "", "--job-name is set by the tool"),
        (HOST.replace('"--exclusive"', '"exclusive"'), "", "is not an sbatch option"),
        (HOST.replace('"/lustre/me/specbench"', '"lustre/x"'), "", "is not an absolute path"),
        (HOST.replace('"/lustre/me/specbench"', '"/a b"'), "", "is not an absolute path"),
        (HOST.replace('"h200"', '"h200; rm -rf /"'), "", "is not a Slurm name"),
        (HOST.replace('"me@login.cluster"', '"me@login; x"'), "", "is not an SSH destination"),
        (HOST + 'env = { "BAD NAME" = "1" }\n', "", "is not an environment variable name"),
        (HOST.replace("gpus_per_node = 8", "gpus_per_node = 2"), "", "TP 4 needs 4 GPUs"),
        (
            HOST.replace('"--exclusive"', '"--cpus-per-task=8"'),
            "",
            "--cpus-per-task is set by the tool from slurm.cpus_per_tp",
        ),
        (HOST.replace('"--exclusive"', '"-c8"'), "", "from slurm.cpus_per_tp"),
        (HOST + 'mem = "lots"\n', "", "mem"),
    ],
)
def test_slurm_host_mistakes_are_one_located_line(
    tmp_path: Path, host: str, extra: str, says: str
) -> None:
    msg = error_of(tmp_path, host, extra)
    assert says in msg and "plan.toml:" in msg, msg


def test_the_job_script_quotes_the_plan_and_asks_for_the_groups_gpus(tmp_path: Path) -> None:
    plan = load_plan(plan_with(tmp_path))
    slurm = plan.spec.hosts["gpu"].slurm
    assert slurm is not None
    g = next(g for g in expand(plan).groups if g.tp == 4)
    script = job_script(slurm, "cl", g, 2, "k3y")
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash -l"  # the site's profile: `module` for setup lines
    directives = [ln.split(" ", 1)[1] for ln in lines if ln.startswith("#SBATCH ")]
    assert "--gres=gpu:4" in directives and "--nodes=1" in directives
    assert "--partition=h200" in directives and "--account=proj-1" in directives
    assert "--time=02:00:00" in directives and "--requeue" in directives
    assert f"--comment={job_comment('k3y', g.id, 2)}" in directives
    assert f"--output=/lustre/me/specbench/cl/jobs/{g.id}/2/slurm-%j.out" in directives
    assert "--signal=B:TERM@120" in directives
    assert "module load cuda/12.4" in lines
    run = shlex.split(lines[-1])
    assert run[:2] == ["exec", "/lustre/me/venvs/specbench/bin/specbench-tui"]
    assert run[-2:] == ["--job", f"/lustre/me/specbench/cl/jobs/{g.id}/2/job.json"]
    paths = job_paths(slurm, "cl", g.id, 2)
    assert sbatch_argv(slurm, paths.script) == [
        "sbatch",
        "--parsable",
        "--constraint=nvlink",
        "--exclusive",
        f"/lustre/me/specbench/cl/jobs/{g.id}/2/job.sh",
    ]
    assert paths.events == f"/lustre/me/specbench/cl/jobs/{g.id}/2/results/cl/events.jsonl"
    assert parse_comment(job_comment("k3y", g.id, 2)) == ("k3y", g.id, 2)
    assert parse_comment("specbench:k:g") is None and parse_comment("(null)") is None
    assert slurm_time(90061.2) == "1-01:01:02" and slurm_time(59) == "00:00:59"


@pytest.mark.system
def test_dry_run_shows_every_groups_batch_job(tmp_path: Path) -> None:
    path = plan_with(tmp_path)

    def dry(*more: str) -> str:
        res = subprocess.run(
            [sys.executable, "-m", "specbench_tui", str(path), "--dry-run", *more],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        assert res.returncode == 0, res.stderr
        return res.stdout

    text = dry()
    assert "Slurm via me@login.cluster, partition h200, 8 GPUs per node, up to 3 jobs" in text
    assert text.count("batch job (submission 1): $ sbatch --parsable") == 4
    assert text.count("| #SBATCH --gres=gpu:4") == 2 and text.count("| #SBATCH --gres=gpu:1") == 2
    assert "GPUs from the job" in text and "schedule (predicted" in text
    doc = json.loads(dry("--json"))
    for g in doc["groups"]:
        assert g["slurm"]["script"].startswith("#!/bin/bash -l\n")
        assert g["slurm"]["sbatch"][0] == "sbatch"
        assert g["slurm"]["dir"].endswith(f"/jobs/{g['id']}/1")
    # Up to three jobs at once: the four groups take two rounds, not four.
    ends = sorted(s["end_s"] for s in doc["schedule"])
    starts = sorted(s["start_s"] for s in doc["schedule"])
    assert starts[:3] == [0, 0, 0] and starts[3] > 0 and doc["estimate_s"] < sum(ends)


def test_slurm_answers_are_read_as_slurm_writes_them() -> None:
    # squeue -h -t all -o '%i|%T|%N|%r|%k' as Slurm 22.05 prints it
    q = parse_squeue(
        "5|RUNNING|vm|None|specbench:abc:grp:1\n"
        "6|PENDING||Resources|specbench:abc:g2:3\n"
        "7|FAILED|vm|NonZeroExitCode|(null)\n"
    )
    assert q["5"].active and q["5"].node == "vm" and q["5"].reason == ""
    assert q["6"].reason == "Resources" and q["6"].active
    assert not q["7"].active
    # scontrol show job -o (abridged from 22.05), sacct -P
    end = parse_scontrol_job(
        "JobId=6 JobName=f.sh UserId=root(0) JobState=FAILED Reason=NonZeroExitCode "
        "Requeue=1 Restarts=1 ExitCode=3:0 NodeList=vm Comment=specbench:a:b:1"
    )
    assert end is not None and (end.state, end.exit_code, end.restarts) == ("FAILED", "3:0", 1)
    assert parse_scontrol_job("slurm_load_jobs error: Invalid job id specified") is None
    got = parse_sacct("CANCELLED by 0|0:15|vm\n")
    assert got is not None and got.state == "CANCELLED"
    assert parse_chunks("3\naGkK\n-\n\n0\n\n", 3) == [b"hi\n", None, b""]


def test_the_console_shows_a_groups_batch_job(tmp_path: Path) -> None:
    from rich.style import Style

    from specbench_tui.results.events import BatchJobChanged, CampaignStarted
    from specbench_tui.results.progress import CampaignProgress
    from specbench_tui.tui.detail import group_text
    from specbench_tui.tui.look import Palette

    exp = expand(load_plan(plan_with(tmp_path)))
    g = exp.groups[0]
    p = CampaignProgress()
    p.apply(CampaignStarted(campaign="cl", groups=exp.groups, cells=exp.cells))
    p.apply(BatchJobChanged(group=g.id, job_id="12", state="PENDING", reason="Priority"))
    p.apply(BatchJobChanged(group=g.id, job_id="12", state="RUNNING", node="n7", dir="/s/d"))
    assert p.jobs[g.id].state == "RUNNING"
    text = group_text(p, p.groups[g.id], Palette(*[Style()] * 7), now=0.0).plain
    assert "job 12 RUNNING on n7 · /s/d" in text


def test_cpus_and_memory_per_job_come_from_the_plan_and_the_job_says_what_it_got(
    tmp_path: Path,
) -> None:
    host = (
        HOST.replace('"--exclusive"', '"--hint=nomultithread"') + 'cpus_per_tp = 6\nmem = "200G"\n'
    )
    plan = load_plan(plan_with(tmp_path, host))
    slurm = plan.spec.hosts["gpu"].slurm
    assert slurm is not None
    for g in expand(plan).groups:
        script = job_script(slurm, "cl", g, 1, "k")
        directives = [ln.split(" ", 1)[1] for ln in script.splitlines() if ln.startswith("#SBATCH")]
        assert f"--cpus-per-task={6 * g.tp}" in directives and "--mem=200G" in directives
        assert "SLURM_CPUS_ON_NODE" in script  # in the job's output: what it got
        assert job_warnings(slurm, g, 60.0) == []


def test_dry_run_warns_of_one_cpu_and_of_a_time_limit_the_group_cannot_fit(tmp_path: Path) -> None:
    host = HOST.replace(', "--exclusive"', "").replace('time_limit = "2h"', 'time_limit = "5m"')
    plan = load_plan(plan_with(tmp_path, host))
    slurm = plan.spec.hosts["gpu"].slurm
    assert slurm is not None
    g = expand(plan).groups[0]
    said = job_warnings(slurm, g, 3600.0)
    assert len(said) == 2
    assert "gets the cluster's default (often one)" in said[0] and "slurm.cpus_per_tp" in said[0]
    assert "more than the time limit 5m" in said[1] and "raise slurm.time_limit" in said[1]
    # An exclusive node is CPUs enough; a group that fits its limit is not warned of.
    plan = load_plan(plan_with(tmp_path))
    slurm = plan.spec.hosts["gpu"].slurm
    assert slurm is not None
    assert job_warnings(slurm, g, 600.0) == []
    # And the dry run prints them under the group.
    from specbench_tui.plan.review import render_text, review

    text = render_text(review(load_plan(plan_with(tmp_path, host)), tmp_path / "res"))
    assert text.count("warning: the job asks for no CPUs") == 4


def test_a_prompt_file_outside_the_plans_directory_is_refused_for_slurm(tmp_path: Path) -> None:
    outside = tmp_path / "data"
    outside.mkdir()
    (outside / "mine.jsonl").write_text('{"id": "a", "prompt": "hello"}\n')
    plans = tmp_path / "plans"
    plans.mkdir()
    text = PLAN.replace("@HOST@", "").replace(
        'prompts = ["chat"]', 'prompts = ["../data/mine.jsonl"]'
    )
    path = plans / "plan.toml"
    path.write_text(text + "\n" + HOST)
    with pytest.raises(InputError) as e:
        load_plan(path)
    msg = str(e.value)
    assert "outside the plan's directory" in msg and "workloads.single.prompts" in msg, msg
    # Beside the plan it ships with the job.
    (plans / "mine.jsonl").write_text('{"id": "a", "prompt": "hello"}\n')
    path.write_text(text.replace("../data/mine.jsonl", "mine.jsonl") + "\n" + HOST)
    from specbench_tui.plan.job_files import job_files

    assert "mine.jsonl" in job_files(load_plan(path))

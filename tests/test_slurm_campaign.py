"""Campaigns on a real Slurm cluster (slurmctld + slurmd + munged on this machine, fake GPUs
as generic resources), reached through a real OpenSSH login node on 127.0.0.1: every group
a batch job, the tool headless on the node, the simulator as each job's server.

The coordinator runs as a user runs it, ``specbench-tui PLAN --headless``, in a process of
its own (so it can be killed and started again, as a closed console is).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from conftest import ROOT, free_port
from slurm_fixture import clean_slurm, slurm  # noqa: F401 (the fixtures)
from sshd_fixture import Sshd, sshd  # noqa: F401 (the fixture)
from support.slurm_cluster import SlurmCluster

pytestmark = pytest.mark.system

VENV = Path(sys.prefix)

PLAN = """\
[campaign]
name = "@NAME@"
baseline = "ar"

[hosts.cluster.slurm]
login = "sbplain"
partition = "gpu"
gpus_per_node = 8
shared_dir = "@SHARED@"
venv = "@VENV@"
max_jobs = @MAX_JOBS@
poll = "1s"
env = { SLURM_CONF = "@CONF@" }
@EXTRA@

[server]
python = "@PYTHON@"
model = "sim-model"
port = @PORT@
launch = ["{python}", "-m", "specbench_tui.sim", "--model-path", "{model}", "--tp-size", "{tp}",
          "--host", "127.0.0.1", "--port", "{port}", "--speed", "@SPEED@", "--seed", "0"]
ready_timeout = "90s"

[configs.ar]
[configs.dflash]
args = ["--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "8"]
[configs.eagle]
args = ["--speculative-algorithm", "EAGLE", "--speculative-num-draft-tokens", "4"]

[matrix]
configs = @CONFIGS@
tp = @TPS@

[workloads.single]
kind = "single"
prompts = ["chat"]
samples = 2
max_tokens = @MAX_TOKENS@
"""


def write_plan(
    tmp_path: Path,
    cluster: SlurmCluster,
    *,
    name: str = "onslurm",
    max_jobs: int = 4,
    speed: float = 50,
    max_tokens: str = "[24, 48]",
    configs: str = '["ar", "dflash", "eagle"]',
    tps: str = "[1, 2]",
    extra: str = "",
    text: str = PLAN,
) -> Path:
    shared = tmp_path / "shared"
    shared.mkdir(exist_ok=True)
    values = {
        "@NAME@": name,
        "@SHARED@": str(shared),
        "@VENV@": str(VENV),
        "@MAX_JOBS@": str(max_jobs),
        "@CONF@": str(cluster.conf),
        "@PYTHON@": sys.executable,
        "@PORT@": str(free_port()),
        "@SPEED@": f"{speed:g}",
        "@MAX_TOKENS@": max_tokens,
        "@CONFIGS@": configs,
        "@TPS@": tps,
        "@EXTRA@": extra,
    }
    for k, v in values.items():
        text = text.replace(k, v)
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path


_STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _no_coordinator_left() -> Iterator[None]:
    """A test that fails while its coordinator runs must not leave it running."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def coordinator(plan: Path, results: Path, sshd: Sshd) -> subprocess.Popen[str]:  # noqa: F811
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specbench_tui",
            str(plan),
            "--headless",
            "--results",
            str(results),
            "--ssh-config",
            str(sshd.config),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    _STARTED.append(proc)
    return proc


def finish(proc: subprocess.Popen[str], timeout_s: float = 420) -> tuple[int, str]:
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"the campaign did not finish in {timeout_s:g}s:\n{out[-6000:]}")
    return proc.returncode, out


def events(root: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (root / "events.jsonl").read_text().splitlines()]


def wait_for(what: str, ok, timeout_s: float = 180, proc=None) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not ok():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"{what}: the coordinator ended: {proc.communicate()[0][-4000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:g}s")
        time.sleep(0.25)


def _overlap(evs: list[dict[str, object]]) -> int:
    """The most groups whose servers were up at the same moment."""
    spans: dict[str, list[str]] = {}
    for e in evs:
        if e["event"] in ("group_started", "group_finished"):
            spans.setdefault(str(e["group"]), []).append(str(e["ts"]))
    edges = sorted(
        [(s[0], 1) for s in spans.values()] + [(s[-1], -1) for s in spans.values() if len(s) > 1]
    )
    most = now = 0
    for _, d in edges:
        now += d
        most = max(most, now)
    return most


def test_groups_run_as_parallel_jobs_and_every_cell_lands_once(
    tmp_path: Path,
    clean_slurm: SlurmCluster,  # noqa: F811
    sshd: Sshd,  # noqa: F811
) -> None:
    plan = write_plan(tmp_path, clean_slurm)
    code, out = finish(coordinator(plan, tmp_path / "results", sshd))
    assert code == 0, out[-6000:]
    root = tmp_path / "results" / "onslurm"
    evs = events(root)
    done = Counter(e["cell_id"] for e in evs if e["event"] == "cell_finished")
    cells = pl.read_parquet(root / "cells.parquet")
    assert cells.height == 12 and set(cells["status"]) == {"done"}
    assert set(done) == set(cells["cell_id"]) and set(done.values()) == {1}, done
    requests = pl.read_parquet(root / "requests.parquet")
    assert requests.height == 12 * 2 and set(requests["host"]) == {"cluster"}
    assert set(requests["attempt"]) == {1}
    # One job per group, each on the node with GPUs from its allocation, several at once.
    jobs = clean_slurm.jobs()
    ours = {j["name"]: j for j in jobs.values() if j["name"].startswith("sb.onslurm.")}
    groups = {str(e["group"]) for e in evs if e["event"] == "group_started"}
    assert sorted(ours) == sorted(f"sb.onslurm.{g}" for g in groups)
    assert len(ours) == 6 and {j["state"] for j in ours.values()} == {"COMPLETED"}
    started = [e for e in evs if e["event"] == "group_started"]
    assert {len(e["gpu_ids"]) for e in started} == {1, 2}
    assert _overlap(evs) >= 2, "no two jobs ran at the same time"
    running = [e for e in evs if e["event"] == "batch_job" and e["state"] == "RUNNING"]
    assert {e["node"] for e in running} == {clean_slurm.node}
    # The report renders from the folded results as from any campaign.
    assert (root / "report.md").exists()
    # Each group's server log, as the node wrote it, is the campaign's.
    log = (root / "logs" / "cluster.dflash.tp2.log").read_text()
    assert "starting cluster.dflash.tp2" in log and "exited with code 0" in log


def job_tool(job_dir: Path) -> int | None:
    """The pid of the tool a job runs (the batch step itself: the script execs it)."""
    marker = f"{job_dir}/job.json".encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cmd = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmd and b"--job" in cmd:
            return int(entry.name)
    return None


def cells_done(root: Path) -> Counter[str]:
    if not (root / "events.jsonl").exists():
        return Counter()
    return Counter(e["cell_id"] for e in events(root) if e["event"] == "cell_finished")


def running_cell(root: Path, group: str) -> dict[str, object] | None:
    state: dict[str, dict[str, object]] = {}
    for e in events(root):
        if e["event"] == "cell_started" and e["group"] == group:
            state[str(e["cell_id"])] = e
        elif e["event"] in ("cell_finished", "cell_failed", "cell_skipped", "cell_queued"):
            state.pop(str(e["cell_id"]), None)
    return next(iter(state.values()), None)


def test_a_job_killed_mid_group_is_requeued_for_the_rest(
    tmp_path: Path,
    clean_slurm: SlurmCluster,  # noqa: F811
    sshd: Sshd,  # noqa: F811
) -> None:
    plan = write_plan(
        tmp_path,
        clean_slurm,
        name="killed",
        speed=3,
        max_tokens="[48, 96, 144, 192]",
        configs='["ar", "dflash"]',
        tps="[1]",
    )
    root = tmp_path / "results" / "killed"
    proc = coordinator(plan, tmp_path / "results", sshd)
    group = "cluster.dflash.tp1"
    job_dir = tmp_path / "shared" / "killed" / "jobs" / group / "1"

    on_node = job_dir / "results" / "killed"  # the job's own results, as the node writes them

    def one_done_one_running() -> bool:
        if not (on_node / "events.jsonl").exists():
            return False
        return bool(cells_done(on_node)) and running_cell(on_node, group) is not None

    wait_for("a cell of the group done and the next running", one_done_one_running, proc=proc)
    pid = job_tool(job_dir)
    assert pid is not None, "the job's tool is not running on this node"
    os.kill(pid, signal.SIGKILL)  # the node's process dies as in a crash or an OOM kill
    time.sleep(0.2)
    before = cells_done(on_node)  # what the job had finished when it died
    killed = running_cell(on_node, group)
    assert killed is not None
    code, out = finish(proc)
    assert code == 0, out[-6000:]
    after = cells_done(root)
    assert set(after.values()) == {1}, after  # every cell once, none twice
    assert all(after[c] == 1 for c in before)  # what was finished before the kill stays
    cells = pl.read_parquet(root / "cells.parquet")
    assert set(cells["status"]) == {"done"} and cells.height == 8
    attempts = dict(zip(cells["cell_id"], cells["attempt"], strict=True))
    assert attempts[killed["cell_id"]] == 2  # the interrupted cell ran again, whole
    assert {attempts[c] for c in before} == {1}
    evs = events(root)
    queued = [e for e in evs if e["event"] == "cell_queued" and e["cell_id"] == killed["cell_id"]]
    assert [e["by"] for e in queued] == ["interrupted"]
    # Requeued, not submitted anew: one job for the group, run twice.
    ids = {e["job_id"] for e in evs if e["event"] == "batch_job" and e["group"] == group}
    assert len(ids) == 1, ids
    assert "requeued for the" in out
    requests = pl.read_parquet(root / "requests.parquet")
    counted = requests.filter(pl.col("cell_id") == killed["cell_id"])
    assert set(counted["attempt"]) == {2}  # the cut attempt's requests were never counted
    assert len(list((tmp_path / "shared" / "killed" / "jobs" / group).iterdir())) == 1
    assert_job_events_change(evs)


def assert_job_events_change(evs: list[dict[str, object]]) -> None:
    """A ``batch_job`` event only when its job's state, node or reason changed (a pending
    requeued job shows no node in squeue: that is no change)."""
    last: dict[object, tuple[object, ...]] = {}
    for e in evs:
        if e["event"] != "batch_job":
            continue
        now = (e["state"], e["node"], e["reason"])
        assert last.get(e["job_id"]) != now, e
        last[e["job_id"]] = now


@pytest.mark.parametrize(
    "said",
    [
        "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation",
        "",  # exits 1 saying nothing
    ],
    ids=["timed-out", "silent"],
)
def test_a_lost_sbatch_reply_is_looked_up_by_its_comment_not_submitted_again(
    tmp_path: Path,
    clean_slurm: SlurmCluster,  # noqa: F811
    sshd: Sshd,  # noqa: F811
    said: str,
) -> None:
    """sbatch submits and then fails: says "Socket timed out" (Slurm: the job may have been
    submitted), or exits 1 with no word. The job is found by its comment before the failure
    is believed: one job for the group, and its cells done."""
    real = shutil.which("sbatch")
    assert real is not None
    shim = tmp_path / "bin"
    shim.mkdir()
    mark = tmp_path / "sbatch-answered-once"
    (shim / "sbatch").write_text(
        "#!/bin/sh\n"
        # Only a submission of a job script (not --version, not --test-only from stdin).
        f'case "$*" in *job.sh) ;; *) exec {real} "$@";; esac\n'
        f"if mkdir {mark} 2>/dev/null; then\n"
        f'  {real} "$@" >/dev/null\n' + (f"  echo '{said}' >&2\n" if said else "") + "  exit 1\n"
        "fi\n"
        f'exec {real} "$@"\n'
    )
    (shim / "sbatch").chmod(0o755)
    path = f"{shim}:{os.environ['PATH']}"
    plan = write_plan(tmp_path, clean_slurm, name="lost", configs='["ar"]', tps="[1]")
    plan.write_text(
        plan.read_text().replace(
            'env = { SLURM_CONF = "', f'env = {{ PATH = "{path}", SLURM_CONF = "'
        )
    )
    root = tmp_path / "results" / "lost"
    code, out = finish(coordinator(plan, tmp_path / "results", sshd))
    assert code == 0, out[-6000:]
    assert mark.exists()  # the shim's lost reply happened
    # Found at once by its comment: neither a refusal nor a second try.
    assert "refused the job" not in out and "trying again" not in out, out[-6000:]
    cells = pl.read_parquet(root / "cells.parquet")
    assert set(cells["status"]) == {"done"}
    evs = events(root)
    ids = {e["job_id"] for e in evs if e["event"] == "batch_job"}
    assert len(ids) == 1, ids
    jobs = tmp_path / "shared" / "lost" / "jobs" / "cluster.ar.tp1"
    assert [p.name for p in jobs.iterdir()] == ["1"]  # one submission, its comment kept
    assert_job_events_change(evs)


def test_a_closed_coordinator_finds_its_running_jobs_again(
    tmp_path: Path,
    clean_slurm: SlurmCluster,  # noqa: F811
    sshd: Sshd,  # noqa: F811
) -> None:
    plan = write_plan(
        tmp_path,
        clean_slurm,
        name="reopened",
        speed=1,  # jobs long enough to outlive the first console by a margin on a loaded machine
        max_tokens="[48, 96, 144, 192]",
        configs='["ar", "dflash", "eagle"]',
        tps="[1]",
        max_jobs=3,
    )
    root = tmp_path / "results" / "reopened"
    first = coordinator(plan, tmp_path / "results", sshd)
    wait_for(
        "three jobs running and a cell done",
        lambda: (
            root.exists()
            and bool(cells_done(root))
            and len([j for j in clean_slurm.jobs().values() if j["state"] == "RUNNING"]) == 3
        ),
        proc=first,
    )
    jobs_before = {j["comment"]: jid for jid, j in clean_slurm.jobs().items()}
    first.send_signal(signal.SIGHUP)  # the terminal closed: the console goes, the jobs stay
    first.communicate(timeout=30)
    done_then = cells_done(root)
    running = [j for j in clean_slurm.jobs().values() if j["state"] == "RUNNING"]
    assert len(running) == 3, (
        f"the jobs ended with the console: {clean_slurm.jobs()}\n{clean_slurm.log_tail()}"
    )
    time.sleep(2)  # cells finish on the cluster while no console follows them
    still = len([j for j in clean_slurm.jobs().values() if j["state"] == "RUNNING"])
    second = coordinator(plan, tmp_path / "results", sshd)
    code, out = finish(second)
    assert code == 0, out[-6000:]
    followed = out.count("of an earlier run is RUNNING; following it")
    assert followed >= 1 and followed >= still - 1, out[-4000:]
    jobs_after = {j["comment"]: jid for jid, j in clean_slurm.jobs().items()}
    assert jobs_after == jobs_before  # no group was submitted again
    done = cells_done(root)
    assert set(done.values()) == {1} and len(done) == 12, done
    assert set(done_then) < set(done)
    cells = pl.read_parquet(root / "cells.parquet")
    assert set(cells["status"]) == {"done"} and set(cells["attempt"]) == {1}
    requests = pl.read_parquet(root / "requests.parquet")
    assert requests.height == 12 * 2


def send(root: Path, *words: str) -> str:
    res = subprocess.run(
        [sys.executable, "-m", "specbench_tui", "--attach", str(root), "--send", *words],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_pause_skip_resume_and_abort_reach_the_jobs(
    tmp_path: Path,
    clean_slurm: SlurmCluster,  # noqa: F811
    sshd: Sshd,  # noqa: F811
) -> None:
    plan = write_plan(
        tmp_path,
        clean_slurm,
        name="steered",
        speed=2,
        max_tokens="[48, 96, 144, 192, 240]",
        configs='["ar", "dflash"]',
        tps="[1]",
        max_jobs=2,
    )
    root = tmp_path / "results" / "steered"
    jobs = tmp_path / "shared" / "steered" / "jobs"
    node_log = {g: jobs / g / "1" / "results" / "steered" for g in ("cluster.ar.tp1",)}
    ar = node_log["cluster.ar.tp1"]
    proc = coordinator(plan, tmp_path / "results", sshd)
    wait_for(
        "the first cell of the ar job done",
        lambda: (ar / "events.jsonl").exists() and bool(cells_done(ar)),
        proc=proc,
    )
    assert "paused" in send(root, "pause")
    wait_for(
        "the job paused",
        lambda: any(e["event"] == "paused" for e in events(ar)),
        timeout_s=30,
        proc=proc,
    )
    held = len(cells_done(ar))
    assert [j["state"] for j in clean_slurm.jobs().values()].count("RUNNING") == 2
    skipped = "cluster.ar.tp1/single/chat/240"
    assert "skipped" in send(root, "skip", skipped)
    wait_for(
        "the job skipped the cell",
        lambda: any(e["event"] == "cell_skipped" for e in events(ar)),
        timeout_s=30,
        proc=proc,
    )
    time.sleep(2)
    assert len(cells_done(ar)) <= held + 1  # paused: nothing new starts (one may have ended)
    assert "resumed" in send(root, "resume")
    wait_for(
        "the job went on",
        lambda: (
            len(cells_done(ar)) >= held + 1 and any(e["event"] == "resumed" for e in events(ar))
        ),
        timeout_s=60,
        proc=proc,
    )
    assert "aborting" in send(root, "abort")
    code, out = finish(proc, timeout_s=180)
    assert code == 130, out[-4000:]
    assert not [j for j in clean_slurm.jobs().values() if j["state"] in ("RUNNING", "PENDING")]
    assert any(e["event"] == "aborted" for e in events(ar))  # the tool stopped as on SIGTERM
    evs = events(root)
    skip = [e for e in evs if e["event"] == "cell_skipped"]
    assert len(skip) == 1 and skip[0]["cell"] == skipped  # once, not again from the job
    # Run again: what was left runs in new jobs; nothing done runs twice.
    code, out = finish(coordinator(plan, tmp_path / "results", sshd))
    assert code == 0, out[-4000:]
    cells = pl.read_parquet(root / "cells.parquet")
    assert sorted(cells["status"].to_list()) == ["done"] * 9 + ["skipped"]
    done = cells_done(root)
    assert set(done.values()) == {1} and len(done) == 9
    again = json.loads((jobs / "cluster.ar.tp1" / "2" / "job.json").read_text())
    first = {e["cell_id"] for e in events(ar) if e["event"] == "cell_finished"}
    assert again["cells"] and not set(again["cells"]) & first  # only the rest runs again
    print(out)


def test_a_job_the_cluster_requeues_resumes_where_it_stopped(
    tmp_path: Path,
    clean_slurm: SlurmCluster,  # noqa: F811
    sshd: Sshd,  # noqa: F811
) -> None:
    """Preemption with requeue, or an admin's ``scontrol requeue``: Slurm stops the job
    (SIGTERM: the tool keeps what it measured) and runs it again later, in its directory."""
    plan = write_plan(
        tmp_path,
        clean_slurm,
        name="preempted",
        speed=3,
        max_tokens="[48, 96, 144, 192]",
        configs='["ar"]',
        tps="[1]",
    )
    root = tmp_path / "results" / "preempted"
    group = "cluster.ar.tp1"
    on_node = tmp_path / "shared" / "preempted" / "jobs" / group / "1" / "results" / "preempted"
    proc = coordinator(plan, tmp_path / "results", sshd)
    wait_for(
        "a cell done and the next running",
        lambda: (
            (on_node / "events.jsonl").exists()
            and bool(cells_done(on_node))
            and running_cell(on_node, group) is not None
        ),
        proc=proc,
    )
    (job_id,) = [j for j, v in clean_slurm.jobs().items() if v["name"] == f"sb.preempted.{group}"]
    clean_slurm.run("scontrol", "requeue", job_id)
    wait_for(
        "the job back in the queue",
        lambda: clean_slurm.jobs()[job_id]["state"] == "PENDING",
        timeout_s=60,
        proc=proc,
    )
    clean_slurm.run("scontrol", "update", f"jobid={job_id}", "starttime=now")  # no 2 min wait
    code, out = finish(proc)
    assert code == 0, out[-6000:]
    evs = events(root)
    done = cells_done(root)
    assert len(done) == 4 and set(done.values()) == {1}
    queued = [e for e in evs if e["event"] == "cell_queued"]
    assert len(queued) == 1 and queued[0]["by"] in ("aborted", "interrupted"), queued
    cells = pl.read_parquet(root / "cells.parquet")
    attempts = dict(zip(cells["cell_id"], cells["attempt"], strict=True))
    assert attempts[queued[0]["cell_id"]] == 2 and sorted(attempts.values()) == [1, 1, 1, 2]
    runs = [e for e in events(on_node) if e["event"] == "campaign_started"]
    assert len(runs) == 2  # the same job ran twice, in its own directory
    assert {e["job_id"] for e in evs if e["event"] == "batch_job"} == {job_id}


def demo_on_slurm(tmp_path: Path, cluster: SlurmCluster) -> Path:
    """plans/demo.toml with its simulated host replaced by the Slurm cluster: the jobs'
    servers are the simulator at the demo's speed, started by the plan's launch template."""
    text = (ROOT / "plans" / "demo.toml").read_text()
    start = text.index("[hosts.sim]")
    end = text.index("[server]")
    shared = tmp_path / "shared"
    shared.mkdir()
    host = (
        "[hosts.cluster.slurm]\n"
        'login = "sbplain"\n'
        'partition = "gpu"\n'
        "gpus_per_node = 8\n"
        f'shared_dir = "{shared}"\n'
        f'venv = "{VENV}"\n'
        "max_jobs = 4\n"
        'poll = "1s"\n'
        f'env = {{ SLURM_CONF = "{cluster.conf}" }}\n\n'
    )
    server = (
        "[server]\n"
        f'python = "{sys.executable}"\n'
        'launch = ["{python}", "-m", "specbench_tui.sim", "--model-path", "{model}", '
        '"--tp-size", "{tp}", "--host", "127.0.0.1", "--port", "{port}", "--speed", "12", '
        '"--seed", "0"]\n'
    )
    text = text[:start] + host + text[end:].replace("[server]\n", server, 1)
    path = tmp_path / "demo-slurm.toml"
    path.write_text(text)
    return path


def headings(report: Path) -> list[str]:
    return [
        line.replace("cluster", "HOST").replace("sim", "HOST")
        for line in report.read_text().splitlines()
        if line.startswith("#")
    ]


def test_the_demo_on_slurm_has_the_shape_of_a_local_run(
    tmp_path: Path,
    clean_slurm: SlurmCluster,  # noqa: F811
    sshd: Sshd,  # noqa: F811
) -> None:
    local = subprocess.run(
        [
            sys.executable,
            "-m",
            "specbench_tui",
            str(ROOT / "plans" / "demo.toml"),
            "--headless",
            "--results",
            str(tmp_path / "local"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert local.returncode == 0, local.stdout[-4000:]
    plan = demo_on_slurm(tmp_path, clean_slurm)
    code, out = finish(coordinator(plan, tmp_path / "slurm", sshd), timeout_s=600)
    assert code == 0, out[-6000:]
    a, b = tmp_path / "local" / "demo", tmp_path / "slurm" / "demo"
    for view in ("cells.parquet", "requests.parquet"):
        x, y = pl.read_parquet(a / view), pl.read_parquet(b / view)
        assert x.height == y.height and x.height > 0, view
        assert set(x.columns) == set(y.columns), (view, set(x.columns) ^ set(y.columns))
    cells = pl.read_parquet(b / "cells.parquet")
    assert cells.height == 64 and set(cells["status"]) == {"done"}
    local_names = sorted(
        n.replace("sim.", "", 1) for n in pl.read_parquet(a / "cells.parquet")["name"]
    )
    assert sorted(n.replace("cluster.", "", 1) for n in cells["name"]) == local_names
    for report in ("report.md", "report.tex"):
        assert (b / report).exists()
    assert headings(a / "report.md") == headings(b / "report.md")

    def verdicts(root: Path) -> set[tuple[object, ...]]:
        return {
            (e["check"], e["config"], e["tp"], e["status"])
            for e in events(root)
            if e["event"] == "check_verdict"
        }

    assert verdicts(a) == verdicts(b) and verdicts(b)
    evs = events(b)
    assert _overlap(evs) >= 2  # groups ran side by side as jobs
    assert len({e["job_id"] for e in evs if e["event"] == "batch_job"}) == 8
    # The report names each group's job and the node it ran on.
    md = (b / "report.md").read_text()
    assert "Slurm job on node" in md
    for e in evs:
        if e["event"] == "batch_job" and e["node"]:
            assert f"{e['job_id']} on {e['node']}" in md
    assert_job_events_change(evs)


def test_dry_run_check_asks_the_cluster_and_submits_nothing(
    tmp_path: Path,
    clean_slurm: SlurmCluster,  # noqa: F811
    sshd: Sshd,  # noqa: F811
) -> None:
    def check(plan: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "specbench_tui",
                str(plan),
                "--dry-run",
                "--check",
                "--ssh-config",
                str(sshd.config),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )

    plan = write_plan(tmp_path, clean_slurm, name="checked")
    res = check(plan)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    pre = res.stdout[res.stdout.index("Preflight:") :]
    assert "host cluster (slurm)" in pre and "slurm-wlm" in pre
    assert "TP1 job (cluster.ar.tp1): sbatch: Job" in pre and "TP2 job" in pre
    assert f"specbench-tui {__import__('specbench_tui').__version__} in {VENV}" in pre
    assert not [j for j in clean_slurm.jobs().values() if j["name"].startswith("sb.checked.")]
    bad = plan.read_text().replace('partition = "gpu"', 'partition = "nope"')
    plan.write_text(bad)
    res = check(plan)
    assert res.returncode == 2
    assert "TP1 job (cluster.ar.tp1)" in res.stderr and "partition" in res.stderr.lower()
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_a_job_that_fails_before_the_tool_or_is_cancelled_fails_its_cells_with_why(
    tmp_path: Path,
    clean_slurm: SlurmCluster,  # noqa: F811
    sshd: Sshd,  # noqa: F811
) -> None:
    plan = write_plan(
        tmp_path,
        clean_slurm,
        name="nosetup",
        configs='["ar"]',
        tps="[1]",
        extra='setup = ["echo module cuda/99 not found >&2", "exit 7"]',
    )
    code, out = finish(coordinator(plan, tmp_path / "results", sshd))
    assert code == 1, out[-4000:]
    cells = pl.read_parquet(tmp_path / "results" / "nosetup" / "cells.parquet")
    assert set(cells["status"]) == {"failed"}
    reason = cells["reason"][0]
    assert "ended FAILED before the tool started" in reason, reason
    failed = [e for e in events(tmp_path / "results" / "nosetup") if e["event"] == "cell_failed"]
    assert "module cuda/99 not found" in "\n".join(failed[0]["log_tail"])
    assert "requeued" not in out  # a broken job script is not retried

    b = tmp_path / "b"
    b.mkdir()
    plan = write_plan(
        b,
        clean_slurm,
        name="cancelled",
        speed=2,
        max_tokens="[96, 192, 288]",
        configs='["ar"]',
        tps="[1]",
    )
    proc = coordinator(plan, b / "results", sshd)
    on_node = b / "shared" / "cancelled" / "jobs" / "cluster.ar.tp1" / "1" / "results"
    wait_for(
        "a cell done in the job",
        lambda: (
            (on_node / "cancelled" / "events.jsonl").exists()
            and bool(cells_done(on_node / "cancelled"))
        ),
        proc=proc,
    )
    (job_id,) = [
        j for j, v in clean_slurm.jobs().items() if v["name"] == "sb.cancelled.cluster.ar.tp1"
    ]
    clean_slurm.run("scancel", job_id)  # someone cancels it by hand
    code, out = finish(proc)
    assert code == 1, out[-4000:]
    cells = pl.read_parquet(b / "results" / "cancelled" / "cells.parquet")
    statuses = Counter(cells["status"])
    assert statuses["done"] >= 1 and statuses["failed"] >= 1, statuses
    reasons = set(cells.filter(pl.col("status") == "failed")["reason"])
    assert all("cancelled outside the campaign" in r for r in reasons), reasons
    assert (
        len({e["job_id"] for e in events(b / "results" / "cancelled") if e["event"] == "batch_job"})
        == 1
    )


VLLM_PLAN = """\
[campaign]
name = "vllm-slurm"

[hosts.cluster.slurm]
login = "sbplain"
partition = "gpu"
gpus_per_node = 8
shared_dir = "@SHARED@"
venv = "@VENV@"
poll = "2s"
env = { SLURM_CONF = "@CONF@" }

[server]
engine = "vllm"
python = "@VLLM@"
model = "@MODEL@"
port = @PORT@
ready_timeout = "20m"
args = ["--max-model-len", "1024", "--dtype", "bfloat16", "--served-model-name", "tiny"]
env = { VLLM_CPU_KVCACHE_SPACE = "1", VLLM_CPU_OMP_THREADS_BIND = "nobind" }

[configs.ngram]
args = ["--speculative-config",
        '{{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}}',
        "--per-request-spec-decode-metrics", "summary"]

[matrix]
configs = ["ngram"]
tp = [1]

[workloads.single]
kind = "single"
prompts = ["chat"]
samples = 2
max_tokens = [48]
"""


def test_a_real_vllm_on_cpu_serves_a_groups_job(
    tmp_path: Path,
    clean_slurm: SlurmCluster,  # noqa: F811
    sshd: Sshd,  # noqa: F811
) -> None:
    from test_engines_vllm import need_vllm

    python = need_vllm()
    model = tmp_path / "tiny-qwen3"
    subprocess.run(
        [python, "-m", "specbench_tui.engines.tiny_model", str(model)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=600,
    )
    text = VLLM_PLAN.replace("@VLLM@", python).replace("@MODEL@", str(model))
    plan = write_plan(tmp_path, clean_slurm, name="vllm-slurm", text=text)
    code, out = finish(coordinator(plan, tmp_path / "results", sshd), timeout_s=1500)
    assert code == 0, out[-6000:]
    root = tmp_path / "results" / "vllm-slurm"
    ready = [e for e in events(root) if e["event"] == "service_ready"]
    assert [e["engine"] for e in ready] == ["vllm"] and ready[0]["engine_version"]
    assert ready[0]["speculative"] is True and ready[0]["served_model"] == "tiny"
    cells = pl.read_parquet(root / "cells.parquet")
    assert cells["status"].to_list() == ["done"]
    assert cells["accept_length_mean"][0] > 1.0  # n-gram drafts accepted, from vLLM's own counts
    log = (root / "logs" / "cluster.ngram.tp1.log").read_text()
    assert "starting cluster.ngram.tp1" in log and "non-default args:" in log  # vLLM's own


def test_a_rerun_of_a_cell_its_job_finished_runs_in_a_new_submission(
    tmp_path: Path,
    clean_slurm: SlurmCluster,  # noqa: F811
    sshd: Sshd,  # noqa: F811
) -> None:
    plan = write_plan(
        tmp_path,
        clean_slurm,
        name="rerun",
        speed=3,
        max_tokens="[48, 96, 144, 192]",
        configs='["ar"]',
        tps="[1]",
    )
    root = tmp_path / "results" / "rerun"
    proc = coordinator(plan, tmp_path / "results", sshd)
    wait_for("a cell done", lambda: root.exists() and bool(cells_done(root)), proc=proc)
    (first,) = list(cells_done(root))
    assert "queued 1 cell again" in send(root, "rerun", first)
    code, out = finish(proc)
    assert code == 0, out[-4000:]
    finished = [e for e in events(root) if e["event"] == "cell_finished"]
    assert [e["attempt"] for e in finished if e["cell_id"] == first] == [1, 2]
    assert Counter(e["cell_id"] for e in finished)[first] == 2 and len(finished) == 5
    jobs = tmp_path / "shared" / "rerun" / "jobs" / "cluster.ar.tp1"
    assert sorted(p.name for p in jobs.iterdir()) == ["1", "2"]
    assert json.loads((jobs / "2" / "job.json").read_text())["cells"] == [first]
    cells = pl.read_parquet(root / "cells.parquet")
    assert dict(zip(cells["cell_id"], cells["attempt"], strict=True))[first] == 2
    requests = pl.read_parquet(root / "requests.parquet")
    assert sorted(set(requests.filter(pl.col("cell_id") == first)["attempt"])) == [1, 2]


def test_a_job_id_that_names_another_job_is_neither_requeued_nor_cancelled(
    tmp_path: Path,
    clean_slurm: SlurmCluster,  # noqa: F811
    sshd: Sshd,  # noqa: F811
) -> None:
    """After a controller lost its state an id the campaign kept may name someone else's job:
    requeue and cancel check the job's comment first."""
    import asyncio

    from specbench_tui.hosts.backends.slurm.slurm import SlurmCluster as Login
    from specbench_tui.hosts.backends.slurm.slurm import SlurmError

    out = clean_slurm.run(
        "sbatch",
        "--parsable",
        "--partition=gpu",
        "--comment=someone-else",
        f"--output={tmp_path}/other-%j.out",
        "--wrap=sleep 120",
    ).stdout
    job_id = out.strip().split(";")[0]
    ours = "specbench:k3y:cluster.ar.tp1:1"

    async def go() -> str:
        login = Login(
            "cluster",
            "sbplain",
            env={"SLURM_CONF": str(clean_slurm.conf)},
            ssh_config=str(sshd.config),
        )
        try:
            await login.cancel(job_id, comment=ours)
            with pytest.raises(SlurmError) as e:
                await login.requeue(job_id, comment=ours)
            return e.value.reason
        finally:
            await login.close()

    reason = asyncio.run(go())
    assert f"job {job_id} is not this campaign's (its comment is someone-else)" in reason
    job = clean_slurm.jobs()[job_id]
    assert job["state"] in ("RUNNING", "PENDING"), job  # not cancelled, not requeued


def test_a_cell_longer_than_the_time_limit_fails_once_and_the_rest_run_after_it(
    tmp_path: Path,
    clean_slurm: SlurmCluster,  # noqa: F811
    sshd: Sshd,  # noqa: F811
) -> None:
    """A one-minute job whose first cell needs minutes: Slurm stops the job at its limit;
    that cell fails once, saying why, and the requeued job runs the cells never tried."""
    plan = write_plan(
        tmp_path,
        clean_slurm,
        name="limited",
        speed=5,
        max_tokens="[6000, 24, 48]",
        configs='["ar"]',
        tps="[1]",
        # The node's GPU is read by the stand-in nvidia-smi (an H200's captured answers), so
        # the job has samples and cell energy to fold.
        extra=(
            'time_limit = "1m"\nmax_requeues = 1\n'
            f'setup = ["export PATH={ROOT / "tests" / "support"}:$PATH"]'
        ),
    )
    root = tmp_path / "results" / "limited"
    code, out = finish(coordinator(plan, tmp_path / "results", sshd), timeout_s=600)
    assert code == 1, out[-6000:]  # a cell failed
    cells = pl.read_parquet(root / "cells.parquet")
    status = dict(zip(cells["name"], cells["status"], strict=True))
    long_cell = "cluster.ar.tp1/single/chat/6000"
    assert status == {  # the two never tried before the limit ran after it
        long_cell: "failed",
        "cluster.ar.tp1/single/chat/24": "done",
        "cluster.ar.tp1/single/chat/48": "done",
    }, (status, out[-6000:])
    evs = events(root)
    failed = [e for e in evs if e["event"] == "cell_failed"]
    assert len(failed) == 1 and failed[0]["cell"] == long_cell, failed
    reason = str(failed[0]["reason"])
    assert "longer than the time limit" in reason and "time_limit 1m" in reason, reason
    assert "had run" in reason
    assert "longer than the time limit" in out and "at its time limit; requeued for the" in out
    ids = {e["job_id"] for e in evs if e["event"] == "batch_job"}
    assert len(ids) == 1, ids  # the same job, requeued for the rest
    started = [e for e in evs if e["event"] == "cell_started" and e["cell"] == long_cell]
    assert len(started) == 1  # not tried again
    # The job's telemetry is the campaign's: its GPU samples and its cells' energy.
    copied = sorted(p.name for p in (root / "telemetry").glob("job.cluster.ar.tp1.1.*.parquet"))
    assert copied, sorted(p.name for p in (root / "telemetry").iterdir())
    samples = pl.read_parquet(root / "telemetry.parquet")
    assert samples.height > 0 and set(samples["host"]) == {"cluster"}
    energy = {e["cell_id"]: e["attempt"] for e in evs if e["event"] == "cell_energy"}
    done = cells.filter(pl.col("status") == "done")
    assert set(energy) == set(done["cell_id"]), (energy, out[-3000:])
    assert all(energy[c] == a for c, a in zip(done["cell_id"], done["attempt"], strict=True))
    md = (root / "report.md").read_text()
    assert "GPU telemetry per service group (busy and idle apart)" in md
    assert "not folded" not in md

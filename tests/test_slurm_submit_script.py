"""``SlurmCluster.submit``'s script on a local shell, with ``squeue`` and ``sbatch`` stand-ins
that keep a queue in a file: what the coordinator makes of each way an sbatch can answer.

An sbatch that submitted the job and then exited 1 saying nothing was taken as a refusal: the
group failed 76 s later while its job ran both cells, and ``--rerun-failed`` would have
submitted it again. The job is now looked up by its comment before any failure is believed.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from specbench_tui.hosts.backends.slurm.slurm import SlurmCluster, SlurmError
from specbench_tui.hosts.ssh import CommandResult

COMMENT = "specbench:abc123:cluster.ar.tp1:1"

SQUEUE = """#!/bin/sh
cat "{queue}" 2>/dev/null || true
"""
# $1: what this sbatch does: "ok" submits and answers; "silent" submits, then exits 1 with no
# word; "refuse" submits nothing and says why; "mute" submits nothing and exits 1.
SBATCH = """#!/bin/sh
n=$(( $(cat "{queue}" 2>/dev/null | wc -l) + 100 ))
case "{mode}" in
  ok) echo "$n|{comment}" >> "{queue}"; echo "$n;cluster";;
  silent) echo "$n|{comment}" >> "{queue}"; exit 1;;
  refuse) echo "sbatch: error: invalid partition specified: gpu" >&2; exit 1;;
  mute) exit 1;;
esac
"""


class LocalShell:
    """The login node's shell, here."""

    async def run(self, line: str, *, input: str | None = None, timeout_s: float = 60.0):
        proc = await asyncio.to_thread(
            subprocess.run, ["sh", "-c", line], capture_output=True, text=True, timeout=timeout_s
        )
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)

    async def close(self) -> None:
        pass


def _cluster(tmp_path: Path, mode: str) -> tuple[SlurmCluster, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    queue = tmp_path / "queue"
    for name, text in (("squeue", SQUEUE), ("sbatch", SBATCH)):
        f = bin_dir / name
        f.write_text(text.format(queue=queue, mode=mode, comment=COMMENT))
        f.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    return SlurmCluster("cluster", "login", env=env, ssh=LocalShell()), queue  # type: ignore[arg-type]


def _submit(cluster: SlurmCluster, tmp_path: Path) -> str:
    return asyncio.run(
        cluster.submit(["sbatch", "job.sh"], comment=COMMENT, id_file=str(tmp_path / "job_id"))
    )


def test_an_sbatch_that_submits_then_exits_1_silently_gives_its_job(tmp_path: Path) -> None:
    cluster, queue = _cluster(tmp_path, "silent")
    assert _submit(cluster, tmp_path) == "100"
    assert queue.read_text().splitlines() == [f"100|{COMMENT}"]  # submitted once
    assert (tmp_path / "job_id").read_text().strip() == "100"
    # Asked again (a retry, a coordinator opened anew): the same job, nothing submitted.
    assert _submit(cluster, tmp_path) == "100"
    assert len(queue.read_text().splitlines()) == 1


@pytest.mark.parametrize(
    ("mode", "said"),
    [("refuse", "invalid partition specified"), ("mute", "exit status 1")],
)
def test_a_refusal_is_believed_only_when_no_job_carries_the_comment(
    tmp_path: Path, mode: str, said: str
) -> None:
    cluster, queue = _cluster(tmp_path, mode)
    with pytest.raises(SlurmError) as err:
        _submit(cluster, tmp_path)
    assert said in str(err.value) and not err.value.transient
    assert not queue.exists()


def test_an_answered_submission_gives_its_id(tmp_path: Path) -> None:
    cluster, queue = _cluster(tmp_path, "ok")
    assert _submit(cluster, tmp_path) == "100"
    assert _submit(cluster, tmp_path) == "100"  # found by its comment, not submitted again
    assert len(queue.read_text().splitlines()) == 1

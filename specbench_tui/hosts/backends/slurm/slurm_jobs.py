"""What a service group's Slurm batch job is: where it lives on the cluster's shared
filesystem, how it is named and found again, and the script ``sbatch`` gets.

One group, one job. Each submission of a group gets a directory of its own,
``<shared_dir>/<campaign>/jobs/<group>/<n>/`` (``batch_jobs.py`` says what it holds), with
Slurm's output ``slurm-<id>.out`` beside the rest. A job Slurm requeues keeps its directory,
so the tool on the node resumes there; a new submission starts a new one. The dry run shows
these scripts; the coordinator submits exactly them. Pure: no I/O here.
"""

from __future__ import annotations

import hashlib
import math
import shlex

from specbench_tui.durations import format_duration
from specbench_tui.hosts.backends.slurm.slurm_table import SlurmSpec
from specbench_tui.hosts.batch_jobs import JobPaths
from specbench_tui.hosts.batch_kind import BatchKind, JobPreview
from specbench_tui.hosts.host_table import HostTable, check_destination
from specbench_tui.results.cells import ServiceGroup
from specbench_tui.table_types import PlanError

#: sbatch options the tool sets itself: a plan that sets them would break finding the job,
#: its output, its requeue or its one-group-one-allocation shape.
MANAGED_SBATCH_OPTIONS = {
    "-J": "--job-name",
    "--job-name": "--job-name",
    "-o": "--output",
    "--output": "--output",
    "-e": "--error",
    "--error": "--error",
    "--comment": "--comment",
    "-a": "--array",
    "--array": "--array",
    "--wrap": "--wrap",
    "--parsable": "--parsable",
    "--open-mode": "--open-mode",
    "--gres": "--gres",
    "-G": "--gpus",
    "--gpus": "--gpus",
    "--gpus-per-node": "--gpus",
    "--gpus-per-task": "--gpus",
    "--requeue": "--requeue",
    "--no-requeue": "--requeue",
    "-D": "--chdir",
    "--chdir": "--chdir",
    "--test-only": "--test-only",
    "-N": "--nodes",
    "--nodes": "--nodes",
    "-c": "--cpus-per-task",
    "--cpus-per-task": "--cpus-per-task",
    "--mem": "--mem",
}
#: The plan keys that set the managed options above which a plan may choose.
PLAN_KEY_OF = {"--cpus-per-task": "slurm.cpus_per_tp", "--mem": "slurm.mem"}
#: sbatch options by which a plan asks for CPUs its own way: no warning that a job gets one.
CPU_OPTIONS = ("--exclusive", "--cpus-per-gpu", "--mincpus", "--ntasks-per-node")
#: Seconds before the time limit at which the tool is asked (SIGTERM) to stop cleanly, so the
#: cell in flight is queued again and the job ends before Slurm kills it.
STOP_BEFORE_LIMIT_S = 120
COMMENT_PREFIX = "specbench"


def campaign_dir(slurm: SlurmSpec, campaign: str) -> str:
    return f"{slurm.shared_dir.rstrip('/')}/{campaign}"


def campaign_key(slurm: SlurmSpec, campaign: str) -> str:
    """A short key of the campaign's directory on the cluster, carried in each job's comment:
    two campaigns of one name in two shared directories never take each other's jobs."""
    return hashlib.sha256(campaign_dir(slurm, campaign).encode()).hexdigest()[:10]


def job_name(campaign: str, group: str) -> str:
    return f"sb.{campaign}.{group}"


def job_comment(key: str, group: str, submission: int) -> str:
    return f"{COMMENT_PREFIX}:{key}:{group}:{submission}"


def parse_comment(text: str) -> tuple[str, str, int] | None:
    """``(key, group, submission)`` of a job comment this tool wrote; None for any other."""
    parts = text.strip().split(":")
    if len(parts) != 4 or parts[0] != COMMENT_PREFIX or not parts[3].isdigit():
        return None
    return parts[1], parts[2], int(parts[3])


def output_pattern(paths: JobPaths) -> str:
    """Slurm's output file of the job, as ``--output`` names it (``%j``: the job id)."""
    return f"{paths.dir}/slurm-%j.out"


def output_of(paths: JobPaths, job_id: str) -> str:
    return f"{paths.dir}/slurm-{job_id}.out"


def job_paths(slurm: SlurmSpec, campaign: str, group: str, submission: int) -> JobPaths:
    return JobPaths(
        dir=f"{campaign_dir(slurm, campaign)}/jobs/{group}/{submission}",
        campaign=campaign,
        group=group,
    )


def groups_dir(slurm: SlurmSpec, campaign: str) -> str:
    return f"{campaign_dir(slurm, campaign)}/jobs"


def slurm_time(seconds: float) -> str:
    """A duration as sbatch's ``--time`` takes it: ``D-HH:MM:SS``, rounded up to the second."""
    s = math.ceil(seconds)
    d, rem = divmod(s, 86400)
    h, rem = divmod(rem, 3600)
    m, sec = divmod(rem, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{sec:02d}"


def stop_signal_s(slurm: SlurmSpec) -> int:
    """When, before the time limit, the tool gets SIGTERM: two minutes, or a quarter of a
    short limit (Slurm sends it up to a minute early)."""
    if slurm.time_limit is not None and slurm.time_limit < 4 * STOP_BEFORE_LIMIT_S:
        return max(10, int(slurm.time_limit // 4))
    return STOP_BEFORE_LIMIT_S


def job_script(
    slurm: SlurmSpec, campaign: str, group: ServiceGroup, submission: int, key: str
) -> str:
    """The batch script of one submission of a group. Every value from the plan is quoted
    for the shell; the ``#SBATCH`` values are validated names and paths (sbatch reads those
    lines itself, with no shell)."""
    paths = job_paths(slurm, campaign, group.id, submission)
    directives = [
        f"--job-name={job_name(campaign, group.id)}",
        f"--comment={job_comment(key, group.id, submission)}",
    ]
    if slurm.partition:
        directives.append(f"--partition={slurm.partition}")
    if slurm.account:
        directives.append(f"--account={slurm.account}")
    if slurm.qos:
        directives.append(f"--qos={slurm.qos}")
    if slurm.time_limit is not None:
        directives.append(f"--time={slurm_time(slurm.time_limit)}")
    if slurm.cpus_per_tp is not None:
        directives.append(f"--cpus-per-task={slurm.cpus_per_tp * group.tp}")
    if slurm.mem is not None:
        directives.append(f"--mem={slurm.mem}")
    directives += [
        "--nodes=1",
        "--ntasks=1",
        f"--gres=gpu:{group.tp}",
        "--requeue",
        "--open-mode=append",
        f"--output={output_pattern(paths)}",
        f"--signal=B:TERM@{stop_signal_s(slurm)}",
    ]
    q = shlex.quote
    tool = f"{slurm.venv.rstrip('/')}/bin/specbench-tui"
    # bash as a login shell: the site's profile (and its ``module`` function) is there for
    # ``setup`` lines such as "module load cuda/12.4", as in an interactive session.
    lines = [
        "#!/bin/bash -l",
        f"# specbench-tui: service group {group.id} of campaign {campaign}, "
        f"submission {submission}",
        *(f"#SBATCH {d}" for d in directives),
        "set -e",
        "export PYTHONUNBUFFERED=1",
        f"cd {q(paths.dir)}",
        # What the job got, in its output: a slow server on one CPU says why.
        'echo "specbench-tui: job $SLURM_JOB_ID on $(hostname): ${SLURM_CPUS_ON_NODE:-?} '
        'CPUs, ${SLURM_MEM_PER_NODE:-the default} MB, GPUs ${CUDA_VISIBLE_DEVICES:-none}"',
        *slurm.setup,
        f"exec {q(tool)} {q(paths.plan)} --headless --results {q(paths.results_root)} "
        f"--job {q(paths.spec)}",
    ]
    return "\n".join(lines) + "\n"


def job_warnings(slurm: SlurmSpec, group: ServiceGroup, estimate_s: float) -> list[str]:
    """What ``--dry-run`` says of a group's job before it is submitted: a job that would get
    the cluster's default CPUs (often one, for every TP rank and the client), and a group whose
    estimated time does not fit the time limit (its job would be stopped and requeued)."""
    out = []
    own = any(a.split("=", 1)[0] in CPU_OPTIONS for a in slurm.sbatch_args)
    if slurm.cpus_per_tp is None and not own:
        out.append(
            "the job asks for no CPUs: it gets the cluster's default (often one) for a "
            f"TP{group.tp} server and the client; set slurm.cpus_per_tp"
        )
    if slurm.time_limit is not None:
        usable = slurm.time_limit - stop_signal_s(slurm)
        if estimate_s > usable:
            out.append(
                f"estimated {format_duration(estimate_s)}, more than the time limit "
                f"{format_duration(slurm.time_limit)} leaves ({format_duration(usable)} before "
                "the tool is stopped): the job will be requeued to finish; a cell longer than "
                "that fails; raise slurm.time_limit"
            )
    return out


def sbatch_argv(slurm: SlurmSpec, script_path: str) -> list[str]:
    """The submission: the plan's extra options on the command line (they win over the
    script's), then the script."""
    return ["sbatch", "--parsable", *slurm.sbatch_args, script_path]


def check_slurm_host(name: str, host: HostTable) -> list[PlanError]:
    """What a ``slurm = {...}`` host table must satisfy beyond its types (its ``env`` names
    are checked by their type)."""
    assert host.slurm is not None
    s = host.slurm
    where = ("hosts", name, "slurm")
    errs = check_destination((*where, "login"), s.login)
    if host.gpus != s.gpus_per_node:
        errs.append(
            PlanError(
                ("hosts", name, "gpus"),
                f"gpus = {host.gpus} but slurm.gpus_per_node = {s.gpus_per_node}; on a Slurm "
                "host gpus is what one node has: leave gpus out",
            )
        )
    for key in ("services", "stop_before", "prepare", "gpu_ids", "workdir"):
        if key in host.model_fields_set:
            errs.append(
                PlanError(
                    ("hosts", name, key),
                    f"{key} does not apply to a Slurm host (Slurm allocates the node and its "
                    "GPUs; slurm.setup runs commands in the job before the tool)",
                )
            )
    for i, arg in enumerate(s.sbatch_args):
        opt = arg.split("=", 1)[0]
        if not arg.startswith("-"):
            errs.append(
                PlanError(
                    (*where, "sbatch_args", i),
                    f"{arg!r} is not an sbatch option; write options such as "
                    '"--constraint=h200" or "--exclusive"',
                )
            )
        elif opt in MANAGED_SBATCH_OPTIONS or (opt[:2] in MANAGED_SBATCH_OPTIONS and opt[2:]):
            managed = MANAGED_SBATCH_OPTIONS.get(opt) or MANAGED_SBATCH_OPTIONS[opt[:2]]
            key = PLAN_KEY_OF.get(managed)
            errs.append(
                PlanError(
                    (*where, "sbatch_args", i),
                    f"{managed} is set by the tool from {key} (per TP size); set that instead"
                    if key
                    else f"{managed} is set by the tool (one job per service group on one "
                    "node, gpu:TP, its name, comment, output and requeue); leave it out",
                )
            )
    return errs


def _preview(campaign: str, host: HostTable, g: ServiceGroup, estimate_s: float) -> JobPreview:
    """A group's first submission: its directory, sbatch line, script and what the dry run
    warns of it."""
    slurm = host.slurm
    assert slurm is not None
    paths = job_paths(slurm, campaign, g.id, 1)
    return JobPreview(
        dir=paths.dir,
        argv=sbatch_argv(slurm, paths.script),
        script=job_script(slurm, campaign, g, 1, campaign_key(slurm, campaign)),
        warnings=job_warnings(slurm, g, estimate_s),
        argv_key="sbatch",
    )


def _max_jobs(host: HostTable) -> int:
    assert host.slurm is not None
    return host.slurm.max_jobs


def where(host: HostTable, campaign: str) -> str:
    """The dry run's words for a Slurm host."""
    slurm = host.slurm
    assert slurm is not None
    return (
        f"Slurm via {slurm.login}, partition {slurm.partition or '(the default)'}, "
        f"{slurm.gpus_per_node} GPUs per node, up to {slurm.max_jobs} jobs at once; "
        f"jobs in {campaign_dir(slurm, campaign)}"
    )


#: What the plan side of a campaign asks of a Slurm host (its entry in ``backends.py``).
BATCH_KIND = BatchKind(
    preview=_preview,
    max_jobs=_max_jobs,
    assumption="Slurm hosts run up to max_jobs groups at once, each job starting at once "
    "(no queue wait)",
)

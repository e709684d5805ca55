"""One campaign's Slurm jobs as the batch scheduler sees them (``BatchJobs``): the layout,
script, sbatch line and comment of ``slurm_jobs.py``, bound to one host of the plan."""

from __future__ import annotations

from dataclasses import dataclass

from specbench_tui.hosts.backends.slurm.slurm_jobs import (
    campaign_key,
    groups_dir,
    job_comment,
    job_paths,
    job_script,
    output_of,
    parse_comment,
    sbatch_argv,
    stop_signal_s,
)
from specbench_tui.hosts.backends.slurm.slurm_table import SlurmSpec
from specbench_tui.hosts.batch import BatchLimits
from specbench_tui.hosts.batch_jobs import JobPaths
from specbench_tui.results.cells import ServiceGroup

#: How much earlier than asked Slurm may send a job's signal before its time limit.
SIGNAL_EARLY_S = 60.0


@dataclass(frozen=True)
class SlurmJobs:
    slurm: SlurmSpec
    campaign: str
    time_limit_key = "slurm.time_limit"
    label = "Slurm"

    @property
    def key(self) -> str:
        return campaign_key(self.slurm, self.campaign)

    @property
    def limits(self) -> BatchLimits:
        s = self.slurm
        return BatchLimits(
            max_jobs=s.max_jobs,
            max_requeues=s.max_requeues,
            poll_s=s.poll,
            time_limit_s=s.time_limit,
            stop_signal_s=stop_signal_s(s),
            signal_early_s=SIGNAL_EARLY_S,
        )

    @property
    def groups_dir(self) -> str:
        return groups_dir(self.slurm, self.campaign)

    def paths(self, group: str, submission: int) -> JobPaths:
        return job_paths(self.slurm, self.campaign, group, submission)

    def script(self, group: ServiceGroup, submission: int) -> str:
        return job_script(self.slurm, self.campaign, group, submission, self.key)

    def submit_argv(self, script_path: str) -> list[str]:
        return sbatch_argv(self.slurm, script_path)

    def comment(self, group: str, submission: int) -> str:
        return job_comment(self.key, group, submission)

    def parse_comment(self, text: str) -> tuple[str, str, int] | None:
        return parse_comment(text)

    def output_of(self, paths: JobPaths, job_id: str) -> str:
        return output_of(paths, job_id)

"""What one batch job runs: its submission's ``job.json`` and the node's allocation.

Kept apart from the job's run (``batch_job.py``) because the run context carries a share
while the run itself drives a whole campaign.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from specbench_tui import __version__
from specbench_tui.errors import InputError
from specbench_tui.hosts.backends import THIS_MACHINE, HostSpec, backend, job_gpu_variables
from specbench_tui.hosts.batch_jobs import JobSpec
from specbench_tui.hosts.host import pick_free_port, with_port
from specbench_tui.plan.expand import Expansion
from specbench_tui.plan.model import PlanSpec


def allocated_gpus(environ: Mapping[str, str]) -> tuple[tuple[int, ...], str | None]:
    """The job's GPUs as indices, and ``CUDA_VISIBLE_DEVICES`` as the batch system set it
    (None when it set none; then the variables the backends name for a job's GPUs). Ids
    that are not numbers (UUIDs) count as 0..N-1 for the telemetry and pass through
    unchanged."""
    raw = environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None or not raw.strip():
        raw_jobs = next((environ[v] for v in job_gpu_variables() if environ.get(v)), None)
        raw = raw_jobs.strip() if raw_jobs and raw_jobs.strip() else None
    if raw is None:
        return (), None
    words = [w.strip() for w in raw.split(",") if w.strip()]
    if all(w.isdigit() for w in words):
        return tuple(int(w) for w in words), ",".join(words)
    return tuple(range(len(words))), raw


@dataclass(frozen=True)
class JobShare:
    """What this job runs: the submission's ``job.json`` and the node's allocation."""

    spec: JobSpec
    path: Path
    gpus: tuple[int, ...]
    visible: str | None  # CUDA_VISIBLE_DEVICES for the server

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], environ: Mapping[str, str] | None = None
    ) -> JobShare:
        p = Path(path)
        try:
            spec = JobSpec.from_json(json.loads(p.read_text(encoding="utf-8")))
        except OSError as exc:
            raise InputError(f"{p}: cannot read the job file: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise InputError(f"{p}: not a job file of this tool: {exc}") from None
        gpus, visible = allocated_gpus(os.environ if environ is None else environ)
        return cls(spec=spec, path=p, gpus=gpus, visible=visible)

    @property
    def mailbox(self) -> Path:
        return self.path.with_name("commands.jsonl")

    def narrow(self, exp: Expansion, plan_hash: str) -> Expansion:
        """The plan's expansion cut to this job's group, as it runs on this node. Raises
        InputError when the job file does not fit the plan."""
        s = self.spec
        if s.plan_hash and s.plan_hash != plan_hash:
            raise InputError(
                f"{self.path}: written for plan {s.plan_hash}, but the plan given is "
                f"{plan_hash}; the job's directory holds the plan it was submitted with"
            )
        group = next((g for g in exp.groups if g.id == s.group), None)
        if group is None or backend(group.host_kind).batch_jobs is None:
            raise InputError(
                f"{self.path}: the plan has no service group {s.group!r} run as batch jobs"
            )
        cells = exp.cells_of(group.id)
        unknown = set(s.cells) - {c.id for c in cells}
        if unknown:
            raise InputError(
                f"{self.path}: cells {', '.join(sorted(unknown))} are not cells of {s.group}"
            )
        gpus = self.gpus or tuple(range(group.tp))
        env = dict(group.env)
        if self.visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.visible
        here = replace(group, host_kind=THIS_MACHINE, gpu_ids=gpus, env=tuple(sorted(env.items())))
        # Other jobs may run on this node: a port of its own, whatever the plan's.
        return Expansion(groups=[with_port(here, pick_free_port())], cells=cells)

    def node_spec(self, spec: PlanSpec, group_host: str) -> PlanSpec:
        """The plan with the batch host seen as this node: a local host with the job's GPUs."""
        gpus = list(self.gpus) or None
        node = HostSpec(
            local=True, gpus=len(gpus) if gpus else spec.hosts[group_host].gpus, gpu_ids=gpus
        )
        return spec.model_copy(update={"hosts": {**spec.hosts, group_host: node}})

    def select(self, selected: list[str]) -> list[str]:
        mine = set(self.spec.cells)
        return [c for c in selected if c in mine]

    def notices(self) -> list[str]:
        out = []
        if self.visible is None:
            out.append(
                "the batch system set no CUDA_VISIBLE_DEVICES for this job; the server sees "
                "every GPU of the node"
            )
        if self.spec.tool_version and self.spec.tool_version != __version__:
            out.append(
                f"the job was submitted by specbench-tui {self.spec.tool_version}; this is "
                f"{__version__}"
            )
        return out

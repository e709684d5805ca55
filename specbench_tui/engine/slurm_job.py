"""The tool inside a Slurm batch job: one service group's cells on the node Slurm allocated.

The job runs ``specbench-tui PLAN --headless --results DIR --job job.json``: the same engine
as anywhere, on the plan as the coordinator expanded it (so cell ids agree), narrowed to the
group and cells ``job.json`` names. The group runs as on a local host, with the GPUs of the
allocation (``CUDA_VISIBLE_DEVICES`` as Slurm set it) and a free port, since other jobs may
share the node. A requeued job finds its own results directory and resumes it: finished cells
stay finished, an interrupted one runs again.

The coordinator steers a running job through a mailbox on the shared filesystem,
``commands.jsonl`` beside ``job.json``: one operator command a line (pause, resume, skip,
retry_group), applied in order. The shared filesystem is the one path that both the login
node and every compute node have by the plan's contract; a node's own control socket is not
reachable from the login node on most clusters. Abort is Slurm's: ``scancel --batch
--signal=TERM`` ends the tool as SIGTERM always does (servers stopped, measurements kept).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from specbench_tui import __version__
from specbench_tui.engine.commands import Command
from specbench_tui.errors import InputError
from specbench_tui.hosts.host import pick_free_port, with_port
from specbench_tui.plan.expand import Expansion
from specbench_tui.plan.model import HostSpec, PlanSpec
from specbench_tui.plan.slurm_jobs import JobSpec

if TYPE_CHECKING:
    from specbench_tui.engine.campaign import Campaign

MAILBOX_POLL_S = 1.0


def allocated_gpus(environ: Mapping[str, str]) -> tuple[tuple[int, ...], str | None]:
    """The job's GPUs as indices, and ``CUDA_VISIBLE_DEVICES`` as Slurm set it (None when
    Slurm set none). Slurm sets it from the ``--gres=gpu:N`` allocation; ids that are not
    numbers (UUIDs) count as 0..N-1 for the telemetry and pass through unchanged."""
    raw = environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None or not raw.strip():
        raw_jobs = environ.get("SLURM_JOB_GPUS") or environ.get("SLURM_STEP_GPUS")
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
        if group is None or group.host_kind != "slurm":
            raise InputError(f"{self.path}: the plan has no Slurm service group {s.group!r}")
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
        here = replace(group, host_kind="local", gpu_ids=gpus, env=tuple(sorted(env.items())))
        # Other jobs may run on this node: a port of its own, whatever the plan's.
        return Expansion(groups=[with_port(here, pick_free_port())], cells=cells)

    def node_spec(self, spec: PlanSpec, group_host: str) -> PlanSpec:
        """The plan with the Slurm host seen as this node: a local host with the job's GPUs."""
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
                "Slurm set no CUDA_VISIBLE_DEVICES for this job; the server sees every GPU "
                "of the node"
            )
        if self.spec.tool_version and self.spec.tool_version != __version__:
            out.append(
                f"the job was submitted by specbench-tui {self.spec.tool_version}; this is "
                f"{__version__}"
            )
        return out


class Mailbox:
    """The coordinator's commands for this job, read from ``commands.jsonl`` every second;
    every line is applied once, in order (a requeued job applies them again from the start,
    so it comes back paused if the campaign is paused). A line that is not a command is
    skipped with a notice."""

    def __init__(self, path: Path, poll_s: float = MAILBOX_POLL_S) -> None:
        self.path = path
        self.poll_s = poll_s
        self.applied = 0  # lines handled so far

    def new_commands(self) -> list[Command | str]:
        """Commands on lines not read yet; a string says why a line was not one."""
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        lines = text.split("\n")[:-1]  # a line still being written has no newline yet
        out: list[Command | str] = []
        for line in lines[self.applied :]:
            self.applied += 1
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                out.append(Command.from_json(obj if isinstance(obj, dict) else {}))
            except ValueError as exc:
                out.append(f"mailbox line {self.applied}: {exc}")
        return out

    async def follow(self, campaign: Campaign) -> None:
        while True:
            for cmd in self.new_commands():
                if isinstance(cmd, str):
                    campaign.hub.notice(cmd, "warning")
                else:
                    await campaign.send(cmd)
            await asyncio.sleep(self.poll_s)


async def _run(campaign: Campaign, share: JobShare, out: TextIO) -> int:
    from specbench_tui.engine.headless import print_events

    campaign.install_signal_handlers()
    printer = asyncio.create_task(print_events(campaign, out))
    mailbox = asyncio.create_task(Mailbox(share.mailbox).follow(campaign))
    try:
        code = await campaign.run()
    finally:
        mailbox.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await mailbox
    await printer
    return code


def run_job(campaign: Campaign, share: JobShare, out: TextIO = sys.stdout) -> int:
    """Run the job's share of the campaign, headless, following the mailbox."""
    campaign.store.notices.extend(share.notices())
    return asyncio.run(_run(campaign, share, out))

"""The tool inside a batch job: one service group's cells on the node the cluster allocated.

The job runs ``specbench-tui PLAN --headless --results DIR --job job.json``: the same engine
as anywhere, on the plan as the coordinator expanded it (so cell ids agree), narrowed to the
group and cells ``job.json`` names. The group runs as on a local host, with the GPUs of the
allocation (``CUDA_VISIBLE_DEVICES`` as the batch system set it) and a free port, since other
jobs may share the node. A requeued job finds its own results directory and resumes it:
finished cells stay finished, an interrupted one runs again.

The coordinator steers a running job through a mailbox on the shared filesystem,
``commands.jsonl`` beside ``job.json``: one operator command a line (pause, resume, skip,
retry_group), applied in order. The shared filesystem is the one path that both the login
node and every compute node have by the plan's contract; a node's own control socket is not
reachable from the login node on most clusters. Abort is the batch system's: SIGTERM to the
job's shell ends the tool as SIGTERM always does (servers stopped, measurements kept).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from specbench_tui.engine.commands import Command
from specbench_tui.engine.job_share import JobShare

if TYPE_CHECKING:
    from specbench_tui.engine.campaign import Campaign

MAILBOX_POLL_S = 1.0


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

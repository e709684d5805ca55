"""A campaign that no process runs any more, opened read-only: its event log replayed
through the same reducer a live console uses, so a finished (or interrupted) campaign can be
browsed like a running one, followed by the greedy verdicts its stored outputs give where the
log has none (a campaign killed before its groups ended: report/inputs.py judges them, as
the report does). Commands are refused with how to run it again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

from specbench_tui.engine.commands import CampaignControl, Command, Reply
from specbench_tui.errors import describe
from specbench_tui.results.events import CheckVerdict, Event
from specbench_tui.results.files import read_events
from specbench_tui.results.layout import ResultsLayout

log = logging.getLogger(__name__)


def rerun_hint(results_root: Path) -> str:
    """How to run cells of an ended campaign again, from a terminal: open it in a console
    that runs it (nothing is re-measured by opening it; r, R and g then work), or rerun its
    failed cells headless."""
    where = results_root.parent
    sim = " --sim" if results_root.name.endswith("-sim") else ""
    return (
        f"to run cells again, open the campaign in a console that runs it: "
        f"specbench-tui PLAN{sim} --results {where} (it runs nothing by itself; then r, R "
        f"and g work), or rerun its failed cells: specbench-tui PLAN{sim} --results {where} "
        f"--rerun-failed (PLAN: the plan file you ran; a copy is in {results_root}/plan.toml)"
    )


class ReplayControl(CampaignControl):
    """``CampaignControl`` over a results directory's ``events.jsonl``; ``note`` says why it
    is read-only (shown once when a console opens)."""

    detached: ClassVar[bool] = True  # leaving the console changes nothing
    read_only: ClassVar[bool] = True  # nothing runs it: a log without an end was interrupted

    def __init__(self, layout: ResultsLayout, note: str = "") -> None:
        self.layout = layout
        self.note = note

    @property
    def results_root(self) -> Path:
        return self.layout.root

    async def subscribe(self) -> AsyncIterator[Event]:
        events = await asyncio.to_thread(read_events, self.layout.events)
        for i, ev in enumerate(events):
            yield ev
            if i % 256 == 255:
                await asyncio.sleep(0)
        for ev in await asyncio.to_thread(judged_verdicts, self.layout.root):
            yield ev

    async def send(self, command: Command) -> Reply:
        return Reply(
            False,
            f"no process runs this campaign (opened read-only), so nothing to "
            f"{command.action.replace('_', ' ')}; {rerun_hint(self.layout.root)}",
        )


def judged_verdicts(root: Path) -> list[CheckVerdict]:
    """The verdicts a reader judges from the stored outputs beside the log's (none where the
    log has them all); a directory the report cannot read gives none, never an error."""
    from specbench_tui.report.inputs import load_inputs

    try:
        state = load_inputs(root).state
    except Exception as exc:  # a directory the report cannot read judges nothing (logged)
        log.info("%s: no judged verdicts: %s", root, describe(exc))
        return []
    return [v for v in state.checks.values() if v.detail.get("judged")]

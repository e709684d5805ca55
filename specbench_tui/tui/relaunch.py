"""Running an ended campaign again from the console that ran it.

A console that runs its campaign in-process keeps what it needs to start the engine again
(the plan, the results directory, the options) and, when the operator asks for cells after
the end (r, R, g, or resume after an abort), prepares a new run on the same results through
the engine's public API: ``Campaign.prepare(...)``, the same host checks the command line
does, then ``run()`` in the console's loop. The new run replays the whole log, so the
console sees the same campaign continue.

An attached console has nothing to relaunch: the campaign belongs to another process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from specbench_tui.engine.commands import CampaignControl

if TYPE_CHECKING:
    from specbench_tui.engine.context import CampaignOptions
    from specbench_tui.plan.document import Plan
    from specbench_tui.results.layout import ResultsLayout


class Relaunch(Protocol):
    """What the console needs to run an ended campaign again."""

    @property
    def results_root(self) -> Path: ...

    async def start(
        self, *, rerun: Sequence[str] = (), rerun_failed: bool = False
    ) -> CampaignControl:
        """A new run, prepared and checked, not started: its ``start_engine`` runs it.
        ``rerun``: ids of cells to run again whatever their status; with neither, the
        run takes what is left (cells never run). Raises InputError with the reason."""
        ...


@dataclass
class InProcessRelaunch:
    plan: Plan
    layout: ResultsLayout
    options: CampaignOptions

    @property
    def results_root(self) -> Path:
        return self.layout.root

    async def start(
        self, *, rerun: Sequence[str] = (), rerun_failed: bool = False
    ) -> CampaignControl:
        from specbench_tui.engine.campaign import Campaign

        options = replace(
            self.options,
            fresh=False,  # never move the results aside again
            only=None,
            rerun_failed=rerun_failed,
            rerun=tuple(rerun),
        )
        # prepare reads the whole log: off the loop the console draws with
        campaign: Any = await asyncio.to_thread(Campaign.prepare, self.plan, self.layout, options)
        try:
            await campaign.check_hosts()
        except BaseException:
            campaign.store.close()
            raise
        return campaign  # type: ignore[no-any-return]

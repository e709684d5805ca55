"""A console's relaunch in the console's own event loop: the ended campaign's next run as an
in-process ``Campaign``, for tests that drive the console and the engine in one process (the
product starts it as a child process, ``tui/relaunch.py`` ``ChildRelaunch``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specbench_tui.engine.campaign import Campaign
from specbench_tui.engine.commands import CampaignControl
from specbench_tui.engine.context import CampaignOptions
from specbench_tui.plan.document import Plan
from specbench_tui.results.layout import ResultsLayout


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

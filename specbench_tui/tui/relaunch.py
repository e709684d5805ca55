"""Running an ended campaign again from the console that ran it.

A console that started its campaign keeps what it needs to start the engine again (the plan,
the results directory, the options) and, when the operator asks for cells after the end (r, R,
g, or resume after an abort), starts a new run on the same results: ``ChildRelaunch`` in a
child process, as the command line starts the first (engine/child.py). The new run replays the
whole log, so the console sees the same campaign continue.

An attached console has nothing to relaunch: the campaign belongs to another process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from specbench_tui.engine.commands import CampaignControl

if TYPE_CHECKING:
    from specbench_tui.hosts.options import HostOptions
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
class ChildRelaunch:
    """A new run as a child process (``specbench-tui PLAN --headless --rerun ...``)."""

    plan: Path
    results: Path  # the results root the plan's campaign directory is under
    layout: ResultsLayout
    sim: bool = False
    hosts: HostOptions | None = None  # how hosts are reached beyond the plan

    @property
    def results_root(self) -> Path:
        return self.layout.root

    async def start(
        self, *, rerun: Sequence[str] = (), rerun_failed: bool = False
    ) -> CampaignControl:
        from specbench_tui.engine.child import EngineProcess, engine_argv

        argv = engine_argv(
            self.plan,
            self.results,
            sim=self.sim,
            rerun_failed=rerun_failed,
            rerun=rerun,
            hosts=self.hosts,
        )
        # starting waits for the child's socket (and its host checks): off the console's loop
        return await asyncio.to_thread(EngineProcess(argv, self.layout).start)

"""One host's share of a campaign: its groups in plan order, one at a time, or packed side by
side on disjoint GPUs (plan/packing.py holds the placement rule the dry run predicts with).

Every host of a campaign gets one of these, all running at once; a group runs on exactly one
host. A group finished and then given cells again (a rerun) is started again here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from specbench_tui.engine.context import RunContext
from specbench_tui.engine.group_runner import GroupRunner
from specbench_tui.hosts.backends import backend
from specbench_tui.hosts.host import Host
from specbench_tui.hosts.local_leftovers import find_local_leftovers, results_owner
from specbench_tui.plan.packing import Placer, placed
from specbench_tui.results.cells import ServiceGroup


class HostScheduler:
    def __init__(
        self,
        ctx: RunContext,
        groups: list[ServiceGroup],
        host: Callable[[], Host],
        *,
        gpu_ids: list[int],
        pack: bool,
    ) -> None:
        self.ctx = ctx
        self.groups = groups
        self.host = host
        self.placer = Placer(gpu_ids) if pack else None
        self.placements: list[tuple[ServiceGroup, float, float | None]] = []  # for tests
        self.used: set[int] = set()  # GPUs this run's groups took (their memory is ours)
        self._held_said: dict[int, str] = {}

    async def run(self) -> None:
        ctx = self.ctx
        running: dict[asyncio.Task[None], tuple[ServiceGroup, int]] = {}
        keep = {g.id for g in self.groups if self._pending(g)}
        remote = bool(self.groups) and backend(self.groups[0].host_kind).remote
        if self.groups and (keep or remote or self._left_here()):
            # Servers a crashed run left there: kept for the groups about to run (a remote
            # host takes one over), else stopped.
            await self.host().settle_leftovers(keep)
        try:
            while not ctx.control.aborted:
                await ctx.control.gate()
                busy = {g.id for g, _ in running.values()}
                queue = [g for g in self.groups if g.id not in busy and self._pending(g)]
                avoid = await self._held_elsewhere() if queue and self.placer else set()
                for group in queue:
                    started = self._start(group, running, avoid)
                    if not started or self.placer is None:
                        break  # one at a time, or the head of the line waits for GPUs
                if not running:
                    break  # nothing runs and nothing could start: this host is done
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    group, index = running.pop(task)
                    if self.placer is not None:
                        self.placer.release(group.gpu_ids)
                    g, t0, _ = self.placements[index]
                    self.placements[index] = (g, t0, asyncio.get_running_loop().time())
                    task.result()  # a storage failure ends the run
        finally:
            if running:  # an abort or a failure elsewhere: let each group stop its server
                await asyncio.gather(*running, return_exceptions=True)

    def _pending(self, group: ServiceGroup) -> bool:
        """Whether the group has cells to run: its own, or those of the group riding on its
        server (``rides``: an interference check's), which never starts a server itself."""
        if group.rides is not None:
            return False
        rider = self.ctx.rider(group)
        return bool(self.ctx.pending(group) or (rider and self.ctx.pending(rider)))

    def _left_here(self) -> bool:
        """Whether a crashed run left a server of this local or simulated host running (a
        host with nothing to run is made only to stop it)."""
        owner = results_owner(self.ctx.layout.root)
        return bool(find_local_leftovers(owner, self.groups[0].host))

    async def _held_elsewhere(self) -> set[int]:
        """GPUs a packed group is not placed on: held by something outside the campaign that
        no ``stop_before`` frees (the host's latest telemetry reading), said once per
        change. GPUs this run used are left out: what shows there is its servers'
        memory going."""
        try:
            held = await self.host().held_gpus(self.used)
        except Exception:
            return set()  # the placement must never stop a campaign; clear_gpus says more
        if held and held.keys() != self._held_said.keys():
            what = "; ".join(f"GPU {g}: {why}" for g, why in sorted(held.items()))
            self.ctx.hub.notice(
                f"{self.groups[0].host}: packed groups are placed off GPUs held outside the "
                f"campaign ({what})",
                "warning",
            )
        self._held_said = held
        return set(held)

    def _start(
        self,
        group: ServiceGroup,
        running: dict[asyncio.Task[None], tuple[ServiceGroup, int]],
        avoid: set[int] | None = None,
    ) -> bool:
        if self.placer is None:
            if running:
                return False
            where = group
        else:
            block = self.placer.place(group.tp, exclusive=group.exclusive, avoid=avoid or ())
            if block is None and avoid and not running:
                # Only the held GPUs would do and nothing of ours will free others: place it
                # there; its clear_gpus waits for them (or names what holds them).
                block = self.placer.place(group.tp, exclusive=group.exclusive)
            if block is None:
                return False
            self.used |= set(block)
            where = placed(group, block, group.port + self.placer.offset(block))
        self.placements.append((where, asyncio.get_running_loop().time(), None))
        task = asyncio.create_task(
            GroupRunner(self.ctx, where, self.host()).run(), name=f"group-{group.id}"
        )
        running[task] = (where, len(self.placements) - 1)
        return True

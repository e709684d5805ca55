"""Where and when service groups run: the one placement rule the engine follows and the dry
run predicts with.

Every host works through its own groups at the same time as the others (a group runs on
exactly one host). On a host, groups start in plan order. Unpacked, one group runs at a time
on the GPUs the plan gives it. Packed (``[campaign] pack = true``), a group starts as soon as
enough of the host's GPUs are free: it takes an aligned block (TP4 on 0-3 or 4-7, as NVLink
pairs them), highest first so GPU 0, where foreign services usually sit, is taken last; its
port is the base port plus the block's first position, so two groups running together never
share a GPU or a port. A group that cannot start holds back the ones after it (a TP8 group
waits for the others to drain instead of being overtaken forever).
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace

from specbench_tui.results.cells import ServiceGroup


class Placer:
    """The free GPUs of one packed host, handed out in aligned blocks."""

    def __init__(self, gpu_ids: Iterable[int], excluded: Iterable[int] = ()) -> None:
        self.gpu_ids = sorted(gpu_ids)
        self.free = set(self.gpu_ids) - set(excluded)

    def place(
        self, tp: int, *, exclusive: bool = False, avoid: Collection[int] = ()
    ) -> tuple[int, ...] | None:
        """A block of ``tp`` free GPUs, or None when none is free now. ``exclusive``: only
        when every GPU of the host is free (a group measured with no neighbours). ``avoid``:
        GPUs something outside the campaign holds now, not to be handed out (and not
        counted against ``exclusive``)."""
        usable = self.free - set(avoid)
        if exclusive and len(usable) < len(set(self.gpu_ids) - set(avoid)):
            return None
        ids = self.gpu_ids
        if tp > len(ids):
            return None
        aligned = [tuple(ids[i : i + tp]) for i in range(0, len(ids) - tp + 1, tp)]
        for block in reversed(aligned):
            if len(block) == tp and set(block) <= usable:
                return self._take(block)
        loose = sorted(usable)
        return self._take(tuple(loose[-tp:])) if len(loose) >= tp else None

    def _take(self, block: tuple[int, ...]) -> tuple[int, ...]:
        self.free -= set(block)
        return block

    def release(self, block: Iterable[int]) -> None:
        self.free |= set(block) & set(self.gpu_ids)

    def offset(self, block: tuple[int, ...]) -> int:
        """The block's first position among the host's GPUs: its port offset."""
        return self.gpu_ids.index(min(block))


def placed(group: ServiceGroup, gpus: tuple[int, ...], port: int) -> ServiceGroup:
    """The group as it runs on ``gpus`` and ``port``: its command line, port argument and
    CUDA_VISIBLE_DEVICES rewritten (what a cell measures does not change with the place)."""
    old = str(group.port)
    command = tuple(str(port) if a == old else a for a in group.command)
    env = tuple(
        (k, ",".join(map(str, gpus)) if k == "CUDA_VISIBLE_DEVICES" else v) for k, v in group.env
    )
    return replace(group, gpu_ids=tuple(gpus), port=port, command=command, env=env)


@dataclass(frozen=True)
class Slot:
    """One group's place in a predicted schedule."""

    group: str
    host: str
    start_s: float
    end_s: float
    gpu_ids: tuple[int, ...]
    port: int


@dataclass(frozen=True)
class Schedule:
    slots: list[Slot]

    @property
    def wall_s(self) -> float:
        return max((s.end_s for s in self.slots), default=0.0)


def simulate(
    groups: list[ServiceGroup],
    durations: Mapping[str, float],
    host_gpus: Mapping[str, list[int]],
    *,
    pack: bool,
    jobs: Mapping[str, int] | None = None,
) -> Schedule:
    """Predict when each group runs, with ``durations`` per group id: every host at once,
    each by the rule in the module's docstring. ``jobs``: hosts whose groups run as batch
    jobs (a batch system), up to that many at once, each on a node of its own."""
    slots: list[Slot] = []
    for host in dict.fromkeys(g.host for g in groups):
        mine = [g for g in groups if g.host == host]
        if jobs and host in jobs:
            free = [(0.0, i) for i in range(max(1, jobs[host]))]
            for g in mine:  # plan order, each job in the first slot that frees up
                t, i = heapq.heappop(free)
                d = durations.get(g.id, 0.0)
                slots.append(Slot(g.id, host, t, t + d, g.gpu_ids, g.port))
                heapq.heappush(free, (t + d, i))
            continue
        if not pack:
            t = 0.0
            for g in mine:
                d = durations.get(g.id, 0.0)
                slots.append(Slot(g.id, host, t, t + d, g.gpu_ids, g.port))
                t += d
            continue
        placer = Placer(host_gpus[host])
        running: list[tuple[float, int, tuple[int, ...]]] = []
        t = 0.0
        queue = list(mine)
        while queue:
            while running and running[0][0] <= t:  # what ended by now gave its GPUs back
                placer.release(heapq.heappop(running)[2])
            g = queue[0]
            block = placer.place(g.tp, exclusive=g.exclusive)
            if block is None:
                end, _, freed = heapq.heappop(running)  # wait for the next group to end
                t = max(t, end)
                placer.release(freed)
                continue
            queue.pop(0)
            d = durations.get(g.id, 0.0)
            slots.append(Slot(g.id, host, t, t + d, block, g.port + placer.offset(block)))
            heapq.heappush(running, (t + d, len(slots), block))
    return Schedule(slots)

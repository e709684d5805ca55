"""Packing around GPUs held outside the campaign: a GPU something else holds (and no
stop_before frees) is not handed to a packed group, said once; a group that only those GPUs
could take still runs once nothing of ours is left to free others. No processes: the host
and the group runner are stand-ins, the scheduler and the placer are real."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from specbench_tui.engine import host_scheduler
from specbench_tui.engine.host_scheduler import HostScheduler
from specbench_tui.plan.packing import Placer
from specbench_tui.results.cells import ServiceGroup


def _group(gid: str, tp: int, *, exclusive: bool = False) -> ServiceGroup:
    return ServiceGroup(
        id=gid,
        host="box",
        host_kind="local",
        config=gid,
        label=gid,
        tp=tp,
        gpu_ids=tuple(range(tp)),
        port=30000,
        command=("python", "--port", "30000"),
        env=(("CUDA_VISIBLE_DEVICES", ",".join(map(str, range(tp)))),),
        api="sglang",
        ready_timeout_s=60.0,
        speculative=False,
        packed=True,
        exclusive=exclusive,
    )


class _Control:
    aborted = False

    async def gate(self) -> None:
        return None


class _Host:
    def __init__(self, held: dict[int, str]) -> None:
        self.held = held
        self.asked_with: list[set[int]] = []

    async def held_gpus(self, ours: Any) -> dict[int, str]:
        self.asked_with.append(set(ours))
        return {g: why for g, why in self.held.items() if g not in ours}

    async def settle_leftovers(self, keep: Any) -> None:
        return None


def _scheduler(
    monkeypatch: pytest.MonkeyPatch, groups: list[ServiceGroup], held: dict[int, str]
) -> tuple[HostScheduler, list[str], _Host]:
    done: set[str] = set()
    notices: list[str] = []

    class Runner:
        def __init__(self, ctx: Any, group: ServiceGroup, host: Any) -> None:
            self.group = group

        async def run(self) -> None:
            await asyncio.sleep(0.01)
            done.add(self.group.id)

    monkeypatch.setattr(host_scheduler, "GroupRunner", Runner)
    monkeypatch.setattr(host_scheduler, "find_local_leftovers", lambda *a: [])
    ctx = SimpleNamespace(
        control=_Control(),
        pending=lambda g: [] if g.id in done else [g],
        rider=lambda g: None,  # no interference check rides on these groups
        hub=SimpleNamespace(notice=lambda text, level="info": notices.append(text)),
        layout=SimpleNamespace(root="/nonexistent"),
    )
    host = _Host(held)
    s = HostScheduler(ctx, groups, lambda: host, gpu_ids=list(range(4)), pack=True)  # type: ignore[arg-type]
    return s, notices, host


async def test_packed_groups_are_placed_off_gpus_held_outside(monkeypatch) -> None:
    groups = [_group(f"g{i}", 1) for i in range(5)]
    s, notices, host = _scheduler(monkeypatch, groups, {3: "20000 MiB used, held by pid 42"})
    await s.run()
    where = [g.gpu_ids for g, _, _ in s.placements]
    assert len(where) == 5 and all(3 not in gpus for gpus in where)
    (text,) = notices  # said once, not once per round
    assert "packed groups are placed off GPUs held outside the campaign" in text
    assert "GPU 3: 20000 MiB used, held by pid 42" in text
    assert all(3 not in ours for ours in host.asked_with)  # never taken as ours


async def test_a_group_only_held_gpus_could_take_still_runs(monkeypatch) -> None:
    """A TP4 group on a four-GPU host with one held: placed there once nothing of ours
    runs (its clear_gpus then waits for the GPU or names the holder)."""
    groups = [_group("small", 1), _group("all", 4, exclusive=True)]
    s, _, _ = _scheduler(monkeypatch, groups, {0: "held by pid 7"})
    await s.run()
    (small, _, end_small), (big, start_big, _) = s.placements
    assert small.gpu_ids == (3,)
    assert big.gpu_ids == (0, 1, 2, 3) and end_small is not None and start_big >= end_small


def test_placer_avoids_held_gpus() -> None:
    p = Placer(range(8))
    assert p.place(4, avoid={6}) == (0, 1, 2, 3)  # 4-7 is broken by the held GPU 6
    assert p.place(2, avoid={6}) == (4, 5)
    assert p.place(1, avoid={6}) == (7,)
    assert p.place(1, avoid={6}) is None
    assert p.place(1) == (6,)
    q = Placer(range(4))
    assert q.place(2, exclusive=True, avoid={0}) == (2, 3)  # every usable GPU was free

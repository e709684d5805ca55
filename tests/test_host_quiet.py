"""A packed host's quiet (engine/host_quiet.py): the interference check's cells run on their
group's own server while no other cell of the host measures; the dry run says so."""

from __future__ import annotations

import asyncio
from pathlib import Path

from conftest import MINIMAL_PLAN

from specbench_tui.engine.host_quiet import HostQuiet
from specbench_tui.plan.expand import expand
from specbench_tui.plan.loader import load_plan
from specbench_tui.plan.review import render_text, review


async def test_alone_waits_for_running_cells_and_holds_new_ones() -> None:
    quiet, seen = HostQuiet(), []

    async def cell(name: str, hold: float) -> None:
        async with quiet.cell():
            seen.append(f"{name} in")
            await asyncio.sleep(hold)
            seen.append(f"{name} out")

    async def alone() -> None:
        async with quiet.alone():
            seen.append("alone in")
            await asyncio.sleep(0.05)
            seen.append("alone out")

    first = asyncio.create_task(cell("a", 0.05))
    await asyncio.sleep(0.01)
    lone = asyncio.create_task(alone())
    await asyncio.sleep(0.01)
    late = asyncio.create_task(cell("b", 0.01))  # asked while a group waits to be alone
    await asyncio.gather(first, lone, late)
    assert seen == ["a in", "a out", "alone in", "alone out", "b in", "b out"]


async def test_a_waiter_given_up_lets_the_cells_go_on() -> None:
    """A group that gave up waiting to be alone (an abort) no longer holds the cells that
    queued behind it, though the cell it waited for still runs."""
    quiet = HostQuiet()
    entered, second = asyncio.Event(), asyncio.Event()

    async def cell(hold: float, mark: asyncio.Event) -> None:
        async with quiet.cell():
            mark.set()
            await asyncio.sleep(hold)

    async def alone() -> None:
        async with quiet.alone():
            pass

    running = asyncio.create_task(cell(1.0, entered))
    await entered.wait()
    waiting = asyncio.create_task(alone())
    await asyncio.sleep(0.01)
    queued = asyncio.create_task(cell(0.0, second))  # held: a group waits to be alone
    await asyncio.sleep(0.01)
    assert not second.is_set()
    waiting.cancel()
    await asyncio.wait_for(second.wait(), 0.5)  # long before the running cell ends
    await asyncio.gather(queued, running)


def test_the_dry_run_says_the_check_rides_on_its_groups_server(write_plan, tmp_path: Path) -> None:
    plan = load_plan(
        write_plan(
            MINIMAL_PLAN.replace(
                'baseline = "ar"', 'baseline = "ar"\npack = true\ninterference_check = 1'
            )
        )
    )
    solo = [g for g in expand(plan).groups if g.id.endswith(".solo")]
    assert [g.rides for g in solo] == ["sim.ar.tp1", "sim.dflash.tp1"]
    text = render_text(review(plan, tmp_path))
    assert "on sim.ar.tp1's server, after its cells, while no other group of the host" in text
    assert "4 service groups" in text and "2 server starts" in text
    schedule = text.split("schedule (predicted")[1].split("constants")[0]
    assert ".solo" not in schedule  # inside its group's time, not a server of its own

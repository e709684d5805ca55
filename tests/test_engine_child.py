"""A console's campaign runs in a child process: the console follows it through the socket,
its end is the child's exit status, leaving the console aborts it, and a failure before the
campaign ran is the child's own message."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from conftest import MINIMAL_PLAN

from specbench_tui.engine.child import EngineProcess, engine_argv
from specbench_tui.engine.commands import Command
from specbench_tui.errors import InputError
from specbench_tui.results.layout import ResultsLayout

pytestmark = pytest.mark.system


def _start(plan: Path, results: Path) -> EngineProcess:
    return EngineProcess(engine_argv(plan, results), ResultsLayout(results / "t"))


async def test_a_child_run_is_followed_and_ends_with_its_status(write_plan, tmp_path) -> None:
    engine = _start(write_plan(), tmp_path)
    control = await asyncio.to_thread(engine.start)
    assert engine.proc is not None and engine.proc.pid != os.getpid()
    seen = []
    async for ev in control.subscribe():
        seen.append(ev.name)
        if ev.name == "campaign_finished":
            break
    assert await asyncio.wait_for(control.start_engine(), 60) == 0
    assert seen[0] == "campaign_started" and seen.count("cell_finished") == 2
    log = ResultsLayout(tmp_path / "t").engine_log.read_text()
    assert "finished t: 2 done" in log  # the child's headless lines


async def test_leaving_the_console_aborts_the_child(write_plan, tmp_path) -> None:
    plan = write_plan(MINIMAL_PLAN.replace("speed = 50", "speed = 2"))
    engine = _start(plan, tmp_path)
    control = await asyncio.to_thread(engine.start)
    async for ev in control.subscribe():
        if ev.name == "cell_started":
            break
    assert (await control.send(Command("abort", by="console"))).ok
    assert await asyncio.wait_for(control.start_engine(), 60) == 130
    assert not ResultsLayout(tmp_path / "t").control_socket.exists()


def test_a_failure_before_the_run_is_the_childs_own_message(write_plan, tmp_path) -> None:
    plan = write_plan(
        MINIMAL_PLAN.replace(
            "[hosts.sim]\nsim = true", '[hosts.sim]\nssh = "nobody@no-such-host.invalid"'
        )
        .replace("speed = 50\n", "")
        .replace("[server]\n", '[server]\nmodel = "/models/x"\n')
    )
    with pytest.raises(InputError, match=r"no-such-host\.invalid") as caught:
        _start(plan, tmp_path).start()
    assert caught.value.exit_code == 2

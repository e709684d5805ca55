"""``--refresh HZ``: the console applies and repaints at most that often (the clock and GPU
lines slow down below 1 Hz), and the command line takes only sensible rates."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specbench_tui.results.events import LogLine
from tests.support.console_pilot import frozen_app, settle
from tests.support.scripted import sample_campaign


async def _frames_in(hz: float, seconds: float) -> int:
    events = sample_campaign()
    app, control = frozen_app(events, refresh_hz=hz)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        before = app.frames
        t = events[-1].ts
        for i in range(int(seconds / 0.05)):  # a log line every 50 ms: every frame has news
            control.publish(LogLine(group="sim.ddtree-16.tp1", line=f"line {i}", ts=t + i))
            await pilot.pause(0.05)
        return app.frames - before


@pytest.mark.console
async def test_a_lower_rate_applies_fewer_frames() -> None:
    slow = await _frames_in(2.0, 1.5)
    fast = await _frames_in(20.0, 1.5)
    assert slow <= 5  # 2 a second over 1.5 s, whatever the load
    assert fast > slow


@pytest.mark.system
def test_the_command_line_refuses_a_rate_out_of_range(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "specbench_tui", "--attach", str(tmp_path), "--refresh", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "--refresh" in proc.stderr

"""What the console tests share: an app over a scripted campaign whose clock stands still just
after its last event, and a wait until the screen has caught up with every published event."""

from __future__ import annotations

from typing import Any

from textual.pilot import Pilot

from specbench_tui.results.events import Event
from specbench_tui.tui.app import ConsoleApp
from tests.support.scripted import ScriptedControl


def frozen_app(events: list[Event], **kw: Any) -> tuple[ConsoleApp, ScriptedControl]:
    control = ScriptedControl(events)
    frozen = events[-1].ts + 1.0
    return ConsoleApp(control, clock=lambda: frozen, results_source=None, **kw), control


async def settle(pilot: Pilot[int], app: ConsoleApp, extra: float = 0.06) -> None:
    for _ in range(150):  # held-back GPU samples reach the health pane within a second
        await pilot.pause(0.02)
        if not len(app.inbox) and app.frames and not app.health_pending:
            break
    await pilot.pause(extra)

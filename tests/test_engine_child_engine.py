"""The console finds the process it started for a campaign through ``CampaignControl``'s
``child_engine`` (the ``ChildEngine`` protocol), never by probing the control's attributes:
only a control that owns a running child has one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from specbench_tui.engine.child import EngineProcess, OwnedControl
from specbench_tui.engine.commands import ChildEngine
from specbench_tui.engine.replay import ReplayControl
from specbench_tui.results.layout import ResultsLayout


def test_only_a_running_child_is_a_child_engine(tmp_path: Path) -> None:
    layout = ResultsLayout(tmp_path / "run")
    process = EngineProcess(["plan.toml"], layout)
    control = OwnedControl(layout.control_socket, process)
    assert control.child_engine() is None  # not spawned yet
    process.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        child: ChildEngine | None = control.child_engine()
        assert child is control
        assert child.engine_pid == process.proc.pid
    finally:
        process.proc.kill()
        process.proc.wait()
    assert control.child_engine() is None  # it ended: nothing left to detach from


def test_a_replayed_campaign_has_no_child_engine(tmp_path: Path) -> None:
    assert ReplayControl(ResultsLayout(tmp_path)).child_engine() is None

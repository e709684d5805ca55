"""A test that a test of the sweep runs in a pytest session of its own (not collected by the
suite: no test_ prefix): it leaves a process behind, as a test cut short would, and waits."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest


@pytest.mark.system
def test_leaves_a_server_and_waits() -> None:
    left = subprocess.Popen(["sleep", "600"], start_new_session=True)
    Path(os.environ["SWEEP_PROBE_PID"]).write_text(str(left.pid))
    time.sleep(600)

"""Abort, SIGINT and SIGTERM over real SSH: a request in flight that would take minutes (a
60 s workload timeout) is cancelled within a second or two, the cell that finished before it
is kept, the interrupted one is left to a resume, and no server is left on the host."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from conftest import ROOT
from sshd_fixture import Sshd, sshd  # noqa: F401 (the fixture)
from support.ssh_scenarios import HeadlessRun, PlanValues, events_of, servers_left, tally

pytestmark = pytest.mark.system


def long_request_started(events: list[dict]) -> bool:
    """A cell started after the first one finished: the one of long requests."""
    finished = [i for i, e in enumerate(events) if e["event"] == "cell_finished"]
    return bool(finished) and any(e["event"] == "cell_started" for e in events[finished[0] + 1 :])


@pytest.mark.timing
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "abort"])
def test_abort_cancels_the_request_in_flight(sshd: Sshd, tmp_path: Path, how: str) -> None:  # noqa: F811
    model = tmp_path / "model"
    model.mkdir()
    plan = PlanValues(
        name="abort",
        alias="sbtest",
        services="process",
        workdir=str(tmp_path / "remote"),
        model=str(model),
        # One cell of short requests, then one whose requests would take minutes.
        args=["--sim-fault", "slow:300"],
        samples=2,
        max_tokens=[4, 4096],
        timeout="60s",
    ).write(tmp_path / "plan.toml")
    run = HeadlessRun(plan, tmp_path / "res", sshd.config, "abort")
    try:
        run.wait_for("the long cell", long_request_started, timeout_s=120)
        time.sleep(2.0)  # its first request is well under way
        t0 = time.monotonic()
        if how == "abort":
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "specbench_tui",
                    "--attach",
                    str(run.root),
                    "--send",
                    "abort",
                ],
                check=True,
                cwd=ROOT,
                capture_output=True,
                timeout=30,
            )
        else:
            run.proc.send_signal(getattr(signal, how))
        run.wait_event("cell_queued", timeout_s=60)
        cancelled_s = time.monotonic() - t0
        code = run.wait(120)
        ended_s = time.monotonic() - t0
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    print(
        f"\n[{how}] request in flight cancelled after {cancelled_s:.2f}s, exit after {ended_s:.2f}s"
    )
    done, failed, left = tally(run.root, f"{how} during a request of minutes", str(model))
    assert code == 130, run.output()
    # Against a request of minutes; 15 s leaves room for a machine at load 10.
    assert cancelled_s < 15.0, f"the request in flight was cancelled only after {cancelled_s:.1f}s"
    events = events_of(run.root)
    (queued,) = [e for e in events if e["event"] == "cell_queued"]
    assert queued["by"] == "aborted"
    assert not any(e["event"] == "cell_failed" for e in events)
    # what finished is kept: the short cell, done, with its rows
    (finished,) = [e for e in events if e["event"] == "cell_finished"]
    rows = pl.read_parquet(run.root / "parts" / f"{finished['cell_id']}.a1.parquet")
    assert rows.height == 2 and rows["error"].null_count() == 2
    assert (done, failed, left) == (1, 0, 0)
    assert not servers_left(str(model))

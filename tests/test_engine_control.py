"""Operator commands and fault handling, driven against real simulated campaigns."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

from specbench_tui.engine.campaign import Campaign, CampaignOptions
from specbench_tui.engine.commands import Command
from specbench_tui.engine.control_socket import attach_control
from specbench_tui.engine.report_child import write_report
from specbench_tui.errors import InputError
from specbench_tui.plan.loader import load_plan
from specbench_tui.results.events import CellFinished, Event
from specbench_tui.results.files import read_events
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.state import CampaignState
from tests.conftest import MINIMAL_PLAN, ROOT, start_headless

pytestmark = pytest.mark.system

PLAN = MINIMAL_PLAN.replace("max_tokens = [32]\n", "max_tokens = [32, 48, 64]\nrepeats = 2\n")


def prepare(path: Path, results: Path, **opts: object) -> Campaign:
    plan = load_plan(path)
    layout = ResultsLayout.for_campaign(results, plan.spec.campaign.name)
    return Campaign.prepare(plan, layout, CampaignOptions(**opts))  # type: ignore[arg-type]


async def wait_for(campaign: Campaign, pred: Callable[[Event], bool], timeout: float = 30) -> Event:
    async def scan() -> Event:
        async for ev in campaign.subscribe():
            if pred(ev):
                return ev
        raise AssertionError("campaign ended first")

    return await asyncio.wait_for(scan(), timeout)


def reduced(root: Path) -> CampaignState:
    return CampaignState.from_events(read_events(root / "events.jsonl"))


def events(root: Path) -> list[dict]:
    return [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]


async def test_pause_holds_the_queue_and_resume_continues(write_plan, tmp_path: Path) -> None:
    c = prepare(write_plan(PLAN.replace("speed = 50", "speed = 10")), tmp_path)
    run = asyncio.create_task(c.run())
    await wait_for(c, lambda e: isinstance(e, CellFinished))
    reply = await c.send(Command("pause", by="test"))
    assert reply.ok, reply.text
    assert not (await c.send(Command("pause"))).ok  # already paused: said, not ignored
    await asyncio.sleep(0.3)  # let the cell in flight stop
    started = sum(1 for e in events(c.layout.root) if e["event"] == "cell_started")
    await asyncio.sleep(1.0)
    assert (
        sum(1 for e in events(c.layout.root) if e["event"] == "cell_started") == started
    )  # queue held
    assert not run.done()
    assert (await c.send(Command("resume", by="test"))).ok
    assert not (await c.send(Command("resume"))).ok
    assert await asyncio.wait_for(run, 60) == 0
    ev = events(c.layout.root)
    names = [e["event"] for e in ev]
    assert "paused" in names and "resumed" in names
    assert Counter(e["event"] for e in ev)["cell_finished"] == 6
    assert (await c.send(Command("pause"))).ok is False  # finished: nothing to pause


async def test_skip_and_rerun_make_the_right_attempts(write_plan, tmp_path: Path) -> None:
    c = prepare(write_plan(PLAN.replace("speed = 50", "speed = 20")), tmp_path)
    dflash_group = "sim.dflash.tp1"
    run = asyncio.create_task(c.run())
    first = await wait_for(c, lambda e: isinstance(e, CellFinished))
    assert (await c.send(Command("skip", target=dflash_group, by="alice"))).ok
    r = await c.send(Command("rerun", target=first.cell_id, by="alice"))  # type: ignore[attr-defined]
    assert r.ok, r.text
    bad = await c.send(Command("rerun", target="no-such-cell"))
    assert not bad.ok and "no cell matches" in bad.text
    assert await asyncio.wait_for(run, 60) == 0
    ev = events(c.layout.root)
    skipped = [e for e in ev if e["event"] == "cell_skipped"]
    assert len(skipped) == 3 and all(e["by"] == "alice" for e in skipped)
    assert all(e["group"] == dflash_group for e in skipped)
    reruns = [e for e in ev if e["event"] == "cell_finished" and e["cell_id"] == first.cell_id]  # type: ignore[attr-defined]
    assert [e["attempt"] for e in reruns] == [1, 2]
    req = pl.read_parquet(c.layout.requests)
    mine = req.filter(pl.col("cell_id") == first.cell_id)  # type: ignore[attr-defined]
    assert sorted(set(mine["attempt"])) == [1, 2]  # the earlier attempt stays in the results
    cells = pl.read_parquet(c.layout.cells)
    assert cells.filter(pl.col("cell_id") == first.cell_id)["attempt"].to_list() == [2]  # type: ignore[attr-defined]


async def test_abort_leaves_a_consistent_resumable_directory(write_plan, tmp_path: Path) -> None:
    path = write_plan(PLAN.replace("speed = 50", "speed = 10"))
    c = prepare(path, tmp_path)
    run = asyncio.create_task(c.run())
    await wait_for(c, lambda e: isinstance(e, CellFinished))
    assert (await c.send(Command("abort", by="test"))).ok
    assert await asyncio.wait_for(run, 30) == 130
    ev = events(c.layout.root)
    finished = [e for e in ev if e["event"] == "campaign_finished"]
    assert len(finished) == 1 and finished[0]["exit_code"] == 130
    done = {e["cell_id"] for e in ev if e["event"] == "cell_finished"}
    assert 1 <= len(done) < 6
    req = pl.read_parquet(c.layout.requests)
    cells = pl.read_parquet(c.layout.cells).select("cell_id", "attempt")
    assert req.join(cells, on=["cell_id", "attempt"]).height == len(done) * 4
    # The interrupted cell's partial rows stay, as an attempt that does not count.
    assert set(req.join(cells, on=["cell_id", "attempt"], how="anti")["cell_id"]) <= {
        e["cell_id"] for e in ev if e["event"] == "cell_queued"
    }

    again = prepare(path, tmp_path)
    assert await asyncio.wait_for(again.run(), 60) == 0
    ev2 = events(c.layout.root)[len(ev) :]
    assert not done & {e["cell_id"] for e in ev2 if e["event"] == "cell_started"}
    assert len({e["cell_id"] for e in events(c.layout.root) if e["event"] == "cell_finished"}) == 6
    req = pl.read_parquet(c.layout.requests)
    assert (
        req.join(
            pl.read_parquet(c.layout.cells).select("cell_id", "attempt"), on=["cell_id", "attempt"]
        ).height
        == 24
    )


async def test_server_dying_mid_cell_is_restarted_once_then_given_up(
    write_plan, tmp_path: Path
) -> None:
    # The AR server dies after serving 2 requests, every time it is started.
    text = PLAN.replace('label = "AR"', 'label = "AR"\nargs = ["--sim-fault", "crash-after:2"]')
    text = text.replace("speed = 50", "speed = 10")
    c = prepare(write_plan(text), tmp_path)
    assert await asyncio.wait_for(c.run(), 90) == 1
    ev = events(c.layout.root)
    ar = [e for e in ev if e.get("group") == "sim.ar.tp1"]
    starts = [e for e in ar if e["event"] == "group_started"]
    assert [e["attempt"] for e in starts] == [1, 2]  # restarted once
    # Each death sets the cell in flight aside (its rows kept), never fails it by itself.
    deaths = [e for e in ar if e["event"] == "server_died"]
    assert [(d["attempt"], d["restart"]) for d in deaths] == [(1, 1), (2, 0)]
    assert all(d["cell_id"] and "exited with code 1" in d["reason"] for d in deaths)
    queued = [e for e in ar if e["event"] == "cell_queued"]
    assert [e["by"] for e in queued] == ["server died", "server died"]
    # Only once the restarts are spent do the group's cells fail, with the reason.
    failed = [e for e in ar if e["event"] == "cell_failed"]
    assert len(failed) == 3
    assert all("giving up on the group" in e["reason"] for e in failed)
    assert all("exited with code 1" in e["reason"] and e["log_tail"] for e in failed)
    notices = [e["text"] for e in ev if e["event"] == "notice"]
    assert any("restarting it" in t for t in notices)
    # The other group ran to the end.
    assert (
        sum(1 for e in ev if e["event"] == "cell_finished" and e["group"] == "sim.dflash.tp1") == 3
    )
    state = reduced(c.layout.root)
    assert len(state.groups["sim.ar.tp1"].deaths) == 2
    assert state.groups["sim.ar.tp1"].interrupted == 2


async def test_a_server_that_dies_once_costs_one_attempt_and_every_cell_is_done(
    write_plan, tmp_path: Path
) -> None:
    # The AR server dies after its 3rd request, in its first life only: the cell it cut runs
    # again on the restarted server, and no done cell holds a request lost to the dead one.
    once = 'label = "AR"\nargs = ["--sim-fault", "crash-once-after:3"]'
    text = PLAN.replace('label = "AR"', once).replace("speed = 50", "speed = 10")
    c = prepare(write_plan(text), tmp_path, report=write_report)  # as the command line does
    assert await asyncio.wait_for(c.run(), 90) == 0
    ev = events(c.layout.root)
    ar = [e for e in ev if e.get("group") == "sim.ar.tp1"]
    assert [e["attempt"] for e in ar if e["event"] == "group_started"] == [1, 2]
    died = [e for e in ar if e["event"] == "server_died"]
    assert len(died) == 1 and died[0]["restart"] == 1
    cut = died[0]["cell_id"]
    assert [e["by"] for e in ar if e["event"] == "cell_queued"] == ["server died"]
    finished = {e["cell_id"]: e for e in ev if e["event"] == "cell_finished"}
    assert len(finished) == 6 and finished[cut]["attempt"] == 2
    assert all(e["errors"] == 0 for e in finished.values())
    assert not [e for e in ev if e["event"] == "cell_failed"]
    # The cut attempt's rows are kept, apart from the counted ones.
    req = pl.read_parquet(c.layout.requests)
    kept = req.filter((pl.col("cell_id") == cut) & (pl.col("attempt") == 1))
    assert kept.height >= 1
    counted = req.join(
        pl.read_parquet(c.layout.cells).select("cell_id", "attempt"), on=["cell_id", "attempt"]
    )
    assert counted["error"].null_count() == counted.height  # no counted row lost a request
    state = reduced(c.layout.root)
    assert len(state.groups["sim.ar.tp1"].deaths) == 1
    assert state.groups["sim.ar.tp1"].interrupted == 1
    # The report counts them per group.
    md = (c.layout.root / "report.md").read_text()
    assert "1 server death(s) and 1 interrupted attempt(s) in 1 service group(s)" in md
    row = next(line for line in md.splitlines() if "`sim.ar.tp1`" in line and "exited" in line)
    assert [p.strip() for p in row.strip("|").split("|")][1:3] == ["1", "1"]


def test_rerun_failed_runs_exactly_the_failed_cells(write_plan, tmp_path: Path) -> None:
    text = PLAN.replace('label = "AR"', 'label = "AR"\nargs = ["--sim-fault", "crash-at-start"]')
    path = write_plan(text)
    cmd = [
        sys.executable,
        "-m",
        "specbench_tui",
        str(path),
        "--headless",
        "--results",
        str(tmp_path),
    ]
    assert subprocess.run(cmd, capture_output=True, timeout=90, cwd=ROOT).returncode == 1
    root = tmp_path / "t"
    first = events(root)
    failed = {e["cell_id"] for e in first if e["event"] == "cell_failed"}
    assert len(failed) == 3
    proc = subprocess.run(
        [*cmd, "--rerun-failed"], capture_output=True, text=True, timeout=90, cwd=ROOT
    )
    assert proc.returncode == 1
    second = events(root)[len(first) :]
    refailed = {e["cell_id"] for e in second if e["event"] == "cell_failed"}
    assert refailed == failed
    assert not {e["cell_id"] for e in second if e["event"] == "cell_started"} - failed
    # A plain resume leaves failed cells alone: there is nothing to run.
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=90, cwd=ROOT)
    assert again.returncode == 1 and "0 to run" in again.stdout


def test_rerun_failed_also_runs_what_a_killed_run_never_reached(write_plan, tmp_path) -> None:
    """A run killed after one group failed and before the other finished: --rerun-failed runs
    the failed cells again and completes the cells the killed run never ran or cut short."""
    text = PLAN.replace('label = "AR"', 'label = "AR"\nargs = ["--sim-fault", "crash-at-start"]')
    path = write_plan(text.replace("speed = 50", "speed = 10"))
    proc = start_headless(path, tmp_path)
    root = tmp_path / "t"
    try:
        deadline = time.monotonic() + 60
        while not any(e["event"] == "cell_finished" for e in events(root)):
            assert proc.poll() is None and time.monotonic() < deadline, "no cell finished"
            time.sleep(0.1)
    finally:
        proc.kill()  # kill -9: the log has no end, the rest of dflash never ran
        proc.wait()
    first = events(root)
    failed = {e["cell_id"] for e in first if e["event"] == "cell_failed"}
    done = {e["cell_id"] for e in first if e["event"] == "cell_finished"}
    planned = {c["id"] for e in first if e["event"] == "campaign_started" for c in e["cells"]}
    assert len(failed) == 3 and 1 <= len(done) < 3
    cmd = [sys.executable, "-m", "specbench_tui", str(path), "--headless", "--results"]
    again = subprocess.run(
        [*cmd, str(tmp_path), "--rerun-failed"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert again.returncode == 1, again.stdout[-2000:] + again.stderr[-2000:]
    second = events(root)[len(first) :]
    assert {e["cell_id"] for e in second if e["event"] == "cell_failed"} == failed
    finished = done | {e["cell_id"] for e in second if e["event"] == "cell_finished"}
    assert finished == planned - failed  # every cell the killed run left is done now
    assert not done & {e["cell_id"] for e in second if e["event"] == "cell_started"}


def test_headless_attach_pause_detach_and_finish(write_plan, tmp_path: Path) -> None:
    path = write_plan(PLAN.replace("speed = 50", "speed = 6"))
    proc = start_headless(path, tmp_path)
    root = tmp_path / "t"
    try:
        assert (root / "control.sock").stat().st_mode & 0o777 == 0o600

        async def console() -> list[str]:
            control = attach_control(root)
            seen: list[str] = []
            async for ev in control.subscribe():
                seen.append(ev.name if ev.name != "unknown" else ev.to_json()["event"])
                if ev.name == "cell_finished":
                    break
            return seen  # leaving the loop closes the subscription: the console detaches

        async def two_consoles() -> list[str]:
            # Two consoles attached at once each get the whole stream.
            a, b = await asyncio.gather(console(), console())
            assert a[0] == b[0] == "campaign_started"
            reply = await attach_control(root).send(Command("pause", by="console-2"))
            assert reply.ok
            return a

        seen = asyncio.run(two_consoles())
        assert seen[0] == "campaign_started"  # replay from the beginning
        time.sleep(0.5)
        assert proc.poll() is None  # detaching changed nothing: still running, paused

        # Bad commands say what is wrong and exit 2; good ones print the reply.
        send = [sys.executable, "-m", "specbench_tui", "--attach", str(root), "--send"]
        bad = subprocess.run(
            [*send, "rerun", "no-such-cell"], capture_output=True, text=True, timeout=30, cwd=ROOT
        )
        assert bad.returncode == 2 and "no cell matches 'no-such-cell'" in bad.stderr
        ok = subprocess.run([*send, "resume"], capture_output=True, text=True, timeout=30, cwd=ROOT)
        assert ok.returncode == 0 and ok.stdout.strip() == "resumed"
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "paused by console-2" in out and "resumed by cli" in out
    assert not (root / "control.sock").exists()  # a clean exit takes its socket away


def test_attach_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such results directory"):
        attach_control(tmp_path / "nope")
    with pytest.raises(InputError, match="no campaign here"):
        attach_control(tmp_path)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(tmp_path / "control.sock"))
    stale.close()  # the file stays, nobody listens: a dead campaign's socket
    with pytest.raises(InputError, match="stale control socket"):
        attach_control(tmp_path)


def test_cli_attach_and_send_exit_codes(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "specbench_tui", "--attach", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )
    assert proc.returncode == 2 and "no campaign here" in proc.stderr
    assert "Traceback" not in proc.stderr


async def test_request_timeouts_fail_the_cell_with_a_reason(write_plan, tmp_path: Path) -> None:
    text = PLAN.replace("repeats = 2\n", 'repeats = 2\ntimeout = "20ms"\n')
    text = text.replace("speed = 50", "speed = 2")  # slow enough that a request takes > 20 ms
    c = prepare(write_plan(text), tmp_path)
    assert await asyncio.wait_for(c.run(), 90) == 1
    ev = events(c.layout.root)
    failed = [e for e in ev if e["event"] == "cell_failed"]
    assert len(failed) == 6
    assert all("4 of 4 requests failed; most often: timeout after" in e["reason"] for e in failed)
    req = pl.read_parquet(c.layout.requests)
    assert req.height == 24 and req["error"].str.starts_with("timeout").all()


async def test_retry_group_restarts_the_running_server_and_continues(
    write_plan, tmp_path: Path
) -> None:
    c = prepare(write_plan(PLAN.replace("speed = 50", "speed = 10")), tmp_path)
    run = asyncio.create_task(c.run())
    first = await wait_for(c, lambda e: isinstance(e, CellFinished))
    reply = await c.send(Command("retry_group", by="test"))
    assert reply.ok and "restarting" in reply.text
    assert await asyncio.wait_for(run, 60) == 0
    ev = events(c.layout.root)
    group = first.group  # type: ignore[attr-defined]
    starts = [e["attempt"] for e in ev if e["event"] == "group_started" and e["group"] == group]
    assert starts == [1, 2]
    assert len({e["cell_id"] for e in ev if e["event"] == "cell_finished"}) == 6
    bad = await c.send(Command("retry_group", target="nope"))
    assert not bad.ok


def test_only_runs_the_matching_cells(write_plan, tmp_path: Path) -> None:
    path = write_plan(PLAN)
    cmd = [sys.executable, "-m", "specbench_tui", str(path), "--headless"]
    proc = subprocess.run(
        [*cmd, "--results", str(tmp_path), "--only", "*dflash*/48"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    done = [e for e in events(tmp_path / "t") if e["event"] == "cell_finished"]
    assert [e["cell"] for e in done] == ["sim.dflash.tp1/single/chat/48"]
    none = subprocess.run(
        [*cmd, "--results", str(tmp_path), "--only", "zzz*"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert none.returncode == 2 and "matches no cell" in none.stderr


@pytest.mark.timing
async def test_abort_cuts_a_long_start_up_and_leaves_cells_to_resume(
    write_plan, tmp_path: Path
) -> None:
    text = PLAN.replace('label = "AR"', 'label = "AR"\nargs = ["--sim-fault", "never-ready"]')
    text = text.replace("[server]\n", '[server]\nready_timeout = "10m"\n')
    c = prepare(write_plan(text), tmp_path)
    run = asyncio.create_task(c.run())
    await wait_for(c, lambda e: e.name == "group_started")
    await asyncio.sleep(0.5)
    t0 = time.monotonic()
    assert (await c.send(Command("abort", by="test"))).ok
    assert await asyncio.wait_for(run, 30) == 130
    assert time.monotonic() - t0 < 15  # not the 10-minute ready timeout
    names = [e["event"] for e in events(c.layout.root)]
    assert "cell_failed" not in names and "cell_started" not in names
    again = prepare(write_plan(text, name="again.toml"), tmp_path)
    assert {c.status for c in again.state.cells.values()} == {"pending"}
    assert set(again.selected) == set(again.cells)


async def test_server_that_never_gets_healthy_fails_its_group_only(
    write_plan, tmp_path: Path
) -> None:
    text = PLAN.replace('label = "AR"', 'label = "AR"\nargs = ["--sim-fault", "never-ready"]')
    text = text.replace("[server]\n", '[server]\nready_timeout = "2s"\n')
    c = prepare(write_plan(text), tmp_path)
    assert await asyncio.wait_for(c.run(), 60) == 1
    ev = events(c.layout.root)
    failed = next(e for e in ev if e["event"] == "service_failed")
    assert "not healthy after 2s (ready_timeout)" in failed["reason"]
    cells = [e for e in ev if e["event"] == "cell_failed"]
    assert len(cells) == 3 and all("server did not start" in e["reason"] for e in cells)
    assert sum(e["event"] == "cell_finished" for e in ev) == 3  # the next group ran

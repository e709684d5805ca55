"""The campaign progress reducer, the console's inbox and live series: pure, no textual."""

from __future__ import annotations

import subprocess
import sys

from specbench_tui.results.cells import Cell, ServiceGroup
from specbench_tui.results.events import (
    CampaignFinished,
    CampaignStarted,
    CellFailed,
    CellFinished,
    CellQueued,
    CellSkipped,
    CellStarted,
    Event,
    GpuSample,
    GroupFinished,
    GroupStarted,
    HostState,
    LogLine,
    Paused,
    RequestDone,
    Resumed,
    ServiceFailed,
    ServiceReady,
)
from specbench_tui.results.progress import CampaignProgress, format_clock
from specbench_tui.tui.inbox import EventInbox
from specbench_tui.tui.toasts import host_news
from tests.support.scripted import T0, packed_campaign, sample_campaign


def _progress(events: list[Event]) -> CampaignProgress:
    p = CampaignProgress()
    p.apply_all(events)
    return p


def _start(cells: int = 4, selected: list[str] | None = None) -> CampaignStarted:
    kinds = ["single", "single", "agentic", "concurrency"]
    planned = [
        Cell.from_json(
            {
                "id": f"c{i}",
                "name": f"h.ar.tp1/w{i}",
                "group": "h.ar.tp1",
                "host": "h",
                "config": "ar",
                "tp": 1,
                "kind": kinds[i % 4],
                "workload": f"w{i}",
            }
        )
        for i in range(cells)
    ]
    return CampaignStarted(
        campaign="c",
        hosts=["h"],
        ts=T0,
        groups=[
            ServiceGroup.from_json(
                {
                    "id": "h.ar.tp1",
                    "host": "h",
                    "config": "ar",
                    "tp": 1,
                    "gpu_ids": [0],
                    "command": ["srv", "--tp", "1"],
                }
            )
        ],
        cells=planned,
        selected=[c.id for c in planned] if selected is None else selected,
    )


def test_sample_campaign_state() -> None:
    events = sample_campaign()
    p = _progress(events)
    c = p.counts
    assert (c.done, c.failed, c.skipped, c.running, c.pending, c.total) == (9, 1, 0, 1, 5, 16)
    assert p.current_cell == "ddt1agent" and p.current_group == "sim.ddtree-16.tp1"
    assert p.groups["sim.ar.tp1"].server == "stopped"
    assert p.groups["sim.ddtree-16.tp1"].server == "ready"
    failed = p.cells["dfl1conc4"]
    assert failed.status == "failed" and "CUDA out of memory" in failed.reason
    assert any("OutOfMemoryError" in line for line in failed.log_tail)
    assert p.cells["ar1co64"].figures["throughput_tok_s"] is not None
    assert p.cells["ddt1agent"].requests_done == 3
    assert p.gpus[("sim", 0)].processes == ["sglang::scheduler_TP0"]
    assert p.state_word == "running" and not p.finished


def test_lifecycle_statuses_attempts_and_rerun() -> None:
    p = _progress([_start()])
    assert p.counts.pending == 4
    p.apply(GroupStarted(group="h.ar.tp1", host="h", tp=1, ts=T0 + 1))
    assert p.groups["h.ar.tp1"].server == "starting"
    p.apply(ServiceReady(group="h.ar.tp1", startup_s=9.0, ts=T0 + 10))
    assert p.groups["h.ar.tp1"].uptime_s(T0 + 70) == 60.0
    p.apply(CellStarted(cell_id="c0", ts=T0 + 10))
    assert p.cells["c0"].status == "running" and p.current_cell == "c0"
    p.apply(RequestDone(cell_id="c0", done=1, total=4, error="boom", ts=T0 + 11))
    assert p.cells["c0"].request_errors == 1 and p.cells["c0"].requests_total == 4
    p.apply(CellFailed(cell_id="c0", reason="bad", log_tail=["x"], ts=T0 + 20))
    assert p.cells["c0"].status == "failed" and p.current_cell is None
    p.apply(CellQueued(cell_id="c0", attempt=2, ts=T0 + 21))
    assert p.cells["c0"].status == "pending" and p.cells["c0"].attempt == 1
    p.apply(CellStarted(cell_id="c0", attempt=2, ts=T0 + 22))
    p.apply(CellFinished(cell_id="c0", attempt=2, requests=4, wall_s=5.0, ts=T0 + 30))
    assert p.cells["c0"].status == "done" and p.cells["c0"].attempt == 2
    assert p.cells["c0"].duration_s == 8.0 and p.cells["c0"].reason == ""
    p.apply(CellSkipped(cell_id="c1", by="operator", ts=T0 + 31))
    assert p.cells["c1"].status == "skipped" and "operator" in p.cells["c1"].reason
    p.apply(ServiceFailed(group="h.ar.tp1", reason="no health", log_tail=["oops"], ts=T0 + 40))
    assert p.groups["h.ar.tp1"].server == "failed"
    assert list(p.groups["h.ar.tp1"].log_tail)[-1] == "oops"
    p.apply(GroupFinished(group="h.ar.tp1", status="failed", ts=T0 + 41))
    assert p.groups["h.ar.tp1"].server == "failed" and p.current_group is None


def test_pause_resume_finish_and_elapsed() -> None:
    p = _progress([_start()])
    assert p.elapsed_s(T0 + 5) == 5.0
    p.apply(Paused(by="op", ts=T0 + 1))
    assert p.paused and p.state_word == "paused"
    p.apply(Resumed(ts=T0 + 2))
    assert not p.paused
    p.apply(CellStarted(cell_id="c0", ts=T0 + 3))
    p.apply(CampaignFinished(campaign="c", exit_code=130, ts=T0 + 9))
    assert p.finished and p.exit_code == 130 and p.state_word == "finished"
    assert p.elapsed_s(T0 + 1000) == 9.0  # frozen at the end
    assert p.cells["c0"].status == "pending"  # cut short: it runs again on resume
    assert p.cells["c0"].reason == "interrupted"
    assert p.eta_s(T0 + 1000) == 0.0


def test_eta_uses_per_kind_means() -> None:
    p = _progress([_start(cells=8)])
    assert p.eta_s(T0) is None  # nothing measured yet
    p.apply(GroupStarted(group="h.ar.tp1", ts=T0))
    p.apply(ServiceReady(group="h.ar.tp1", startup_s=10.0, ts=T0 + 10))
    p.apply(CellStarted(cell_id="c0", ts=T0 + 10))  # single
    p.apply(CellFinished(cell_id="c0", ts=T0 + 20))  # 10 s
    p.apply(CellStarted(cell_id="c2", ts=T0 + 20))  # agentic
    p.apply(CellFinished(cell_id="c2", ts=T0 + 50))  # 30 s
    # left: c1,c4,c5 single (3x10), c6 agentic (30), c3,c7 concurrency (overall mean 20 each)
    assert p.eta_s(T0 + 50) == 3 * 10 + 30 + 2 * 20
    p.apply(CellStarted(cell_id="c1", ts=T0 + 50))
    assert p.eta_s(T0 + 54) == 6 + 2 * 10 + 30 + 2 * 20  # the running cell's remainder


def test_resumed_cells_are_done_and_unknown_events_ignored() -> None:
    first = [
        _start(),
        *(
            ev
            for i in (0, 1)
            for ev in (CellStarted(cell_id=f"c{i}"), CellFinished(cell_id=f"c{i}"))
        ),
        CellStarted(cell_id="c2"),  # the process died mid-cell
    ]
    p = _progress([*first, _start(selected=["c2", "c3"])])
    assert p.counts.done == 2 and p.cells["c0"].resumed
    assert p.cells["c2"].status == "pending" and p.cells["c2"].reason == "interrupted"
    p.apply(Event.from_json({"event": "from_the_future", "x": 1}))
    p.apply(CellStarted(cell_id="zz", cell="h.ar.tp1/new", group="h.ar.tp1", ts=T0))
    assert p.cells["zz"].status == "running" and "zz" in p.groups["h.ar.tp1"].cells


def test_logs_and_gpu_samples() -> None:
    p = _progress([_start()])
    p.apply(LogLine(group="h.ar.tp1", line="l", stats={"gen_throughput": 5.0}))
    p.apply(GpuSample(host="h", gpu=1, util_pct=50, mem_used_mib=10, mem_total_mib=20))
    assert p.groups["h.ar.tp1"].last_stats["gen_throughput"] == 5.0
    assert p.gpus[("h", 1)].util_pct == 50


def test_finished_sample_counts() -> None:
    p = _progress(sample_campaign(finish=True))
    assert p.finished and p.exit_code == 1
    assert (p.counts.done, p.counts.failed) == (15, 1)


def test_format_clock() -> None:
    assert format_clock(None) == "--:--"
    assert format_clock(65) == "1:05"
    assert format_clock(3723) == "1:02:03"


def test_inbox_drops_live_events_only() -> None:
    inbox = EventInbox(live_limit=100)
    inbox.put(CellStarted(cell_id="a"))
    for i in range(500):
        inbox.put(RequestDone(cell_id="a", done=i))
    inbox.put(CellFinished(cell_id="a"))
    out = inbox.drain()
    assert inbox.dropped > 0 and len(out) <= 102
    assert isinstance(out[0], CellStarted) and isinstance(out[-1], CellFinished)
    assert isinstance(out[-2], RequestDone) and out[-2].done == 499  # the newest are kept
    assert inbox.drain() == []


def test_progress_does_not_import_textual() -> None:
    code = (
        "import sys; import specbench_tui.results.progress; "
        "assert 'textual' not in sys.modules, 'textual imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_earlier_failures_and_cells_left_out_of_this_run_show_as_such() -> None:
    earlier = [
        _start(),
        CellStarted(cell_id="c1", attempt=2),
        CellFailed(cell_id="c1", attempt=2, reason="server did not start"),
    ]
    p = _progress([*earlier, _start(selected=["c0"])])
    assert p.cells["c1"].status == "failed" and p.cells["c1"].attempt == 2
    assert p.cells["c1"].reason == "server did not start" and p.cells["c1"].resumed
    assert p.cells["c2"].held and p.counts.held == 2  # c2 and c3 are left out of this run
    assert p.cells["c0"].status == "pending" and not p.cells["c0"].held


def test_every_running_group_is_tracked_and_current_falls_back() -> None:
    """Packed groups run side by side: each stays running until its own group_finished,
    where it listens comes from group_started, and when the current group or cell ends one
    still running becomes current (not none while others run)."""
    p = _progress(packed_campaign())
    assert list(p.running_groups) == [
        "h100.ar.tp8",
        "sim.dflash.tp1",
        "sim.ddtree-16.tp1",
        "sim.ddtree-16.tp4",
    ]
    sim = p.running_on("sim")
    assert [(g.config, g.tp, g.gpu_ids, g.port) for g in sim] == [
        ("dflash", 1, [6], 31001),
        ("ddtree-16", 1, [5], 31002),
        ("ddtree-16", 4, [0, 1, 2, 3], 31003),
    ]
    assert p.groups["sim.ar.tp1"].port == 31000  # planned; never moved
    assert p.current_group == "sim.ddtree-16.tp4"
    p.apply(GroupFinished(group="sim.ddtree-16.tp4", status="done"))
    assert p.current_group == "sim.ddtree-16.tp1" and "sim.ddtree-16.tp4" not in p.running_groups
    running = [c.id for c in p.cells.values() if c.status == "running"]
    assert len(running) == 3 and p.current_cell in running
    p.apply(CellFinished(cell_id=p.current_cell, requests=8, ts=T0 + 10_000))
    assert p.current_cell in running  # another cell still runs
    p.apply(GroupStarted(group="sim.dflash.tp1", host="sim", attempt=2))  # a restart
    assert list(p.running_groups)[-1] == "sim.dflash.tp1"
    p.apply(CampaignFinished(campaign="packed"))
    assert p.running_groups == {} and p.running_on("sim") == []


def test_host_state_is_kept_and_a_new_run_forgets_it() -> None:
    p = _progress([_start()])
    assert p.host_away("h") == ""
    p.apply(HostState(host="h", state="reconnecting", reason="connection lost"))
    assert p.host_away("h") == "reconnecting: connection lost"
    p.apply(HostState(host="h", state="connected", reason="reconnected after 12s"))
    assert p.host_away("h") == ""
    p.apply(HostState(host="h", state="unreachable", reason="away for 10m"))
    p.apply(_start())
    assert p.host_away("h") == ""


def test_host_news_is_one_toast_per_change() -> None:
    assert host_news("h", "", "connected", "up") is None  # never away
    away = host_news("h", "", "reconnecting", "connection lost")
    assert away == (
        "warning",
        "host away",
        ("host away", "hosts away"),
        "h reconnecting: connection lost",
    )
    assert host_news("h", "reconnecting", "reconnecting", "retry 3") is None
    gone = host_news("h", "reconnecting", "unreachable", "away for 10m")
    assert gone is not None and gone[0] == "error" and gone[3] == "h unreachable: away for 10m"
    back = host_news("h", "unreachable", "connected", "reconnected after 11m")
    assert back is not None and back[:2] == ("information", "host back")
    assert back[3] == "h: reconnected after 11m"

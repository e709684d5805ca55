"""What a frame's events do to the console, without the console: ``fold_batch`` (the state and
what it touched) and ``plan_repaint`` (which rows, panes and toasts to repaint). Pure, no
textual: the app's painter only does what these say."""

from __future__ import annotations

import subprocess
import sys

from specbench_tui.results.cells import Cell, ServiceGroup
from specbench_tui.results.events import (
    CampaignFinished,
    CampaignStarted,
    CellFailed,
    CellFinished,
    CellStarted,
    CheckVerdict,
    Event,
    GpuSample,
    GroupStarted,
    HostState,
    LogLine,
    Notice,
    RequestDone,
    ServiceFailed,
)
from specbench_tui.results.progress import CampaignProgress
from specbench_tui.tui.frame import (
    HEALTH_GPU_S,
    RESULTS_DELAY_S,
    FrameChanges,
    ToastSpec,
    TreeRepaint,
    ViewState,
    fold_batch,
    plan_repaint,
)
from specbench_tui.tui.log_text import STATS_MARK

T0 = 1_700_000_000.0
G = "h.ar.tp1"


def _start() -> CampaignStarted:
    cells = [
        Cell.from_json(
            {
                "id": f"c{i}",
                "name": f"{G}/w{i}",
                "group": G,
                "host": "h",
                "config": "ar",
                "tp": 1,
                "kind": "single",
                "workload": f"w{i}",
            }
        )
        for i in range(3)
    ]
    group = ServiceGroup.from_json(
        {"id": G, "host": "h", "config": "ar", "tp": 1, "gpu_ids": [0], "command": ["srv"]}
    )
    return CampaignStarted(
        campaign="c",
        hosts=["h"],
        ts=T0,
        groups=[group],
        cells=cells,
        selected=[c.id for c in cells],
    )


def _live(_ev: Event) -> bool:
    return True


def _history(_ev: Event) -> bool:
    return False


def _started() -> CampaignProgress:
    p = CampaignProgress()
    fold_batch(p, [_start()], _live)
    return p


def test_importing_the_fold_loads_no_textual() -> None:
    code = (
        "import sys; import specbench_tui.tui.frame; "
        "assert 'textual' not in sys.modules, 'textual imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_fold_applies_events_through_the_campaigns_reducer() -> None:
    p = _started()
    out = fold_batch(
        p,
        [
            GroupStarted(group=G, host="h", config="ar", tp=1, ts=T0 + 1),
            CellStarted(cell_id="c0", group=G, ts=T0 + 2),
            CellFinished(cell_id="c0", group=G, ts=T0 + 3),
            CellStarted(cell_id="c1", group=G, ts=T0 + 4),
        ],
        _live,
    )
    assert p.cells["c0"].status == "done"
    assert p.cells["c1"].status == "running"
    assert out.cells == {"c0", "c1"}
    assert out.groups == {G}
    assert out.lifecycle and out.results
    assert not out.started and not out.checks and out.ended is None


def test_a_new_run_starts_the_tree_over_and_forgets_rows_before_it() -> None:
    p = _started()
    out = fold_batch(p, [CellStarted(cell_id="c0", group=G, ts=T0 + 1), _start()], _live)
    assert out.started
    assert out.cells == set()  # the rebuild repaints every row
    plan = plan_repaint(out, ViewState(now=50.0), p.groups)
    assert plan.tree.rebuild and plan.clear_live
    assert plan.results_due == 50.0 + RESULTS_DELAY_S


def test_live_failures_raise_toasts_and_history_raises_none() -> None:
    batch: list[Event] = [
        ServiceFailed(group=G, reason="port busy", ts=T0 + 1),
        CellFailed(cell_id="c0", group=G, cell="w0", reason="timeout", ts=T0 + 2),
        CheckVerdict(check="greedy", config="ar", tp=1, status="fail", text="diverged"),
        CheckVerdict(check="greedy", config="ar", tp=2, status="pass"),
        Notice(level="warning", text="slow disk", ts=T0 + 3),
        CampaignFinished(campaign="c", failed=1, ts=T0 + 4),
    ]
    live = fold_batch(_started(), batch, _live)
    assert [(t.text, t.severity, t.title) for t in live.toasts] == [
        (f"{G}: port busy", "error", "server failed"),
        ("w0: timeout", "error", "cell failed"),
        ("ar TP1: diverged", "error", "greedy check failed"),
    ]
    assert live.notices == [ToastSpec("slow disk", "warning", ("warning", "warnings"))]
    assert live.ended is not None and live.ended.failed == 1
    assert live.checks

    replayed = fold_batch(_started(), batch, _history)
    assert replayed.toasts == [] and replayed.notices == [] and replayed.ended is None
    assert replayed.lifecycle and replayed.checks  # the state changed all the same


def test_a_notices_level_is_its_severity() -> None:
    out = fold_batch(
        _started(),
        [
            Notice(level="error", text="a"),
            Notice(level="info", text="b"),
            Notice(level="debug", text="c"),
        ],
        _live,
    )
    assert [(t.severity, t.noun) for t in out.notices] == [
        ("error", ("error", "errors")),
        ("information", ("note", "notes")),
        ("information", ("note", "notes")),
    ]


def test_log_lines_are_kept_apart_by_group_as_the_pane_shows_them() -> None:
    out = fold_batch(
        _started(),
        [
            LogLine(group=G, line="[2026-01-01 10:00:00 TP0] Decode batch", stats={"decode": 1}),
            LogLine(group="other", line="hello"),
            LogLine(group=G, line="plain"),
        ],
        _live,
    )
    assert list(out.log) == [G, "other"]
    assert out.log[G][0].startswith(f"[10:00:00 TP0] {STATS_MARK}decode")  # its date dropped
    assert out.log[G][1] == "plain"
    assert not out.lifecycle


def test_a_host_toasts_once_per_change_and_repaints_its_row_and_the_health_pane() -> None:
    p = _started()
    first = fold_batch(p, [HostState(host="h", state="connected")], _live)
    assert first.hosts == ["h"] and first.toasts == []  # first heard of as connected
    away = fold_batch(
        p,
        [
            HostState(host="h", state="reconnecting", reason="ssh: timeout"),
            HostState(host="h", state="reconnecting", reason="ssh: timeout"),
        ],
        _live,
    )
    assert [t.severity for t in away.toasts] == ["warning"]
    assert p.host_states["h"].state == "reconnecting"
    plan = plan_repaint(away, ViewState(now=10.0, health_at=9.9), p.groups)
    assert plan.tree.hosts == ("h", "h")
    assert plan.health and not plan.health_due


def test_requests_and_samples_do_not_touch_the_tree_or_the_detail_pane() -> None:
    p = _started()
    out = fold_batch(
        p,
        [
            RequestDone(cell_id="c0", group=G, done=1, total=4),
            GpuSample(host="h", gpu=0, util_pct=50.0),
        ],
        _live,
    )
    assert out.request_cells == {"c0"} and out.gpus
    plan = plan_repaint(out, ViewState(now=100.0, health_at=99.5), p.groups)
    assert plan.tree == TreeRepaint()
    assert not plan.detail and not plan.sync_log and not plan.clear_live
    assert plan.results_due is None


def test_gpu_samples_repaint_the_health_pane_at_most_once_a_period() -> None:
    changes = FrameChanges(gpus=True)
    soon = plan_repaint(changes, ViewState(now=10.0, health_at=10.0 - HEALTH_GPU_S / 2), {})
    assert not soon.health and soon.health_due  # held back
    held = plan_repaint(
        FrameChanges(), ViewState(now=10.0, health_due=True, health_at=10.0 - HEALTH_GPU_S), {}
    )
    assert held.health and not held.health_due  # what was held back, once its time came
    quiet = plan_repaint(FrameChanges(), ViewState(now=10.0, health_at=0.0), {})
    assert not quiet.health and not quiet.health_due
    lifecycle = plan_repaint(
        FrameChanges(lifecycle=True, gpus=True), ViewState(now=10.0, health_at=10.0), {}
    )
    assert lifecycle.health and not lifecycle.health_due


def test_a_finished_cell_asks_for_the_results_once_per_burst() -> None:
    changes = FrameChanges(results=True, lifecycle=True)
    first = plan_repaint(changes, ViewState(now=5.0), {})
    assert first.results_due == 5.0 + RESULTS_DELAY_S
    burst = plan_repaint(changes, ViewState(now=5.5, results_due=first.results_due), {})
    assert burst.results_due == first.results_due  # not pushed back by the next cell
    nothing = plan_repaint(FrameChanges(lifecycle=True), ViewState(now=7.0), {})
    assert nothing.results_due is None


def test_a_groups_change_relabels_its_cells_and_a_check_relabels_everything() -> None:
    p = _started()
    out = fold_batch(p, [GroupStarted(group=G, host="h", config="ar", tp=1)], _live)
    plan = plan_repaint(out, ViewState(now=1.0), p.groups)
    assert plan.tree == TreeRepaint(groups=(G,), cells=("c0", "c1", "c2"))
    assert plan.detail and plan.sync_log
    gone = plan_repaint(FrameChanges(groups={"nowhere"}), ViewState(now=1.0), p.groups)
    assert gone.tree == TreeRepaint(groups=("nowhere",))  # a group the plan lacks: no rows
    checks = plan_repaint(FrameChanges(checks=True, cells={"c0"}), ViewState(now=1.0), p.groups)
    assert checks.tree == TreeRepaint(relabel_all=True)


def test_a_narrowed_tree_is_rebuilt_only_when_a_lifecycle_event_changed_what_it_shows() -> None:
    asked: list[bool] = []

    def stale() -> bool:
        asked.append(True)
        return True

    not_lifecycle = plan_repaint(FrameChanges(cells={"c0"}), ViewState(now=1.0), {}, stale)
    assert not not_lifecycle.tree.rebuild and asked == []  # not asked without a reason
    lifecycle = FrameChanges(lifecycle=True, cells={"c0"})
    assert plan_repaint(lifecycle, ViewState(now=1.0), {}, stale).tree.rebuild
    assert not plan_repaint(lifecycle, ViewState(now=1.0), {}, lambda: False).tree.rebuild

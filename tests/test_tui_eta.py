"""The console's ETA: the plan's recorded estimate per cell, corrected by what the run measured
for cells like it (TP, kind, tokens, level), with its range; pure, no textual."""

from __future__ import annotations

import math

import pytest

from specbench_tui.results.cells import Cell, ServiceGroup
from specbench_tui.results.eta import DRIFT, UNMEASURED, Z, campaign_left, group_left
from specbench_tui.results.events import (
    CampaignStarted,
    CellFinished,
    CellStarted,
    EstimateRecorded,
    Event,
    GroupStarted,
    ServiceReady,
)
from specbench_tui.results.progress import CampaignProgress
from tests.support.scripted import T0

#: (tp, kind, max_tokens, level) of each cell, in run order: TP1 first, TP4 after, as the
#: 480-cell plan ran when its ETA swung.
SHAPES = [
    (1, "single", 64, 1),
    (1, "single", 512, 1),
    (1, "concurrency", 256, 16),
    (1, "concurrency", 256, 64),
    (4, "single", 64, 1),
    (4, "single", 512, 1),
    (4, "concurrency", 256, 16),
    (4, "concurrency", 256, 64),
]
#: The estimate's seconds per cell: long cells (512 tokens, high levels) take longer.
ESTIMATE = [10.0, 60.0, 40.0, 90.0, 6.0, 30.0, 20.0, 45.0]
STARTUP = 20.0


def _started() -> list[Event]:
    groups = [
        ServiceGroup.from_json(
            {"id": f"h.ar.tp{tp}", "host": "h", "config": "ar", "tp": tp, "gpu_ids": [0]}
        )
        for tp in (1, 4)
    ]
    cells = [
        Cell.from_json(
            {
                "id": f"c{i}",
                "name": f"h.ar.tp{tp}/w{i}",
                "group": f"h.ar.tp{tp}",
                "host": "h",
                "config": "ar",
                "tp": tp,
                "kind": kind,
                "workload": f"w{i}",
                "max_tokens": tokens,
                "concurrency": level if kind == "concurrency" else None,
            }
        )
        for i, (tp, kind, tokens, level) in enumerate(SHAPES)
    ]
    serial = sum(ESTIMATE) + 2 * STARTUP
    return [
        CampaignStarted(
            campaign="c",
            hosts=["h"],
            ts=T0,
            groups=groups,
            cells=cells,
            selected=[c.id for c in cells],
        ),
        EstimateRecorded(
            total_s=serial,  # one group at a time: no parallelism
            startup_s=2 * STARTUP,
            per_cell_s={f"c{i}": s for i, s in enumerate(ESTIMATE)},
            ts=T0,
        ),
    ]


def _run(
    factor: dict[int, float], *, old: bool = False
) -> tuple[CampaignProgress, list[tuple[float, float]]]:
    """Play the campaign with each cell taking its estimate times ``factor[tp]``; after each
    cell, (the ETA shown, the time really left); ``old``: the former per-kind means (then
    of kind)."""
    p = CampaignProgress()
    p.apply_all(_started())
    durations = [ESTIMATE[i] * factor[tp] for i, (tp, *_r) in enumerate(SHAPES)]
    end = sum(durations) + 2 * STARTUP
    t = T0
    seen: list[tuple[float, float]] = []
    for i, (tp, *_rest) in enumerate(SHAPES):
        gid = f"h.ar.tp{tp}"
        if p.groups[gid].server == "pending":
            p.apply(GroupStarted(group=gid, ts=t))
            t += STARTUP
            p.apply(ServiceReady(group=gid, startup_s=STARTUP, ts=t))
        p.apply(CellStarted(cell_id=f"c{i}", ts=t))
        t += durations[i]
        p.apply(CellFinished(cell_id=f"c{i}", ts=t))
        if old:
            shown = p.eta_s(t)
            assert shown is not None
            seen.append((shown, T0 + end - t))
            continue
        eta = campaign_left(p, t)
        assert eta is not None
        seen.append((eta.seconds, T0 + end - t))
    return p, seen


def test_before_any_cell_the_plans_estimate_with_a_wide_range() -> None:
    p = CampaignProgress()
    p.apply_all(_started())
    eta = campaign_left(p, T0)
    assert eta is not None and eta.measured == 0
    assert eta.seconds == pytest.approx(sum(ESTIMATE) + 2 * STARTUP)
    assert eta.low == pytest.approx(eta.seconds * UNMEASURED[0])
    assert eta.high == pytest.approx(eta.seconds * UNMEASURED[1])


def test_a_steady_error_gives_a_steady_eta_where_per_kind_means_swing() -> None:
    """Every cell 1.5x its estimate: from the first cell on, the ETA is the time really
    left. Per-kind means (the console's former ETA) swing as long and short cells come in."""
    p = CampaignProgress()
    p.apply_all(_started())
    _, seen = _run({1: 1.5, 4: 1.5})
    for shown, left in seen:
        assert shown == pytest.approx(left, rel=1e-6, abs=1e-6)


def test_the_old_per_kind_mean_swings_on_the_same_run() -> None:
    """The same run through ``eta_s`` (means per kind, the former ETA): its error against
    the time really left swings as short and long cells come in, which the correction per
    class removes."""
    _, seen = _run({1: 1.5, 4: 1.5}, old=True)
    ratios = [shown / left for shown, left in seen if left > 0]
    assert max(ratios) / min(ratios) > 1.5


def test_tp_sizes_are_corrected_apart() -> None:
    """TP1 cells ran 2x their estimate, the first TP4 cells 0.5x: what is left of TP4 is
    predicted at 0.5x, not at a mean of both."""
    p = CampaignProgress()
    p.apply_all(_started())
    factor = {1: 2.0, 4: 0.5}
    t = T0
    for i in range(6):  # every TP1 cell and the first two TP4 ones
        tp = SHAPES[i][0]
        gid = f"h.ar.tp{tp}"
        if p.groups[gid].server == "pending":
            p.apply(GroupStarted(group=gid, ts=t))
            t += STARTUP
            p.apply(ServiceReady(group=gid, startup_s=STARTUP, ts=t))
        p.apply(CellStarted(cell_id=f"c{i}", ts=t))
        t += ESTIMATE[i] * factor[tp]
        p.apply(CellFinished(cell_id=f"c{i}", ts=t))
    left = group_left(p, "h.ar.tp4", t)
    assert left is not None and left.measured == 6
    assert left.seconds == pytest.approx(0.5 * (ESTIMATE[6] + ESTIMATE[7]))
    # the range: at least the drift either side, far narrower than the unmeasured x0.5-x2
    mid = left.seconds
    assert left.low <= mid * (1 - DRIFT) and left.high >= mid * (1 + DRIFT)
    assert left.low > mid * 0.7 and left.high < mid * 1.4
    # a running cell counts what it has had
    p.apply(CellStarted(cell_id="c6", ts=t))
    during = group_left(p, "h.ar.tp4", t + 4.0)
    assert during is not None and during.seconds == pytest.approx(left.seconds - 4.0)


def test_packed_groups_divide_by_the_estimates_parallelism() -> None:
    p = CampaignProgress()
    events = _started()
    est = events[1]
    assert isinstance(est, EstimateRecorded)
    est.total_s = (sum(ESTIMATE) + 2 * STARTUP) / 2  # the schedule ran two groups at once
    p.apply_all(events)
    eta = campaign_left(p, T0)
    assert eta is not None
    tp1 = sum(ESTIMATE[:4]) + STARTUP  # the longest group: never less than its own time
    assert eta.seconds == pytest.approx(max((sum(ESTIMATE) + 2 * STARTUP) / 2, tp1))


def _big_campaign(name: str) -> list[Event]:
    """480 cells on one group, 123 done, 105 failed, 12 skipped, one running."""
    from specbench_tui.results.events import CellFailed, CellSkipped

    g = ServiceGroup.from_json(
        {"id": "h.ar.tp1", "host": "h", "config": "ar", "tp": 1, "gpu_ids": [0]}
    )
    cells = [
        Cell.from_json(
            {
                "id": f"c{i}",
                "name": f"h.ar.tp1/w{i}",
                "group": "h.ar.tp1",
                "host": "h",
                "config": "ar",
                "tp": 1,
                "kind": "single",
                "workload": f"w{i}",
                "max_tokens": 64,
            }
        )
        for i in range(480)
    ]
    events: list[Event] = [
        CampaignStarted(
            campaign=name,
            hosts=["h100-node-a", "h100-node-b"],
            ts=T0,
            groups=[g],
            cells=cells,
            selected=[c.id for c in cells],
        ),
        EstimateRecorded(
            total_s=480 * 5.0 + STARTUP,
            startup_s=STARTUP,
            per_cell_s={c.id: 5.0 for c in cells},
            ts=T0,
        ),
        GroupStarted(group="h.ar.tp1", ts=T0),
        ServiceReady(group="h.ar.tp1", startup_s=STARTUP, ts=T0 + STARTUP),
    ]
    t = T0 + STARTUP
    for i in range(241):
        events.append(CellStarted(cell_id=f"c{i}", ts=t))
        t += 6.0
        if i < 123:
            events.append(CellFinished(cell_id=f"c{i}", ts=t))
        elif i < 228:
            events.append(CellFailed(cell_id=f"c{i}", reason="x", ts=t))
        elif i < 240:
            events.append(CellSkipped(cell_id=f"c{i}", by="operator", ts=t))
    return events


@pytest.mark.console
@pytest.mark.parametrize("name", ["seed", "qwen36-27b-ddtree-vs-dflash-h200-full-matrix"])
async def test_the_header_keeps_failed_count_and_eta_at_80x24(name: str) -> None:
    from specbench_tui.tui.header import CampaignHeader
    from tests.support.console_pilot import frozen_app, settle

    app, _ = frozen_app(_big_campaign(name))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        text = str(app.main.query_one(CampaignHeader).render())
    assert "✗105" in text and "↷12" in text and "/480" in text, text
    assert "ETA " in text and "ETA —" not in text, text
    assert len(text) <= 78, text  # the header's width inside its padding
    if len(name) < 10:
        assert name in text, text
    else:  # the name gives way, cut with its mark, before a count or the ETA
        assert "specbench qwen36" in text and "…" in text, text


@pytest.mark.console
async def test_a_wide_header_shows_the_hosts_and_the_etas_range() -> None:
    from specbench_tui.tui.header import CampaignHeader
    from tests.support.console_pilot import frozen_app, settle

    app, _ = frozen_app(_big_campaign("seed"))
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot, app)
        text = str(app.main.query_one(CampaignHeader).render())
    # 239 cells of 5 s estimated, measured at 6 s each: 1.2x with no scatter, so the range
    # is the drift alone either side
    left = 239 * 6.0 - 0  # the running cell just started
    low, high = left * math.exp(-Z * DRIFT) / 60, left * math.exp(Z * DRIFT) / 60
    assert "@ h100-node-a,h100-node-b" in text, text
    assert f"({int(low)}:" in text and f"–{int(high)}:" in text, text

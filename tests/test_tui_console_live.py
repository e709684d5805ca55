"""The console an operator lives in for hours, driven by keys (Pilot) against the scripted
campaign: the results table, the log, health history, honest end states, restarts after the
end, read-only attach, coalesced notifications, quitting, the 80x24 layout, screenshots."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Log
from textual.widgets._footer import FooterKey

from specbench_tui.engine.commands import Command
from specbench_tui.engine.replay import ReplayControl
from specbench_tui.results.events import (
    BatchJobChanged,
    CampaignFinished,
    CellEnergy,
    CellFailed,
    CellFinished,
    CheckVerdict,
    GpuSample,
    GpusWaiting,
    GroupFinished,
    GroupStarted,
    HostState,
    LogLine,
    Notice,
    ServiceFailed,
    ServiceReady,
)
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.tui.app import ConsoleApp
from specbench_tui.tui.header import CampaignHeader
from specbench_tui.tui.log_pane import CONTINUED, LogPane
from specbench_tui.tui.log_text import display_line
from specbench_tui.tui.plan_tree import NodeRef, PlanTree
from specbench_tui.tui.plots import LivePlot
from specbench_tui.tui.results_pane import ResultsPane
from specbench_tui.tui.results_source import COLUMNS
from specbench_tui.tui.screens import ConfirmScreen, HelpScreen
from specbench_tui.tui.toasts import ToastBatcher
from tests.support.scripted import ScriptedControl, packed_campaign, sample_campaign

pytestmark = pytest.mark.console

SIZE = (120, 40)
SMALL = (80, 24)
DECODE = (
    "[2025-10-09 08:21:40 TP0] Decode batch, #running-req: 1, #token: 3600, token usage: 0.14, "
    "accept len: 5.83, accept rate: 0.36, cuda graph: True, gen throughput (token/s): 131.20, "
    "#queue-req: 0,"
)
DECODE_STATS = {
    "decode": 1.0,
    "running_req": 1.0,
    "token": 3600.0,
    "token_usage": 0.14,
    "accept_len": 5.83,
    "accept_rate": 0.36,
    "cuda_graph": 1.0,
    "gen_throughput": 131.2,
    "queue_req": 0.0,
}


def make_app(
    *,
    finish: bool = False,
    control: ScriptedControl | None = None,
    **kw: Any,
) -> tuple[ConsoleApp, ScriptedControl]:
    events = sample_campaign(finish=finish)
    control = control or ScriptedControl(events, close_after_replay=finish)
    frozen = events[-1].ts + 1.0
    kw.setdefault("results_source", None)
    app = ConsoleApp(control, clock=lambda: frozen, **kw)
    return app, control


async def settle(pilot: Pilot[int], app: ConsoleApp, extra: float = 0.06) -> None:
    for _ in range(150):  # held-back GPU samples reach the health pane within a second
        await pilot.pause(0.02)
        if not len(app.inbox) and app.frames and not app.health_pending:
            break
    await pilot.pause(extra)


def notes(app: ConsoleApp) -> list[str]:
    return [f"{n.title}\n{n.message}" for n in app._notifications]


def header(app: ConsoleApp) -> str:
    return str(app.main.query_one(CampaignHeader).render())


def select(app: ConsoleApp, ref: NodeRef) -> None:
    app.follow = False
    app.main.query_one(PlanTree).reveal(ref)


# --- the results table -------------------------------------------------------------------


def frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    full = [{k: r.get(k) for k in COLUMNS} for r in rows]
    return pl.DataFrame(full, schema=COLUMNS)


def table_rows() -> pl.DataFrame:
    base = dict(host="sim", workload="single", prompt_set="code", max_tokens=64, repeats=3)
    return frame(
        [
            {**base, "tp": 1, "config": "ar", "baseline": True, "tok_s": 40.0, "speedup": 1.0},
            {
                **base,
                "tp": 1,
                "config": "ddtree-16",
                "tok_s": 131.0,
                "tok_s_lo": 125.0,
                "tok_s_hi": 137.0,
                "speedup": 3.3,
                "speedup_lo": 3.1,
                "speedup_hi": 3.5,
                "accept": 7.9,
                "best": True,
            },
            {
                **base,
                "tp": 1,
                "config": "dflash",
                "tok_s": 95.0,
                "speedup": 2.4,
                "accept": 5.8,
                "failed_check": "greedy outputs differ from the baseline",
            },
            {**base, "tp": 4, "config": "ar", "baseline": True, "tok_s": 76.0, "speedup": 1.0},
        ]
    )


class CountingSource:
    """A results source that records its calls and the thread each ran in."""

    def __init__(self, result: pl.DataFrame) -> None:
        self.result = result
        self.calls: list[tuple[Path, str]] = []

    def __call__(self, root: Path) -> pl.DataFrame:
        self.calls.append((root, threading.current_thread().name))
        return self.result


async def test_results_table_builds_live_per_tp_sortable_and_marked() -> None:
    source = CountingSource(table_rows())
    app, control = make_app(results_source=source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("6")  # the results take the plots' slot
        assert app.main.query_one("#results").display
        assert not app.main.query_one("#plots").display
        for i in range(5):  # a burst of finished cells: one recomputation
            control.publish(CellFinished(cell_id="ddt1agent", group="sim.ddtree-16.tp1"))
            if i == 2:
                await pilot.pause(0.05)
        for _ in range(60):
            await pilot.pause(0.1)
            if len(source.calls) >= 2:
                break
        await pilot.pause(1.5)
        # once when shown, once for the burst: never once per event
        assert 1 <= len(source.calls) <= 2
        assert all(name != threading.main_thread().name for _, name in source.calls)
        assert source.calls[0][0] == Path("results/demo")
        pane = app.main.query_one(ResultsPane)
        table = app.main.query_one("#results-table", DataTable)
        assert table.row_count == 3 and pane.tp == 1
        cells = [str(table.get_row_at(i)[0]) for i in range(3)]
        assert cells[0].startswith("★ ddtree-16")  # fastest first within its point
        assert any(c.startswith("⚠ dflash") for c in cells)
        tok = [str(table.get_row_at(i)[3]) for i in range(3)]
        assert "131.0 ±6.0" in tok
        speed = [str(table.get_row_at(i)[4]) for i in range(3)]
        assert any("lossy" in s for s in speed)
        table.focus()
        await pilot.press("right_square_bracket")
        assert pane.tp == 4 and table.row_count == 1
        await pilot.press("left_square_bracket", "o", "o")  # next sorts: tok/s, speed-up
        assert pane.sort_key == "speedup" and pane.descending
        await pilot.press("O")
        assert not pane.descending
        assert next(r["config"] for r in pane.shown_rows) == "ar"


async def test_the_speed_up_stays_in_view_at_80x24() -> None:
    """A narrow console's results put speed-up, tok/s and accept right after the config: the
    answer is in view without zooming, however long the workload and prompt names."""
    long = dict(host="sim", workload="a-rather-long-workload-name", repeats=3)
    rows = frame(
        [
            {
                **long,
                "tp": 1,
                "config": c,
                "prompt_set": f"humaneval-{c}-long-set",
                "max_tokens": 1024,
                "baseline": c == "ar",
                "tok_s": t,
                "speedup": t / 40.0,
            }
            for c, t in (("ar", 40.0), ("dflash-block-16", 90.0), ("ddtree-budget-64", 120.0))
        ]
        + [
            {
                **long,
                "workload": "other",
                "tp": 1,
                "config": "ar",
                "prompt_set": "chat",
                "max_tokens": 64,
                "baseline": True,
                "tok_s": 41.0,
                "speedup": 1.0,
            }
        ]
    )
    app, _ = make_app(results_source=CountingSource(rows))
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot, app)
        await pilot.press("6")
        table = app.main.query_one("#results-table", DataTable)
        for _ in range(60):
            await pilot.pause(0.1)
            if table.row_count:
                break
        keys = [str(c.key.value) for c in table.ordered_columns]
        at = keys.index("speedup")
        shown = sum(c.get_render_width(table) for c in table.ordered_columns[: at + 1])
        assert shown <= table.content_region.width, (keys, shown, table.content_region.width)
        assert any("3.00×" in str(table.get_row_at(i)[at]) for i in range(table.row_count))


async def test_a_config_no_verdict_covers_is_marked_unchecked() -> None:
    base = dict(host="sim", workload="single", prompt_set="code", max_tokens=64, repeats=3)
    rows = frame(
        [
            {**base, "tp": 1, "config": "ar", "baseline": True, "tok_s": 40.0, "speedup": 1.0},
            {
                **base,
                "tp": 1,
                "config": "eagle",
                "tok_s": 200.0,
                "speedup": 5.0,
                "unchecked": "eagle: unchecked: waiting for ar's outputs at TP 1; not ranked",
            },
        ]
    )
    app, _ = make_app(results_source=CountingSource(rows))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("6")
        for _ in range(60):
            await pilot.pause(0.1)
            if app.main.query_one("#results-table", DataTable).row_count == 2:
                break
        table = app.main.query_one("#results-table", DataTable)
        cells = [str(table.get_row_at(i)[0]) for i in range(2)]
        assert any(c.startswith("◇ eagle") for c in cells)
        assert not any(c.startswith("★") for c in cells)
        speed = [str(table.get_row_at(i)[4]) for i in range(2)]
        assert any("unchecked" in x for x in speed)


async def test_results_pane_is_where_one_looks_after_the_end() -> None:
    app, _ = make_app(finish=True, results_source=CountingSource(table_rows()))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        assert app.main.query_one("#results").display
        assert not app.main.query_one("#plots").display


async def test_the_results_are_kept_while_hidden_so_the_end_shows_them_at_once() -> None:
    """During a run the plots hold the slot and the results pane is hidden; the table is kept
    current anyway (not at every cell), so the pane that takes the slot at the end is never
    empty while a first computation runs."""
    source = CountingSource(table_rows())
    app, control = make_app(results_source=source)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        assert not app.main.query_one("#results").display
        control.publish(CellFinished(cell_id="ddt1agent", group="sim.ddtree-16.tp1"))
        for _ in range(60):
            await pilot.pause(0.1)
            if source.calls:
                break
        assert source.calls, "not computed while hidden"
        await pilot.pause(0.2)
        table = app.main.query_one("#results-table", DataTable)
        assert table.row_count == 3
        computed = len(source.calls)
        for _ in range(3):  # more cells end: not recomputed at once while hidden
            control.publish(CellFinished(cell_id="ddt1agent", group="sim.ddtree-16.tp1"))
            await pilot.pause(0.5)
        assert len(source.calls) == computed
        control.publish(CampaignFinished(campaign="demo", finished=16, exit_code=0))
        for _ in range(50):
            await pilot.pause(0.02)
            if app.main.query_one("#results").display:
                break
        assert app.main.query_one("#results").display
        assert table.row_count == 3  # the table it kept, before any new computation


def test_comparison_adapter_reads_the_report_frame(tmp_path: Path) -> None:
    """The adapter's figures are the report's comparison frame, renamed: one code path."""
    from specbench_tui.report.frames import comparison as report_comparison
    from specbench_tui.report.inputs import load_inputs
    from specbench_tui.tui.results_source import comparison
    from tests.support.results_builder import ResultsBuilder

    b = ResultsBuilder(tmp_path / "c")
    b.cell("a1", "ar", 1, "single", "single", repeats=3)
    b.cell("d1", "dflash", 1, "single", "single", repeats=3)
    b.cell("t1", "ddtree", 1, "single", "single", repeats=3)
    speeds = {"a1": [40.0, 41.0, 42.0], "d1": [80.0, 82.0, 84.0], "t1": [90.0, 150.0, 60.0]}
    for cid, vals in speeds.items():
        b.finished(
            cid,
            [
                {
                    "prompt_id": "p0",
                    "repeat": r,
                    "output_tokens": 65,
                    "ttft_s": 0.05,
                    "e2e_s": 0.05 + 64 / v,
                    "accept_length": 3.0,
                }
                for r, v in enumerate(vals)
            ],
        )
    b.events.append(
        CheckVerdict(check="greedy", config="dflash", host="sim", tp=1, status="fail", text="x")
    )
    root = b.write(plan='[campaign]\nname = "c"\nbaseline = "ar"\n')
    rows = {r["config"]: r for r in comparison(root).to_dicts() if r["pooled"]}
    frame = {r["config"]: r for r in report_comparison(load_inputs(root)).to_dicts()}
    for cfg in ("ar", "dflash", "ddtree"):
        assert rows[cfg]["tok_s"] == frame[cfg]["decode_tok_s"]  # one code path, one figure
        assert rows[cfg]["speedup"] == frame[cfg]["speedup"]
        assert rows[cfg]["repeats"] == 3
    assert abs(rows["dflash"]["tok_s"] - 82.0) < 1e-6
    assert rows["dflash"]["tok_s_lo"] < 82.0 < rows["dflash"]["tok_s_hi"]
    assert rows["dflash"]["failed_check"] == "x"
    # ddtree is fastest but its interval is wide: not told apart, so not best
    assert not rows["ddtree"]["best"] and not rows["dflash"]["best"]


# --- the plan tree -----------------------------------------------------------------------


async def test_failed_only_filter_shows_failures_and_checks() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        tree = app.main.query_one(PlanTree)
        await pilot.press("F")
        cells = [r.key for r in tree.nodes_by_ref if r.kind == "cell"]
        assert cells == ["dfl1conc4"]
        assert "failed only" in str(app.main.query_one("#tree").border_title)
        control.publish(
            CheckVerdict(check="greedy", config="ar", host="sim", tp=1, status="fail", text="x")
        )
        await settle(pilot, app)
        cells = {r.key for r in tree.nodes_by_ref if r.kind == "cell"}
        assert cells == {"dfl1conc4", "ar1co64", "ar1ma64", "ar1agent", "ar1conc4"}
        await pilot.press("F")
        assert sum(1 for r in tree.nodes_by_ref if r.kind == "cell") == 16


async def test_following_keeps_the_running_group_in_view_on_a_short_terminal() -> None:
    app, _ = make_app()
    async with app.run_test(size=(80, 16)) as pilot:  # a short tree: centring would hide it
        await settle(pilot, app, 0.3)
        tree = app.main.query_one(PlanTree)
        group = tree.nodes_by_ref[NodeRef("group", "sim.ddtree-16.tp1")]
        cell = tree.nodes_by_ref[NodeRef("cell", "ddt1agent")]
        top, height = tree.scroll_y, tree.scrollable_content_region.height
        assert top <= group.line < top + height, (top, group.line, height)
        assert top <= cell.line < top + height


# --- the log pane ------------------------------------------------------------------------


def test_stats_lines_show_their_figures_first() -> None:
    shown = display_line(LogLine(group="g", line=DECODE, stats=DECODE_STATS))
    assert shown.startswith("[08:21:40 TP0] ▸decode accept 5.83 · gen 131 tok/s")
    assert "queue 0" in shown and "usage 0.14" in shown and len(shown) < len(DECODE)
    pattern = display_line(
        LogLine(
            group="g",
            line="[2025-10-09 08:21:41 TP0] DDTree stats: budget=16, accept_len=7.25",
            stats={"ddtree_accept_len": 7.25},
            matches=["ddtree"],
        )
    )
    assert pattern.startswith("◆ ddtree_accept_len 7.25 │ [08:21:41 TP0] DDTree stats")


async def test_log_wraps_scrolls_and_keeps_a_frozen_view_across_groups() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        pane = app.main.query_one(LogPane)
        log = app.main.query_one("#log", Log)
        long = "x" * 300
        control.publish(LogLine(group="sim.ddtree-16.tp1", line=long))
        await settle(pilot, app)
        assert not pane.wrap and log.lines[-1] == long  # 120 columns: cut, scrollable
        n = log.line_count
        await pilot.press("w")
        assert pane.wrap and log.line_count > n
        assert log.lines[-1].startswith(CONTINUED)
        assert "wrapped" in str(pane.border_title)
        await pilot.press("w")
        assert log.line_count == n
        log.focus()
        await pilot.press("end", "right", "right")
        assert log.scroll_x > 0  # ← → scroll a cut log sideways
        await pilot.press("l")  # freeze, then the group changes under it
        frozen = list(log.lines)
        control.publish(GroupStarted(group="sim.ddtree-16.tp4", config="ddtree-16", tp=4))
        control.publish(LogLine(group="sim.ddtree-16.tp4", line="new group line"))
        await settle(pilot, app)
        await pilot.press("n")  # the next running group's log
        assert list(log.lines) == frozen  # still what it froze on, not blank
        assert "of sim.ddtree-16.tp4" in str(pane.border_title)
        await pilot.press("l")
        assert list(log.lines) == ["new group line"]


async def test_narrow_console_wraps_the_log_by_default() -> None:
    app, _ = make_app()
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot, app)
        assert app.main.query_one(LogPane).wrap


async def test_help_documents_the_new_keys() -> None:
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = {row[0] for row in app.screen.keys}
        texts = " ".join(" ".join(row) for row in app.screen.keys)
        assert {"w", "F", "6", "^s"} <= keys
        assert "sideways" in texts and "o / O" in keys


# --- the health pane ---------------------------------------------------------------------


async def test_health_shows_gpu_history_and_group_eta() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        for u in (10.0, 40.0, 70.0, 100.0):
            control.publish(
                GpuSample(host="sim", gpu=0, util_pct=u, mem_used_mib=50_000, mem_total_mib=97_887)
            )
        await settle(pilot, app)
        text = str(app.main.query_one("#health-text").render())
        assert "▁▄▆█ 100%" in text  # the last four samples, oldest left
        assert "ddtree-16 TP1  2/4" in text and "ETA" in text


def health(app: ConsoleApp) -> str:
    return str(app.main.query_one("#health-text").render())


def tree_label(app: ConsoleApp, ref: NodeRef) -> str:
    return str(app.main.query_one(PlanTree).nodes_by_ref[ref].label)


async def _until(pilot: Pilot[int], holds: Callable[[], bool], seconds: float = 30.0) -> bool:
    """Whether ``holds`` comes true within ``seconds``: the console paints and raises its
    toasts when its next frame comes, later than a fixed pause when suites run side by side."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if holds():
            return True
        await pilot.pause(0.05)
    return holds()


async def test_a_host_away_shows_in_health_and_tree_with_one_toast_each_way() -> None:
    """The transport reports every retry; the console says the host is away once (a
    warning line, the tree's host marked, one toast), gives up once, and is back once.
    Toasts are recorded as raised (a loaded machine may let one expire before the next)."""
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        app.toasts = ToastBatcher(hold_s=0.1, cooldown_s=0.3)
        app.clear_notifications()
        raised: list[tuple[str, str]] = []
        notify = app.notify

        def recording(message: str, **kw: Any) -> None:
            raised.append((str(kw.get("title", "")), message))
            notify(message, **kw)

        app.notify = recording  # type: ignore[method-assign]

        def titles() -> list[str]:
            return [t for t, _ in raised]

        host = NodeRef("host", "sim")
        assert "⚠" not in health(app) and "⚠" not in tree_label(app, host)
        for retry in range(3):
            control.publish(
                HostState(host="sim", state="reconnecting", reason=f"connection lost (try {retry})")
            )
        away = "sim ⚠ reconnecting: connection lost (try 2)"
        assert await _until(pilot, lambda: away in health(app) and titles() == ["host away"])
        assert "sim ⚠ reconnecting" in tree_label(app, host)
        await pilot.pause(0.5)  # past the batcher's hold and cooldown: no second toast
        assert titles() == ["host away"], raised
        control.publish(HostState(host="sim", state="unreachable", reason="away for 10m"))
        assert await _until(pilot, lambda: "sim ⚠ unreachable: away for 10m" in health(app))
        assert await _until(pilot, lambda: titles()[-1:] == ["host unreachable"]), raised
        assert "⚠ unreachable" in tree_label(app, host)
        control.publish(HostState(host="sim", state="connected", reason="reconnected after 11m"))
        assert await _until(pilot, lambda: titles()[-1:] == ["host back"]), raised
        assert await _until(pilot, lambda: "⚠" not in health(app))
        assert "⚠" not in tree_label(app, host)
        assert "ddtree-16 TP1  2/4" in health(app)  # the server line is still there
        assert titles() == ["host away", "host unreachable", "host back"], raised
        assert "sim: reconnected after 11m" in raised[-1][1]


async def test_a_replayed_host_outage_raises_no_toast() -> None:
    """Attaching later: the host's state is shown, but an old outage is history."""
    events = sample_campaign()
    events.append(HostState(host="sim", state="reconnecting", reason="lost", ts=events[-1].ts))
    app, _ = make_app(control=ScriptedControl(events))
    app.clock = lambda: events[-1].ts + 3600.0
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, extra=1.0)
        assert "sim ⚠ reconnecting: lost" in health(app)
        assert not [n for n in app._notifications if n.title.startswith("host")]


def packed_app(size: tuple[int, int] = SIZE) -> tuple[ConsoleApp, ScriptedControl]:
    events = packed_campaign()
    control = ScriptedControl(events)
    frozen = events[-1].ts + 1.0
    return ConsoleApp(control, clock=lambda: frozen, results_source=None), control


async def test_every_running_group_shows_its_server_gpus_and_port() -> None:
    """Three groups packed on one host and one on another: each has its line with its
    server state, GPUs and port; their tree nodes all read running."""
    app, control = packed_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        text = health(app)
        assert "no server" not in text
        lines = text.splitlines()
        sim = next(i for i, line in enumerate(lines) if line.startswith("sim "))
        packed = [line for line in lines[sim : sim + 4] if "TP" in line]
        assert "● ready dflash TP1" in packed[0] and "[6] :31001" in packed[0]
        assert "● ready ddtree-16 TP1" in packed[1] and "[5] :31002" in packed[1]
        assert "… starting ddtree-16 TP4" in packed[2] and "[0,1,2,3] :31003" in packed[2]
        assert any(line.startswith("h100 ● ready ar TP8") for line in lines)
        for gid in ("sim.dflash.tp1", "sim.ddtree-16.tp1", "sim.ddtree-16.tp4", "h100.ar.tp8"):
            assert tree_label(app, NodeRef("group", gid)).startswith("▶"), gid
        assert tree_label(app, NodeRef("group", "sim.ar.tp1")).startswith("✓")
        assert "[6]" in tree_label(app, NodeRef("group", "sim.dflash.tp1"))  # where it ran
        running = [c for c in app.progress.cells.values() if c.status == "running"]
        ddtree = next(c for c in running if c.group == "sim.ddtree-16.tp1")
        control.publish(CellFinished(cell_id=ddtree.id, group=ddtree.group, requests=8))
        control.publish(GroupFinished(group="sim.ddtree-16.tp1", status="done"))
        await settle(pilot, app)
        text = health(app)
        assert "ddtree-16 TP1" not in text and "dflash TP1" in text and "ddtree-16 TP4" in text
        assert not tree_label(app, NodeRef("group", "sim.ddtree-16.tp1")).startswith("▶")
        control.publish(ServiceFailed(group="sim.ddtree-16.tp4", reason="no health in 900 s"))
        await settle(pilot, app)
        text = health(app)
        assert "✗ failed ddtree-16 TP4" in text and "unhealthy: no health in 900 s" in text


async def test_a_group_waiting_for_its_gpus_says_what_holds_them() -> None:
    app, control = packed_app(size=(160, 48))
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, app)
        held = "GPU 0: 20480/97887 MiB used, held by pid 4242 (python3, 20470 MiB)"
        control.publish(
            GpusWaiting(
                host="sim", group="sim.ddtree-16.tp4", gpu_ids=[0, 1, 2, 3], held=[held],
                waited_s=2.0,
            )
        )  # fmt: skip
        await settle(pilot, app)
        assert "waiting 0:0" in health(app) and held in health(app)
        control.publish(ServiceReady(group="sim.ddtree-16.tp4", startup_s=3.0))
        await settle(pilot, app)
        assert held not in health(app)


async def test_packed_groups_stay_readable_at_80x24() -> None:
    app, _ = packed_app()
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot, app)
        pane = app.main.query_one("#health")
        width = pane.content_region.width
        lines = health(app).splitlines()
        servers = [line for line in lines if " TP" in line]
        assert len(servers) == 4, lines
        for line in servers:  # every one whole: its ETA readable, nothing cut
            assert "ETA" in line and not line.endswith("…") and len(line) <= width, line
        assert lines.index(servers[-1]) < pane.content_region.height  # all in view


async def test_a_finished_cell_names_its_figures_as_the_report_does() -> None:
    """Names from bench/figures.py, the older end-to-end column read too; a lagging client
    is a warning line of its own, not a figure squeezed into the column."""
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        figures = {
            "throughput_tok_s": 120.0,
            "decode_tok_s_total": 137.5,
            "decode_tok_s_p50": 140.0,
            "decode_zero_window": 2,
            "e2e_tok_s_p50": 130.0,
            "ttft_s_p50": 0.05,
            "itl_token_s_p50": 0.0071,
            "accept_length_weighted": 5.25,
            "accept_length_mean": 5.5,
            "client_lagged": True,
            "client_lag_p99_s": 0.012,
            "host_load_per_cpu": 1.25,
            "host_cpu_busy": 0.8,
        }
        control.publish(
            CellFinished(
                cell_id="ddt1agent", group="sim.ddtree-16.tp1", requests=8, figures=figures
            )
        )
        # The GPU conditions come with the cell's energy, a little after it finished.
        gpu = {"gpu_sm_clock_mhz": 1357.5, "gpu_power_limit_w": 700.0, "gpu_throttle_mask": 4}
        control.publish(CellEnergy(cell_id="ddt1agent", group="sim.ddtree-16.tp1", figures=gpu))
        await settle(pilot, app)
        select(app, NodeRef("cell", "ddt1agent"))
        await settle(pilot, app)
        text = str(app.main.query_one("#detail-text").render())
        for line in (
            "cell throughput 120.0 tok/s",
            "decode tok/s 137.5\n",  # token-weighted: the cell's figure
            "decode tok/s per request p50 140.0",
            "decode tok/s leaves out 2 with a zero decode window (all in one read)",
            "end-to-end tok/s p50 130.0",
            "TTFT p50 50 ms",
            "ITL per token p50 7.1 ms",
            "accept length 5.25",  # the engine's own definition, what its counters give
            "accept length request mean 5.50",
            "⚠ CLIENT LAGGED: loop lag p99 12.0 ms: timings suspect",
            "conditions host load 1.25/CPU · CPU busy 80% · SM 1358 MHz · limit 700 W · "
            "THROTTLED: power cap",
        ):
            assert line in text, (line, text)
        assert "output p50" not in text and "accept len " not in text


async def test_groups_as_slurm_jobs_say_their_node_and_the_jobs_still_queued() -> None:
    """On a Slurm host a running group's line says the node its job got, and the jobs
    still waiting in the queue are counted with squeue's reason."""
    events = sample_campaign()
    events += [
        BatchJobChanged(
            group="sim.ddtree-16.tp1", host="sim", job_id="4711", state="RUNNING", node="node07"
        ),
        BatchJobChanged(
            group="sim.ddtree-16.tp4",
            host="sim",
            job_id="4712",
            state="PENDING",
            reason="Resources",
        ),
    ]
    app, _ = make_app(control=ScriptedControl(events))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        app._paint()
        lines = health(app).splitlines()
        assert "[0] node07:30000" in lines[0], lines
        assert "· 1 job queued (Resources)" in health(app), lines


# --- honest end states -------------------------------------------------------------------


async def test_finished_with_failures_is_not_a_green_finish() -> None:
    app, _ = make_app(finish=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        from specbench_tui.tui.header import campaign_state
        from specbench_tui.tui.look import palette_for

        assert "FINISHED · 1 FAILED" in header(app)
        assert campaign_state(app.progress) == ("finished · 1 failed", "error")
        text = app.main.query_one(CampaignHeader)._shown
        assert text is not None
        pal = palette_for(app)

        def colours_at(i: int) -> set[Any]:
            return {sp.style.color for sp in text.spans if sp.start <= i < sp.end}  # type: ignore[union-attr]

        assert colours_at(text.plain.index("FINISHED")) == {pal.error.color}
        bar = text.plain.index("█")
        bar_colours = set().union(*(colours_at(i) for i in range(bar, bar + 16)))
        assert pal.error.color in bar_colours  # the failed cell is in the bar, in red


async def test_a_failed_check_is_distinct_from_done() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        control.publish(
            CheckVerdict(
                check="greedy",
                config="dflash",
                host="sim",
                tp=1,
                status="fail",
                text="greedy outputs differ at token 12",
            )
        )
        await settle(pilot, app, 1.0)
        tree = app.main.query_one(PlanTree)
        label = str(tree.nodes_by_ref[NodeRef("cell", "dfl1co64")].label)
        assert label.startswith("⚠") and "failed check" in label
        assert "⚠3" in header(app)  # dflash's three finished cells
        select(app, NodeRef("cell", "dfl1co64"))
        await settle(pilot, app)
        detail = str(app.main.query_one("#detail-text").render())
        assert "FAILED CHECK" in detail and "token 12" in detail
        assert any("greedy check failed" in n for n in notes(app))


# --- reruns: asked first, and after the end -----------------------------------------------


async def test_rerun_of_a_group_with_finished_cells_asks_first() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        select(app, NodeRef("group", "sim.ar.tp1"))
        await settle(pilot, app)
        await pilot.press("r")
        assert isinstance(app.screen, ConfirmScreen)
        assert "All 4 of its cells have finished" in app.screen.question
        await pilot.press("n")
        await settle(pilot, app)
        assert control.commands == []
        await pilot.press("r", "y")
        await settle(pilot, app)
        assert [(c.action, c.target) for c in control.commands] == [("rerun", "sim.ar.tp1")]
        select(app, NodeRef("cell", "dfl1conc4"))  # one cell: no question
        await settle(pilot, app)
        await pilot.press("r")
        await settle(pilot, app)
        assert not isinstance(app.screen, ConfirmScreen)
        assert control.commands[-1].target == "dfl1conc4"


class FakeRelaunch:
    """Stands for the in-process relaunch: records what was asked and hands over a new run
    (a scripted control whose ``start_engine`` publishes the new run's events)."""

    def __init__(self, events: list[Any]) -> None:
        self.events = events
        self.asked: list[tuple[tuple[str, ...], bool]] = []
        self.controls: list[ScriptedControl] = []

    @property
    def results_root(self) -> Path:
        return Path("results/demo")

    async def start(self, *, rerun: Sequence[str] = (), rerun_failed: bool = False) -> Any:
        self.asked.append((tuple(rerun), rerun_failed))

        async def run(control: ScriptedControl) -> int:
            control.publish(CellFinished(cell_id="dfl1conc4", group="sim.dflash.tp1", attempt=2))
            control.publish(CampaignFinished(campaign="demo", finished=16, exit_code=0))
            control.close()
            return 0

        control = ScriptedControl(list(self.events), engine=run)
        self.controls.append(control)
        return control


async def test_after_the_end_r_R_and_g_start_the_engine_again() -> None:
    relaunch = FakeRelaunch(sample_campaign(finish=True))
    app, _ = make_app(finish=True, relaunch=relaunch)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("R")
        for _ in range(50):
            await pilot.pause(0.05)
            if app.progress.finished and app.progress.counts.failed == 0:
                break
        assert relaunch.asked == [((), True)]
        assert app.control is relaunch.controls[0]
        assert app.progress.cells["dfl1conc4"].status == "done"
        assert "FINISHED" in header(app) and "FAILED" not in header(app)
        select(app, NodeRef("group", "sim.ar.tp1"))
        await settle(pilot, app)
        await pilot.press("r")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await pilot.pause(0.3)
        assert relaunch.asked[-1] == (("ar1co64", "ar1ma64", "ar1agent", "ar1conc4"), False)
        await pilot.press("g")  # its group has no failed cell now
        await settle(pilot, app)
        assert len(relaunch.asked) == 2
        assert any("no failed cells to retry" in n for n in notes(app))


async def test_after_the_end_without_a_relaunch_the_keys_say_how() -> None:
    app, control = make_app(finish=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("R")
        await settle(pilot, app)
        assert control.commands == []
        said = "\n".join(notes(app))
        assert "--rerun-failed" in said and "--results results" in said


# --- attach ------------------------------------------------------------------------------


def finished_results(tmp_path: Path, *, finished: bool = True) -> Path:
    from tests.support.results_builder import ResultsBuilder

    b = ResultsBuilder(tmp_path / "c")
    b.cell("a1", "ar", 1, "single", "single")
    b.cell("a2", "ar", 1, "single", "single", max_tokens=128)
    b.finished("a1", [{"prompt_id": "p0", "output_tok_s": 40.0}])
    b.failed("a2", "server returned 500")
    return b.write(finished=finished)


async def test_attach_to_an_ended_campaign_opens_it_read_only(tmp_path: Path) -> None:
    from specbench_tui.engine.control_socket import attach_control

    root = finished_results(tmp_path)
    control = attach_control(root)
    assert isinstance(control, ReplayControl)
    app = ConsoleApp(control, results_source=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        assert len(app.progress.cells) == 2
        assert "FINISHED · 1 FAILED" in header(app) and "read-only" in header(app)
        assert any("opened read-only" in n for n in notes(app))
        assert "no stored log" in app.main.query_one("#log", Log).lines[0]
        await pilot.press("R")
        await settle(pilot, app)
        assert any(f"--results {tmp_path}" in n for n in notes(app))
        await pilot.press("q")  # nothing runs: leaving asks nothing
        await pilot.pause()
    assert app.return_value == app.progress.exit_code  # the status the log recorded
    reply = await control.send(Command("pause"))
    assert not reply.ok and "read-only" in reply.text


async def test_attach_to_an_interrupted_campaign_says_so(tmp_path: Path) -> None:
    import socket

    from specbench_tui.engine.control_socket import attach_control

    root = finished_results(tmp_path, finished=False)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(ResultsLayout(root).control_socket))
    stale.close()  # the process died and left its socket behind
    control = attach_control(root)
    assert isinstance(control, ReplayControl) and "interrupted" in control.note
    app = ConsoleApp(control, results_source=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        assert "INTERRUPTED" in header(app)


# --- notifications -----------------------------------------------------------------------


async def test_a_burst_of_failures_is_one_counted_toast() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        app.clear_notifications()
        for cid in ("ddt1agent", "ddt1conc4", "ddt4co64", "ddt4ma64", "ddt4agent"):
            control.publish(CellFailed(cell_id=cid, group="sim.ddtree-16.tp1", reason="boom"))
        control.publish(Notice(level="warning", text="sim.ddtree-16.tp1: server died"))
        await pilot.pause(1.5)
        shown = notes(app)
        assert len(shown) == 1, shown
        assert "5 cells failed · 1 warning" in shown[0] and "… and 4 more" in shown[0]


async def test_each_answer_is_shown_once() -> None:
    control = ScriptedControl(sample_campaign())  # answers come back as notices too
    app, _ = make_app(control=control)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        app.clear_notifications()
        await pilot.press("p")
        await pilot.pause(1.5)
        shown = [n for n in notes(app) if "paused" in n]
        assert len(shown) == 1, notes(app)


async def test_events_are_applied_while_a_dialog_is_open() -> None:
    app, control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("question_mark")
        control.publish(CellFinished(cell_id="ddt1agent", group="sim.ddtree-16.tp1"))
        await pilot.pause(0.3)
        await pilot.press("escape")
        await settle(pilot, app)
        assert app.progress.cells["ddt1agent"].status == "done"
        label = str(app.main.query_one(PlanTree).nodes_by_ref[NodeRef("cell", "ddt1agent")].label)
        assert label.startswith("✓")


# --- leaving -----------------------------------------------------------------------------


async def test_ctrl_c_asks_and_a_second_ctrl_c_leaves() -> None:
    app, _control = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+c")
        assert isinstance(app.screen, ConfirmScreen) and app.screen.purpose == "quit"
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert app.return_value == 130


async def test_palette_quit_asks_too() -> None:
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert "Quit" not in titles  # Textual's own quits at once; the console's asks
        assert "request_quit" in {action for _, _, action in app.palette_commands()}
        await app.action_quit()  # anything that reaches Textual's quit asks too
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        assert not isinstance(app.screen, ConfirmScreen)


async def test_the_quit_question_is_not_cut_at_120x40() -> None:
    app, _ = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("q")
        await pilot.pause(0.2)
        label = app.screen.query_one("Label")
        assert label.size.height >= 3  # wrapped over lines, not one cut line
        assert label.size.width <= app.screen.query_one("Vertical").size.width


def test_exit_summary_says_counts_results_and_report(tmp_path: Path) -> None:
    from specbench_tui.results.progress import CampaignProgress
    from specbench_tui.tui.summary import exit_summary

    p = CampaignProgress()
    p.apply_all(sample_campaign(finish=True))
    (tmp_path / "report.md").write_text("r")
    lines = exit_summary(p, tmp_path, 1)
    assert lines[0] == "specbench-tui: demo finished: 15 done, 1 failed, 0 skipped of 16 (exit 1)"
    assert f"results  {tmp_path}" in lines[1] and f"report   {tmp_path}/report.md" in lines[2]
    running = CampaignProgress()
    running.apply_all(sample_campaign())
    lines = exit_summary(running, tmp_path, 130, detached=True)
    assert "still running" in lines[0] and any("--attach" in x for x in lines)
    # Every planned cell is in one count: the running one too (they add up to the total).
    c = running.counts
    assert c.running == 1
    said = re.search(
        r"(\d+) done, (\d+) failed, (\d+) skipped, (\d+) running, (\d+) to run of (\d+)", lines[0]
    )
    assert said, lines[0]
    *parts, total = (int(x) for x in said.groups())
    assert sum(parts) == total == c.total
    cut = exit_summary(running, tmp_path, 130)
    assert ", 1 cut off, " in cut[0]


# --- 80x24 and screenshots ---------------------------------------------------------------


async def test_80x24_footer_keeps_help_and_quit_and_plots_are_readable() -> None:
    app, _ = make_app()
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot, app)
        keys = {k.key: k for k in app.main.query(FooterKey)}
        palette = keys["ctrl+p"].region  # docked at the right: nothing may run under it
        for key in ("question_mark", "q"):
            region = keys[key].region
            assert region.width > 0 and region.right <= palette.x, key
        await pilot.press("4")
        shown: list[LivePlot] = []
        for _ in range(40):  # until the layout has settled (a loaded machine is slow)
            await pilot.pause(0.05)
            shown = [p for p in app.main.query(LivePlot) if p.display]
            if shown and all(p.size.height >= 8 for p in shown):
                break
        assert [p.key for p in shown] == ["tok_s", "accept"]
        assert all(p.size.height >= 8 for p in shown)


async def test_screenshot_key_saves_an_svg_into_the_results(tmp_path: Path) -> None:
    root = finished_results(tmp_path)
    app = ConsoleApp(ReplayControl(ResultsLayout(root)), results_source=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("ctrl+s")
        await pilot.pause(0.3)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Screenshot" not in titles  # Textual's saves to ~/Downloads; ours is listed
        assert "save_screenshot" in {action for _, _, action in app.palette_commands()}
    shots = list((root / "screenshots").glob("*.svg"))
    assert len(shots) == 1 and "<svg" in shots[0].read_text()[:500]


def test_attach_to_a_campaign_still_starting_says_try_again(tmp_path: Path) -> None:
    """Between opening its results (the lock) and serving its socket a campaign cannot be
    attached to yet: the message says so instead of calling it ended."""
    import fcntl
    import os

    import pytest

    from specbench_tui.engine.control_socket import attach_control
    from specbench_tui.errors import InputError

    root = finished_results(tmp_path, finished=False)
    layout = ResultsLayout(root)
    fd = os.open(layout.lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"4242")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(InputError, match=r"pid 4242\) is starting.*try again"):
            attach_control(root)
    finally:
        os.close(fd)

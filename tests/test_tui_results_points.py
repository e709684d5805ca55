"""The results table keeps prompt sets and lengths apart: one row per config x prompt set x
length (what the report pools hid: a 2x spread between two prompt sets behind one figure),
folding to the pooled row on demand (v); a row whose planned cells are not all done says
done/planned and is never starred."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable

from specbench_tui.tui.app import ConsoleApp
from specbench_tui.tui.results_pane import ResultsPane
from specbench_tui.tui.results_source import comparison
from tests.support.results_builder import ResultsBuilder
from tests.support.scripted import ScriptedControl, sample_campaign

SPEEDS = {  # decode tok/s per repeat: ddtree is 5x on code, 2.5x on translate
    ("ar", "code"): [40.0, 40.5, 39.5],
    ("ar", "translate"): [40.0, 40.5, 39.5],
    ("ddtree", "code"): [200.0, 201.0, 199.0],
    ("ddtree", "translate"): [100.0, 100.5, 99.5],
    ("dflash", "code"): [80.0, 80.5, 79.5],
    ("dflash", "translate"): [60.0, 60.5, 59.5],
}


def _rows(speeds: list[float]) -> list[dict[str, Any]]:
    return [
        {
            "prompt_id": "p0",
            "repeat": r,
            "output_tokens": 65,
            "ttft_s": 0.05,
            "e2e_s": 0.05 + 64 / v,
        }
        for r, v in enumerate(speeds)
    ]


def results(tmp_path: Path, *, ddtree_long_done: bool) -> Path:
    b = ResultsBuilder(tmp_path / "c")
    for (cfg, ps), speeds in SPEEDS.items():
        cid = f"{cfg}-{ps}"
        b.cell(cid, cfg, 1, "single", "single", prompt_set=ps, repeats=3)
        b.finished(cid, _rows(speeds))
    # a third point of ddtree's and the baseline's: planned, done only when told
    for cfg in ("ar", "ddtree"):
        b.cell(f"{cfg}-long", cfg, 1, "single", "single", prompt_set="code", max_tokens=256)
        if ddtree_long_done:
            b.finished(f"{cfg}-long", _rows([40.0, 40.5, 39.5] if cfg == "ar" else [90.0] * 3))
    return b.write(plan='[campaign]\nname = "c"\nbaseline = "ar"\n')


def test_rows_per_point_and_a_partial_pooled_row_is_never_best(tmp_path: Path) -> None:
    frame = comparison(results(tmp_path, ddtree_long_done=False))
    point = {
        (r["config"], r["prompt_set"], r["max_tokens"]): r
        for r in frame.to_dicts()
        if not r["pooled"]
    }
    assert abs(point[("ddtree", "code", 64)]["speedup"] - 5.0) < 0.05
    assert abs(point[("ddtree", "translate", 64)]["speedup"] - 2.5) < 0.05
    assert point[("ddtree", "code", 64)]["best"] and point[("ddtree", "translate", 64)]["best"]
    assert point[("ddtree", "code", 64)]["partial"] is None  # its one cell is done
    pooled = {r["config"]: r for r in frame.to_dicts() if r["pooled"]}
    assert pooled["ddtree"]["partial"] == "2/3" and pooled["ar"]["partial"] == "2/3"
    assert pooled["dflash"]["partial"] is None
    assert not pooled["ddtree"]["best"]  # fastest, but over the sets done so far only
    done = comparison(results(tmp_path / "2", ddtree_long_done=True))
    pooled = {r["config"]: r for r in done.to_dicts() if r["pooled"]}
    assert pooled["ddtree"]["partial"] is None and pooled["ddtree"]["best"]


@pytest.mark.console
async def test_the_pane_shows_points_and_folds_to_the_pooled_rows(tmp_path: Path) -> None:
    frame = comparison(results(tmp_path, ddtree_long_done=False))
    events = sample_campaign()
    app = ConsoleApp(ScriptedControl(events), clock=lambda: events[-1].ts, results_source=None)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        await pilot.press("6")
        pane = app.main.query_one(ResultsPane)
        pane.show(frame)
        await pilot.pause(0.1)
        table = app.main.query_one("#results-table", DataTable)
        assert table.row_count == 6  # 3 configs x 2 sets; the long point has no figures yet
        assert "per prompt/len (v)" in str(pane.border_title)
        shown = {(r["config"], r["prompt_set"], r["max_tokens"]) for r in pane.shown_rows}
        assert ("ddtree", "translate", 64) in shown and ("ddtree", "code", 256) not in shown
        table.focus()
        await pilot.press("v")
        assert pane.pooled and table.row_count == 3 and "pooled (v)" in str(pane.border_title)
        first = [str(table.get_row_at(i)[0]) for i in range(3)]
        assert any(c.strip().startswith("ddtree") and c.endswith("2/3") for c in first)
        assert not any(c.startswith("★") for c in first if c.endswith("2/3"))
        await pilot.press("v")
        assert not pane.pooled and table.row_count == 6

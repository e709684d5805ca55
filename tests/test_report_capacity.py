"""The report's capacity section: the capacity under the SLO per config x TP with its bracket,
the share meeting the SLO at each level with its interval, the crossover where a speculative
config stops being above the baseline, and a chart of the share against concurrency; in
report.md and in a report.pdf that compiles with no overfull box."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.report_pdf import check_pdf, overfull_boxes
from support.results_builder import ResultsBuilder

from specbench_tui.bench.figures import wilson_interval
from specbench_tui.report.build import build_report
from specbench_tui.report.render import render_report, tex_engine
from specbench_tui.report.sections.capacity import crossover

# The speculative config is ahead at low concurrency and falls behind from 16 clients.
AR = {1: 60.0, 4: 200.0, 8: 380.0, 16: 700.0, 32: 1200.0, 64: 1400.0}
SPEC = {1: 150.0, 4: 420.0, 8: 500.0, 16: 650.0, 32: 900.0, 48: 1000.0, 64: 1000.0}


def _search(levels: list[int], good: dict[int, int], tput: dict[int, float]) -> dict[str, Any]:
    n = 40
    ivs = [wilson_interval(good[lv], n) for lv in levels]
    passed = [lv for lv in levels if ivs[levels.index(lv)][0] >= 0.9]  # type: ignore[index]
    failed = [lv for lv in levels if lv not in passed]
    return {
        "max_concurrency_under_slo": max(passed) if passed else None,
        "capacity_pass_level": max(passed) if passed else None,
        "capacity_fail_level": min(failed) if failed else None,
        "capacity_note": "bracket closed",
        "capacity_levels": levels,
        "capacity_shares": [good[lv] / n for lv in levels],
        "capacity_share_lo": [iv[0] for iv in ivs],  # type: ignore[index]
        "capacity_share_hi": [iv[1] for iv in ivs],  # type: ignore[index]
        "capacity_goodput_req_s": [good[lv] / 10 for lv in levels],
        "capacity_throughput_tok_s": [tput[lv] for lv in levels],
        "capacity_decode_tok_s": [tput[lv] / lv for lv in levels],
        "slo_target": 0.9,
        "slo_limits": "TTFT <= 2s, TPOT <= 50ms",
    }


def _results(tmp_path: Path) -> Path:
    b = ResultsBuilder(tmp_path / "cap", campaign="cap")
    b.cell("c-ar", "ar", 4, "capacity", "capacity", levels=(1, 64), max_points=8)
    b.cell("c-sp", "dflash", 4, "capacity", "capacity", levels=(1, 64), max_points=8)
    ar_good = {1: 40, 64: 10, 32: 20, 16: 40, 24: 30, 20: 39, 18: 40, 19: 40}
    sp_good = {1: 40, 64: 0, 32: 0, 16: 30, 8: 40, 12: 40, 14: 39, 13: 40}
    ar_t = {**AR, 24: 900.0, 20: 800.0, 18: 750.0, 19: 780.0}
    sp_t = {**SPEC, 12: 600.0, 14: 630.0, 13: 610.0}
    b.finished("c-ar", [{}] * 3, figures=_search([1, 64, 32, 16, 24, 20, 18, 19], ar_good, ar_t))
    b.finished("c-sp", [{}] * 3, figures=_search([1, 64, 32, 16, 8, 12, 14, 13], sp_good, sp_t))
    # A concurrency level of a plan with [slo]: its share and goodput, in a table of its own.
    b.cell("k-ar", "ar", 4, "sweep", "concurrency", concurrency=8, requests=40)
    slo = {"slo_share": 0.95, "slo_share_lo": 0.835, "slo_share_hi": 0.986, "goodput_req_s": 3.8}
    b.finished("k-ar", [{}] * 3, figures={**slo, "throughput_tok_s": 380.0, "slo_target": 0.9})
    return b.write(plan='[campaign]\nname = "cap"\nbaseline = "ar"\n')


def test_crossover_is_the_first_common_level_not_above() -> None:
    assert crossover(AR, SPEC) == (8, 16)
    assert crossover(AR, {lv: v * 2 for lv, v in AR.items()}) is None
    assert crossover(AR, {1: 10.0}) == (None, 1)
    assert crossover(AR, {3: 10.0}) is None  # no common level


def test_the_capacity_section_in_markdown(tmp_path: Path) -> None:
    root = _results(tmp_path)
    report = build_report(root)
    sec = next(s for s in report.sections if s.title == "Capacity under the SLO")
    cap, levels = sec.tables()[:2]
    rows = {r[0].text: [c.text for c in r] for r in cap.rows}
    assert rows["ar"][1:4] == ["19", "19 .. 20", "8"]
    assert rows["dflash"][1:4] == ["13", "13 .. 14", "8"]
    assert rows["dflash"][4] == "falls to it between 1 and 16"  # the levels both tried
    assert any("dflash's capacity (13) is not above the baseline's (19)" in n for n in cap.notes)
    shares = [(r[0].text, r[1].text, r[2].text) for r in levels.rows]
    assert ("ar", "1", "100% [91%–100%]") in shares
    sweep = next(t for t in sec.tables() if "sweep" in t.caption)
    assert [c.text for c in sweep.rows[0]][:4] == ["ar", "8", "95% [84%–99%]", "3.800"]
    chart = sec.charts()[0]
    assert [s.name for s in chart.series] == ["ar", "dflash"]
    assert chart.hline == 0.9
    pts = chart.series[1].points
    assert [p.x for p in pts] == [1, 8, 12, 13, 14, 16, 32, 64]
    assert pts[0].lo == pytest.approx(wilson_interval(40, 40)[0])  # type: ignore[index]


@pytest.mark.system
def test_the_capacity_section_compiles_and_fits(tmp_path: Path) -> None:
    if tex_engine() is None:
        pytest.skip("no TeX engine")
    root = _results(tmp_path)
    render_report(root)
    md = (root / "report.md").read_text()
    assert "Capacity under the SLO, capacity, TP 4 on sim" in md
    text = check_pdf(root, 2)
    assert "Share meeting the SLO, capacity, TP 4 on sim" in text.replace("\n", " ")
    assert overfull_boxes(root / "report.tex", tmp_path / "tex") == []

"""The report's forced-acceptance section: the system-cost curve (speed-up against forced
accept length), the real accept length placed on it, the predicted speed-up beside the
measured one with both intervals, the decomposition table; forced rows in no other table; and
all of it in report.md and a report.pdf with no overfull box."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.results_builder import ResultsBuilder, request_row

from specbench_tui.report.build import build_report
from specbench_tui.report.frames import cell_figures, comparison
from specbench_tui.report.inputs import load_inputs
from specbench_tui.report.render import render_texts
from specbench_tui.report.sections.forced import interpolate, real_config

PLAN = '[campaign]\nname = "syn"\nbaseline = "ar"\n'
# Decode tok/s per config (repeat 0, 1, 2 go +-2%) and accept length: AR 100, the forced
# points 2.0 -> 180 and 3.0 -> 250, real acceptance 2.5 -> 200 (the curve predicts 215).
CONFIGS = {"ar": (100.0, None), "eagle": (200.0, 2.5), "eagle-fa2": (180.0, 2.0)}
CONFIGS["eagle-fa3"] = (250.0, 3.0)
FORCED = {"eagle-fa2": 2.0, "eagle-fa3": 3.0}


def _results(tmp_path: Path) -> Path:
    b = ResultsBuilder(tmp_path / "syn", campaign="syn")
    for config, (rate, accept) in CONFIGS.items():
        kw = {"forced_accept": FORCED[config]} if config in FORCED else {}
        cid = f"c-{config}"
        b.cell(cid, config, 1, "single", "single", repeats=3, **kw)
        rows = []
        for rep, k in enumerate((0.98, 1.0, 1.02)):
            decode_s = 59 / (rate * k)
            rows.append(
                request_row(
                    cell_id=cid,
                    group=f"sim.{config}.tp1",
                    config=config,
                    repeat=rep,
                    prompt_id="p1",
                    output_tokens=60,
                    ttft_s=0.05,
                    e2e_s=0.05 + decode_s,
                    decode_tok_s=59 / decode_s,
                    spec_verify_ct=round(60 / accept) if accept else None,
                    accept_length=accept,
                )
            )
        b.rows.extend(rows)
        b.finished(cid, rows)
    b.verdict("eagle-fa2", 1, "pass", "ok", check="forced_accept")
    b.verdict("eagle-fa3", 1, "fail", "measured 2.1 against 3", check="forced_accept")
    return b.write(plan=PLAN)


def test_interpolation_and_names() -> None:
    curve = [
        {"forced": 2.0, "speedup": 1.8, "speedup_lo": 1.7, "speedup_hi": 1.9},
        {"forced": 3.0, "speedup": 2.5, "speedup_lo": 2.3, "speedup_hi": None},
    ]
    p = interpolate(curve, 2.25)
    assert p is not None
    assert p["speedup"] == pytest.approx(1.975) and p["hi"] is None
    assert p["lo"] == pytest.approx(0.75 * 1.7 + 0.25 * 2.3)
    assert interpolate(curve, 3.0)["speedup"] == pytest.approx(2.5)  # type: ignore[index]
    assert interpolate(curve, 3.5) is None and interpolate(curve[:1], 2.0) is not None
    assert real_config("ddtree-16-fa2.5", 2.5) == "ddtree-16"


def test_forced_rows_are_in_no_other_frame(tmp_path: Path) -> None:
    inp = load_inputs(_results(tmp_path))
    assert inp.forced == FORCED
    assert set(comparison(inp)["config"].to_list()) == {"ar", "eagle"}
    assert set(cell_figures(inp)["config"].to_list()) == {"ar", "eagle"}
    assert set(inp.forced_requests["config"].to_list()) == set(FORCED)  # type: ignore[index]


def test_the_section_places_real_acceptance_on_the_curve(tmp_path: Path) -> None:
    report = build_report(_results(tmp_path))
    (sec,) = [s for s in report.sections if s.title.startswith("Forced acceptance")]
    checks, curve, decomposition = sec.tables()
    assert [[c.text for c in r][3:] for r in checks.rows] == [
        ["2.00", "2.00", "pass"],
        ["3.00", "3.00", "fail"],
    ]
    assert [r["acceptance"] for r in curve.csv or []] == ["forced", "forced", "real"]
    (d,) = decomposition.csv or []
    assert d["accept_length"] == pytest.approx(2.5)
    assert d["predicted_speedup"] == pytest.approx(2.15, rel=1e-3)
    assert d["speedup"] == pytest.approx(2.0, rel=1e-3)
    assert d["measured_over_predicted"] == pytest.approx(2.0 / 2.15, rel=1e-3)
    assert d["step_cost"] == pytest.approx(1.25, rel=1e-3)
    # Both intervals: the measured one from the repeats, the predicted one from the curve's.
    assert d["speedup_lo"] < 2.0 < d["speedup_hi"]
    assert d["predicted_lo"] < 2.15 < d["predicted_hi"]
    (chart,) = sec.charts()
    assert [len(s.points) for s in chart.series] == [2, 1]
    md, tex = render_texts(report)
    assert "Greedy equivalence is not judged on forced cells" in md
    assert "Drafter quality against verify cost" in md and "2.15x \\[2.05x" in md
    assert "section{Forced acceptance: where the speed-{}up" in tex and "2.15x [2.05x" in tex


@pytest.mark.system
def test_the_forced_section_renders_in_the_pdf(tmp_path: Path) -> None:
    from support.report_pdf import check_pdf, overfull_boxes

    from specbench_tui.report.render import render_report

    root = _results(tmp_path)
    render_report(root)
    text = check_pdf(root, 2)
    assert "Drafter quality against verify cost" in text
    assert overfull_boxes(root / "report.tex", tmp_path / "tex") == []


def test_forced_cells_that_never_ran_are_said(tmp_path: Path) -> None:
    b = ResultsBuilder(tmp_path / "syn", campaign="syn")
    b.cell("c-ar", "ar", 1, "single", "single")
    b.cell("c-fa", "eagle-fa2", 1, "single", "single", forced_accept=2.0)
    b.finished("c-ar", [request_row(cell_id="c-ar", group="sim.ar.tp1", config="ar")])
    b.failed("c-fa", "server did not start: Synthetic acceptance not supported with CPU sampling")
    md, _ = render_texts(build_report(b.write(plan=PLAN)))
    assert "No forced-acceptance cell measured anything (eagle-fa2)" in md
    assert "eagle-fa2: server did not start: Synthetic acceptance not supported" in md

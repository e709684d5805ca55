"""The table a user deploys from (report/sections/deploy.py): per TP and concurrency level,
the config to run, "cannot tell", or "speculation off"; Table 1 when the plan sweeps levels."""

from __future__ import annotations

from pathlib import Path

from specbench_tui.report.build import build_report
from specbench_tui.report.inputs import load_inputs
from specbench_tui.report.render import render_texts
from specbench_tui.report.sections import deploy
from tests.support.results_builder import ResultsBuilder

PLAN = '[campaign]\nname = "syn"\nbaseline = "ar"\n'


def _sweep(tmp_path: Path, runs: int, levels: dict[int, float]) -> Path:
    """ar and ngram at each level (``levels``: level -> ngram's e2e over ar's 2 s per
    request), ``runs`` cells per level: n-gram halves the time at one client and loses at
    eight, as speculation does once the batch fills."""
    b = ResultsBuilder(tmp_path / "syn")
    for level, ngram_e2e in levels.items():
        for cfg, e2e in (("ar", 2.0), ("ngram", ngram_e2e)):
            for run in range(1, runs + 1):
                cid = f"{cfg}-c{level}-r{run}"
                b.cell(cid, cfg, 1, "load", "concurrency", concurrency=level, run=run)
                rows = [
                    {
                        "prompt_id": f"p{i}",
                        "repeat": 0,
                        "e2e_s": e2e + 0.01 * i + 0.02 * run,
                        **({"spec_verify_ct": 20} if cfg == "ngram" else {}),
                    }
                    for i in range(level)
                ]
                b.finished(cid, rows)
    return b.write(plan=PLAN)


def test_each_level_gets_its_own_answer_and_the_table_comes_first(tmp_path: Path) -> None:
    root = _sweep(tmp_path, 3, {1: 1.0, 8: 2.6})
    t = deploy.table(load_inputs(root))
    assert t is not None
    rows = [[c.text for c in r] for r in t.rows]
    assert [r[2] for r in rows] == ["1", "8"]
    assert rows[0][3] == "ngram" and rows[0][5].startswith("2.01x [")
    assert "told apart from the runner-up (n=3)" in rows[0][-1]
    assert rows[1][3] == deploy.OFF and "no config decoded faster" in rows[1][-1]
    md, _ = render_texts(build_report(root))
    assert "**Table 1: What to deploy per TP size and concurrency level" in md
    assert "**Table 2: The fastest config under load" in md


def test_one_cell_per_level_cannot_tell(tmp_path: Path) -> None:
    root = _sweep(tmp_path, 1, {1: 1.0, 4: 1.2})
    t = deploy.table(load_inputs(root))
    assert t is not None
    for r in t.rows:
        assert r[3].text == deploy.CANNOT_TELL
        assert "n=1 gives no interval" in r[-1].text


def test_no_sweep_no_deploy_table(tmp_path: Path) -> None:
    root = _sweep(tmp_path, 3, {4: 1.0})
    assert deploy.table(load_inputs(root)) is None

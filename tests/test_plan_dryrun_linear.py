"""The dry run's JSON costs what its text costs: each cell is visited a fixed number of times
whatever the number of groups (it once counted each group's cells by a pass over every cell:
54,000 groups ran past ten minutes where the text took half a minute)."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from contextlib import redirect_stdout
from dataclasses import replace
from pathlib import Path

import pytest

from specbench_tui.cli import main
from specbench_tui.plan.loader import load_plan
from specbench_tui.plan.review import Review, render_json, review
from specbench_tui.results.cells import Cell

PLAN = """\
[campaign]
name = "big"
baseline = "ar"

[hosts.gpu]
ssh = "root@gpu-host"
gpus = 8

[server]
model = "/dev/shm/model"

[configs.ar]

[configs.tree]
params = {{ a = [{a}], b = [{b}] }}
args = ["--x", "{{a}}", "--y", "{{b}}"]

[matrix]
configs = ["ar", "tree"]
tp = [1]

[workloads.single]
kind = "single"
prompts = ["code"]
max_tokens = [64, 128]
samples = 2
"""


def _plan(tmp_path: Path, a: int, b: int) -> Path:
    path = tmp_path / "big.toml"
    many = lambda n: ", ".join(map(str, range(n)))  # noqa: E731
    path.write_text(PLAN.format(a=many(a), b=many(b)))
    return path


class _Counted(list[Cell]):
    """The expansion's cells, counting every pass over them."""

    passes = 0

    def __iter__(self) -> Iterator[Cell]:
        type(self).passes += 1
        return super().__iter__()


def _passes(r: Review) -> int:
    _Counted.passes = 0
    cells = _Counted(r.expansion.cells)
    render_json(replace(r, expansion=replace(r.expansion, cells=cells)))
    return _Counted.passes


@pytest.mark.parametrize("only", [None, "*tree-1-*"])
def test_the_json_passes_over_the_cells_a_fixed_number_of_times(
    tmp_path: Path, only: str | None
) -> None:
    plan = load_plan(_plan(tmp_path, 20, 10))
    select = (lambda c: "tree-1-" in c.name) if only else None
    small = review(plan, tmp_path / "res", select=select, only=only or "")
    assert len(small.expansion.groups) == 201
    plan = load_plan(_plan(tmp_path, 40, 20))
    big = review(plan, tmp_path / "res", select=select, only=only or "")
    assert _passes(big) == _passes(small) < 10


@pytest.mark.timing
def test_an_18k_group_json_dry_run_within_twice_the_text(tmp_path: Path) -> None:
    # 18,001 groups, 36,002 cells: a third of the plan where the quadratic count ran past ten
    # minutes against the text's half minute, so about 7x the text here; bench/dryrun_bench.py
    # times the 54,001 groups themselves.
    path = _plan(tmp_path, 180, 100)
    took = {}
    for mode in ([], ["--json"]):
        out = io.StringIO()
        t0 = time.perf_counter()
        with redirect_stdout(out):
            assert main([str(path), "--dry-run", *mode]) == 0
        took[bool(mode)] = time.perf_counter() - t0
        assert len(out.getvalue()) > 500_000
    assert took[True] <= 2 * took[False], took

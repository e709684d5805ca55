"""check_plan says a plan's problems table by table, in one fixed order: the loader shows the
first of them (and counts the rest), so which one a user reads first is part of the contract.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from specbench_tui.plan.document import Plan
from specbench_tui.plan.model import PlanSpec
from specbench_tui.plan.validate import check_plan
from tests.conftest import MINIMAL_PLAN


def _paths(text: str, tmp_path: Path) -> list[tuple[str | int, ...]]:
    path = tmp_path / "plan.toml"
    path.write_text(text.replace("{port}", "8000"))
    spec = PlanSpec.model_validate(tomllib.loads(path.read_text()))
    return [e.key_path for e in check_plan(Plan(spec=spec, path=path, text=path.read_text()))]


def _edit(*pairs: tuple[str, str]) -> str:
    text = MINIMAL_PLAN
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def test_tables_as_written_come_first_and_stop_the_rest(tmp_path: Path) -> None:
    text = _edit(
        ('[configs.ar]\nlabel = "AR"', '[configs.ar]\nlabel = "AR"\nparams = { b = [] }'),
        ("gpus = 4", "gpus = 4\ngpu_ids = [0]"),
        ("[configs.dflash]", '[configs."d flash"]'),
        ('configs = ["ar", "dflash"]', 'configs = ["ar", "nope"]'),  # not reached
    )
    assert _paths(text, tmp_path) == [
        ("configs", "d flash"),  # names of every table
        ("hosts", "sim", "gpu_ids"),  # then hosts
        ("configs", "ar", "params", "b"),  # then the configs as written
    ]


def test_resolved_tables_follow_in_their_order(tmp_path: Path) -> None:
    text = _edit(
        ('baseline = "ar"', 'baseline = "other"'),
        ("[server]", '[logs]\nbroken = "("\n\n[server]\npython = "py\\nthon"'),
        ('label = "AR"', 'label = "AR"\nforced_accept = [2]'),
        ('configs = ["ar", "dflash"]', 'configs = ["ar", "dflash", "nope"]'),
        ("max_tokens = [32]", "max_tokens = [32]\ntp = [2]"),
    )
    assert _paths(text, tmp_path) == [
        ("matrix", "configs", 2),
        ("workloads", "single", "tp"),
        ("campaign", "baseline"),
        ("logs", "broken"),
        ("server", "python"),
        ("configs", "ar", "forced_accept"),
    ]

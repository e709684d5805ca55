"""``--version`` and ``--dry-run --only``: the selection a run would take, shown before it."""

from __future__ import annotations

import json

import pytest

from specbench_tui import __version__
from specbench_tui.cli import main
from tests.conftest import PLANS

DEMO = PLANS / "demo.toml"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"specbench-tui {__version__}"


def test_dry_run_only_marks_the_selection(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(DEMO), "--dry-run", "--only", "sim.dflash.tp1/single*"]) == 0
    out = capsys.readouterr().out
    assert "selects 4 of 64 cells (marked *) in 1 service group" in out
    marked = [line for line in out.splitlines() if line.lstrip("│ ").startswith("* ")]
    assert len(marked) == 4 and all("single/" in line for line in marked)


def test_dry_run_only_json_says_which_cells(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(DEMO), "--dry-run", "--json", "--only", "*agentic*"]) == 0
    doc = json.loads(capsys.readouterr().out)
    picked = [c for c in doc["cells"] if c["selected"]]
    assert len(picked) == 8 and {c["kind"] for c in picked} == {"agentic"}
    assert doc["selection"]["only"] == "*agentic*" and doc["selection"]["cells"] == 8
    assert 0 < doc["selection"]["estimate_s"] < doc["estimate_s"]


def test_dry_run_without_only_selects_everything(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(DEMO), "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["selection"] is None and all(c["selected"] for c in doc["cells"])


def test_dry_run_only_matching_nothing_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(DEMO), "--dry-run", "--only", "no-such-cell"]) == 2
    err = capsys.readouterr().err
    assert "matches no cell" in err and "Traceback" not in err

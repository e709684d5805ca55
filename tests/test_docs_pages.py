"""The documentation cannot rot: its generated parts are what the code generates now, every
plan in it is one the plan model takes, every shell block it marks runnable runs, every page is
in the site's nav, the floors it states are the ones the layer test enforces, and the README
stays short."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest
from conftest import PLANS, ROOT
from test_layers import FLOORS

from specbench_tui import docs_pages
from specbench_tui.cli import main
from specbench_tui.plan.loader import load_plan
from specbench_tui.plan.model import PlanSpec

DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = sorted(DOCS.rglob("*.md"))


def _toml_blocks(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every ```toml block of a page, dedented (a block inside a list item is
    indented)."""
    text = path.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, m.start()) + 1, textwrap.dedent(m[2]))
        for m in re.finditer(r"^( *)```toml\n(.*?)^\1```", text, re.M | re.S)
    ]


def _merged(base: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in part.items():
        old = out.get(key)
        out[key] = (
            _merged(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
        )
    return out


def test_every_generated_part_is_what_the_code_generates() -> None:
    stale = [
        str(p.relative_to(ROOT))
        for p in PAGES
        if docs_pages.render(p.read_text(encoding="utf-8")) != p.read_text(encoding="utf-8")
    ]
    assert stale == [], (
        "out of date with the code: "
        + ", ".join(stale)
        + "; run `python -m specbench_tui.docs_pages`"
    )


def test_every_generated_part_has_a_page() -> None:
    shown = {name for p in PAGES for name in docs_pages.blocks_in(p.read_text(encoding="utf-8"))}
    assert shown == set(docs_pages.BLOCKS)


@pytest.mark.parametrize(
    "page", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)).replace("/", "-")
)
def test_every_plan_snippet_is_one_the_model_takes(page: Path) -> None:
    """A snippet is a part of a plan: laid over the demo plan, the model accepts the whole."""
    demo = tomllib.loads((PLANS / "demo.toml").read_text(encoding="utf-8"))
    for line, block in _toml_blocks(page):
        try:
            PlanSpec.model_validate(_merged(demo, tomllib.loads(block)))
        except Exception as exc:  # the page and line say which snippet
            pytest.fail(f"{page.relative_to(ROOT)}:{line}: {exc}")


def test_the_readme_plan_loads_whole(tmp_path: Path) -> None:
    [(_, block)] = _toml_blocks(README)
    plan = tmp_path / "first.toml"
    plan.write_text(block, encoding="utf-8")
    spec = load_plan(plan).spec
    assert spec.campaign.name == "first"
    assert set(spec.matrix.configs) == {"ar", "ngram"}


def test_every_page_is_in_the_nav() -> None:
    nav = set(re.findall(r":\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M))
    assert nav == {str(p.relative_to(DOCS)) for p in PAGES}


def test_the_readme_stays_short() -> None:
    assert len(README.read_bytes()) <= 16_000


def test_the_architecture_page_states_the_floors_the_layer_test_enforces() -> None:
    text = (DOCS / "contributing" / "architecture.md").read_text(encoding="utf-8")
    stated = {
        name: int(floor)
        for floor, names in re.findall(r"^\| (\d+) \| (.*) \|$", text, re.M)
        for name in re.findall(r"`([a-z_]+)`", names)
    }
    assert stated == FLOORS


def _runnable(tier: str) -> list[tuple[str, str]]:
    """(where, command) of every line of the shell blocks the docs mark runnable in ``tier``
    (``<!-- runnable: TIER -->`` right above the block)."""
    out = []
    for page in [README, *PAGES]:
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(rf"^<!-- runnable: {tier} -->\n```sh\n(.*?)^```", text, re.M | re.S):
            line = text.count("\n", 0, m.start()) + 3
            for n, command in enumerate(m[1].splitlines()):
                if command.strip() and not command.startswith("#"):
                    out.append((f"{page.relative_to(ROOT)}:{line + n}", command))
    return out


def test_some_blocks_are_runnable() -> None:
    assert _runnable("unit") and _runnable("system")


@pytest.mark.parametrize(("where", "command"), _runnable("unit"))
def test_a_runnable_block_of_the_unit_tier_runs(
    where: str, command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The unit tier runs the tool in this process: a block of it holds only its calls."""
    argv = shlex.split(command)
    assert argv[0] == ".venv/bin/specbench-tui", f"{where}: not a call of the tool: {command}"
    monkeypatch.chdir(ROOT)
    assert main(argv[1:]) == 0, f"{where}: {command}: {capsys.readouterr().err}"


@pytest.mark.system
@pytest.mark.parametrize(("where", "command"), _runnable("system"))
def test_a_runnable_block_of_the_system_tier_runs(where: str, command: str, tmp_path: Path) -> None:
    """The command as a reader runs it from a clone, here in a directory of its own (the
    plans, and the venv these tests run from, linked into it), so what it writes stays there."""
    (tmp_path / "plans").symlink_to(PLANS)
    (tmp_path / ".venv").symlink_to(sys.prefix)
    done = subprocess.run(
        ["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, (
        f"{where}: {command}: exit {done.returncode}\n{done.stderr[-2000:]}"
    )

"""The default tier stays pure and fast: a test without a tier mark is a unit test, so one that
drives the console, starts this tool in a process or asks for a real program must say so.

This reads every test file (it runs nothing): a test named here is one that ``pytest -q`` would
run although it belongs to another tier; the message names the mark it needs.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import SYSTEM_FIXTURES, TIERS

TESTS = Path(__file__).resolve().parent

# What in a test's own body shows its tier (helpers it calls are not followed; the fixtures
# of real programs are refused at run time by conftest.py).
CONSOLE_CALLS = {"run_test", "snap_compare"}
SYSTEM_CALLS = {"start_headless", "need_program"}


def _marks(decorators: list[ast.expr]) -> set[str]:
    out = set()
    for d in decorators:
        for node in ast.walk(d):
            if isinstance(node, ast.Attribute) and node.attr in (*TIERS, "slow"):
                out.add(node.attr)
    return out


def _module_marks(tree: ast.Module) -> set[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            return _marks([node.value])
    return set()


def _needs(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The tiers the body of a test shows it needs."""
    needs = set()
    args = {a.arg for a in fn.args.args}
    if args & SYSTEM_FIXTURES:
        needs.add("system")
    for node in ast.walk(fn):
        name = None
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
        if name in CONSOLE_CALLS:
            needs.add("console")
        if name in SYSTEM_CALLS:
            needs.add("system")
        if isinstance(node, ast.Constant) and node.value == "specbench_tui":
            needs.add("system")  # [sys.executable, "-m", "specbench_tui", ...]: the tool
    return needs


def misplaced() -> list[str]:
    out = []
    for path in sorted(TESTS.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module = _module_marks(tree)
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if not node.name.startswith("test_"):
                continue
            marks = module | _marks(node.decorator_list)
            if marks & {"console", "system", "timing", "slow"}:
                continue
            for tier in sorted(_needs(node)):
                out.append(f"{path.name}::{node.name} needs @pytest.mark.{tier}")
    return out


def test_no_test_of_another_tier_is_left_unmarked() -> None:
    found = misplaced()
    assert not found, "unmarked tests run in the default tier:\n" + "\n".join(found)


def test_the_review_finds_an_unmarked_console_or_process_test(tmp_path: Path) -> None:
    tree = ast.parse(
        "async def test_a(sshd):\n    pass\n"
        "async def test_b():\n    async with app.run_test() as pilot:\n        pass\n"
        "def test_c():\n    subprocess.run([sys.executable, '-m', 'specbench_tui'])\n"
        "def test_d():\n    assert 1 + 1 == 2\n"
    )
    needs = {
        n.name: _needs(n)
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    assert needs == {
        "test_a": {"system"},
        "test_b": {"console"},
        "test_c": {"system"},
        "test_d": set(),
    }

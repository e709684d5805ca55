"""The house keeps its floors: each package imports only from packages below it, no modules
import each other in a circle, and only the console imports textual.

It reads the product's source (it runs nothing). A failure names the import that breaks the
rule, so a change that needs it either moves code to the floor it belongs on or says here
why the floors changed.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "specbench_tui"

#: Floors from the bottom: a module may import from its own package and from lower floors.
#: The simulator stands apart (its server is started as a program; hosts only name its files).
FLOORS: dict[str, int] = {
    "errors": 1,
    "printable": 1,
    "stdout": 1,
    "durations": 1,
    "table_types": 1,
    "results": 1,
    "engines": 2,
    "hosts": 3,  # the plan asks the backends' registry about its hosts, as it asks the engines'
    "plan": 4,
    "bench": 5,
    "fetch_prompts": 5,
    "report": 6,
    "engine": 7,
    "tui": 8,
    "cli": 9,
    "docs_pages": 9,  # the docs' generated parts, from every package's own definitions
    "__main__": 10,
}
#: Packages that must not reach each other although their floors would allow it.
NEVER: dict[str, set[str]] = {
    "report": {"plan", "hosts"},  # a report is built from a results directory alone
    "bench": {"hosts"},  # the client runs against any server, wherever it is
}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Module -> the product modules it imports; module -> the outside packages it imports."""
    mods = {_module(p): p for p in ROOT.rglob("*.py")}
    inner: dict[str, set[str]] = {}
    outer: dict[str, set[str]] = {}
    for name, path in mods.items():
        got: set[str] = set()
        ext: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                for a in node.names:
                    (got if a.name.startswith("specbench_tui") else ext).add(a.name)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if not node.module.startswith("specbench_tui"):
                    ext.add(node.module)
                    continue
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    got.add(full if full in mods else node.module)
        inner[name] = {m for m in got if m in mods and m != name}
        outer[name] = {m.split(".")[0] for m in ext}
    return inner, outer


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_import_goes_down_a_floor_or_stays_on_it() -> None:
    inner, _ = _graph()
    up = []
    for src, targets in inner.items():
        a = _package(src)
        for dst in targets:
            b = _package(dst)
            if a == b or not a or not b or a == "sim" or b == "sim":
                continue
            assert a in FLOORS and b in FLOORS, f"{src} or {dst}: a package with no floor here"
            if FLOORS[b] > FLOORS[a] or b in NEVER.get(a, set()):
                up.append(f"{src} -> {dst}")
    assert up == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    inner, _ = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(inner[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(inner):
        if v not in index:
            visit(v)
    assert circles == []


def test_only_the_console_imports_textual() -> None:
    _, outer = _graph()
    users = sorted(m for m, ext in outer.items() if ext & {"textual", "textual_plotext"})
    assert users and all(_package(m) == "tui" for m in users), users

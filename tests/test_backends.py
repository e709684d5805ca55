"""The backend registry is the one place that knows every kind of host: each kind a plan can
name has an entry, the plan side and the hosts side agree on which kinds run batch jobs, and
nothing outside ``hosts/`` imports a backend's own module (a new backend is its module and a
registry line, not edits across the engine)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specbench_tui.hosts.backends import (
    BACKENDS,
    backend,
    build_host,
    check_host_table,
    job_gpu_variables,
)
from specbench_tui.hosts.host_table import HostSpec

ROOT = Path(__file__).resolve().parents[1] / "specbench_tui"
#: Modules of hosts/ that are one backend's own: the rest of the product reaches them through
#: the registry (``hosts/backends.py``) or the protocols (``hosts/batch.py``).
BACKEND_MODULES = (
    "slurm",
    "slurm_batch",
    "slurm_jobs",
    "slurm_table",
    "ssh",
    "ssh_host",
    "systemd",
    "remote_process",
)


def test_every_kind_a_plan_names_has_a_backend() -> None:
    assert set(BACKENDS) <= set(HostSpec.model_fields)  # each backend's key is a plan key
    for key in BACKENDS:  # the key that makes a host each kind gives that kind
        value = {"login": "l", "gpus_per_node": 1, "shared_dir": "/s", "venv": "/v"}
        table = {"ssh": "u@h", "local": True, "sim": True}.get(key, value)
        spec = HostSpec.model_validate({key: table, "gpus": 1})
        assert spec.kind == key and check_host_table("h", spec) == []
    (none,) = check_host_table("h", HostSpec(gpus=1, local=True, sim=True))
    for b in BACKENDS.values():  # the message names every kind, from the registry
        assert b.plan_words and b.plan_words in none.message
    for name, b in BACKENDS.items():
        # A machine (a Host) or a batch system (its cluster and its jobs), never both.
        assert (b.host is None) != (b.batch_jobs is None and b.batch_system is None), name
        assert (b.batch_jobs is None) == (b.batch_system is None) == (b.batch_check is None)


def test_the_plan_side_and_the_run_side_agree_on_the_batch_kinds() -> None:
    for name, b in BACKENDS.items():
        assert (b.batch is None) == (b.batch_jobs is None), name
    assert job_gpu_variables()  # a batch job finds its GPUs without CUDA_VISIBLE_DEVICES


def test_a_batch_kind_builds_no_host_and_an_unknown_kind_is_named() -> None:
    batch = next(n for n, b in BACKENDS.items() if b.batch_jobs is not None)
    with pytest.raises(ValueError, match="runs batch jobs"):
        build_host(HostSpec(gpus=1, local=True), "h", "c", kind=batch)
    with pytest.raises(ValueError, match="no backend for hosts of kind 'pbs'"):
        backend("pbs")


def test_only_hosts_imports_a_backends_own_module() -> None:
    own = {f"specbench_tui.hosts.{m}" for m in BACKEND_MODULES}
    bad = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] == "hosts":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            bad += [f"{rel}: {n}" for n in names if n in own]
    assert bad == []


def _kind_compares(tree: ast.AST) -> list[int]:
    """Lines that compare a host kind with a backend's name (``kind == "sim"``,
    ``host_kind in ("local", "sim")``): the rest of the product asks the registry's traits."""
    names = set(BACKENDS)

    def kindish(node: ast.AST) -> bool:
        name = getattr(node, "attr", None) or getattr(node, "id", None) or ""
        return "kind" in name

    def literal(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return any(literal(e) for e in node.elts)
        return False

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(kindish(s) for s in sides) and any(literal(s) for s in sides):
                out.append(node.lineno)
    return out


def test_no_kind_is_compared_outside_hosts() -> None:
    bad = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] != "hosts":
            bad += [f"{rel}:{n}" for n in _kind_compares(ast.parse(path.read_text()))]
    assert bad == [], "ask the registry (hosts/backends.py simulated, on_this_machine)"
    planted = ast.parse('if group.host_kind == "sim":\n    pass\nok = kind in ("local", "x")')
    assert _kind_compares(planted) == [1, 3]  # the search finds what it looks for

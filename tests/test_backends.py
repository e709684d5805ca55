"""The backend registry is the one place that knows every kind of host: each kind a plan can
name has an entry, the plan side and the hosts side agree on which kinds run batch jobs, and
nothing outside ``hosts/`` imports a backend's own module (a new backend is its module and a
registry line, not edits across the engine)."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest

from specbench_tui.hosts.backends import BACKENDS, backend, job_gpu_variables
from specbench_tui.hosts.factory import make_host
from specbench_tui.plan.batch import BATCH_KINDS
from specbench_tui.plan.model import HostSpec

ROOT = Path(__file__).resolve().parents[1] / "specbench_tui"
#: Modules of hosts/ that are one backend's own: the rest of the product reaches them through
#: the registry (``hosts/backends.py``) or the protocols (``hosts/batch.py``).
BACKEND_MODULES = ("slurm", "slurm_batch", "ssh", "ssh_host", "systemd", "remote_process")


def test_every_kind_a_plan_names_has_a_backend() -> None:
    kinds = set(typing.get_args(typing.get_type_hints(HostSpec.__dict__["kind"].fget)["return"]))
    assert kinds and kinds == set(BACKENDS)
    for name, b in BACKENDS.items():
        # A machine (a Host) or a batch system (its cluster and its jobs), never both.
        assert (b.host is None) != (b.batch_jobs is None and b.batch_system is None), name
        assert (b.batch_jobs is None) == (b.batch_system is None) == (b.batch_check is None)


def test_the_plan_and_the_hosts_agree_on_the_batch_kinds() -> None:
    assert set(BATCH_KINDS) == {n for n, b in BACKENDS.items() if b.batch_jobs is not None}
    assert all(BATCH_KINDS[k].name == k for k in BATCH_KINDS)
    assert job_gpu_variables()  # a batch job finds its GPUs without CUDA_VISIBLE_DEVICES


def test_a_batch_kind_builds_no_host_and_an_unknown_kind_is_named() -> None:
    batch = next(n for n, b in BACKENDS.items() if b.batch_jobs is not None)
    with pytest.raises(ValueError, match="runs batch jobs"):
        make_host("h", batch, 1)
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

"""The backend registry is the one place that knows every kind of host: each kind a plan can
name has an entry, the plan side and the hosts side agree on which kinds run batch jobs, and
nothing outside ``hosts/`` imports a backend's own module (a new backend is its module and a
registry line, not edits across the engine)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specbench_tui.hosts.backends import BACKENDS, backend, job_gpu_variables
from specbench_tui.hosts.factory import make_host
from specbench_tui.hosts.host_table import KIND_KEYS, HostSpec

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
    assert set(KIND_KEYS) == set(BACKENDS)
    for key in KIND_KEYS:  # the key that makes a host each kind gives that kind
        value = {"login": "l", "gpus_per_node": 1, "shared_dir": "/s", "venv": "/v"}
        table = {"ssh": "u@h", "local": True, "sim": True}.get(key, value)
        spec = HostSpec.model_validate({key: table, "gpus": 1})
        assert spec.kind == key and spec.kinds_set() == [key]
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

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
    BUILT_IN,
    HostSpec,
    backend,
    build_host,
    check_host_table,
    job_gpu_variables,
)

ROOT = Path(__file__).resolve().parents[1] / "specbench_tui"
FOLDERS = "specbench_tui.hosts.backends"


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


def _imports_a_folder(source: str) -> list[str]:
    """The backend folders' modules that ``source`` imports."""
    out = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
            if node.module == FOLDERS:  # a folder imported by name
                names += [f"{FOLDERS}.{a.name}" for a in node.names if a.name in BACKENDS]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        out += [n for n in names if n.startswith(f"{FOLDERS}.")]
    return out


def test_only_hosts_imports_a_backends_own_module() -> None:
    """A backend's folder is its own: outside ``hosts/`` only the registry is asked."""
    bad = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] != "hosts":
            bad += [f"{rel}: {n}" for n in _imports_a_folder(path.read_text())]
    assert bad == []
    assert _imports_a_folder("from specbench_tui.hosts.backends.slurm import slurm_jobs")
    assert not _imports_a_folder("from specbench_tui.hosts.backends import simulated")


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_each_backend_builds_from_the_table_it_ships(name: str) -> None:
    """The contract every backend keeps, from its own example table: the plan reads it as
    that kind, its checks pass, the dry run describes it, and it builds what runs it (a Host,
    or a batch system's cluster and jobs) without reaching anything."""
    b = BACKENDS[name]
    raw = {name: b.example} | ({} if b.fill_table else {"gpus": 2})
    hs = HostSpec.model_validate(b.fill_table(raw) if b.fill_table else raw)
    assert hs.kind == name and check_host_table("h", hs) == []
    assert b.describe(hs, "c")
    assert b.plan_words.split()[0] == name  # the message names the key a plan writes
    if b.host is not None:
        host = build_host(hs, "h", "c")
        assert host.kind == name and host.gpus == hs.gpus
    else:
        assert b.batch is not None and b.batch_jobs is not None and b.batch_system is not None
        assert b.batch_jobs(hs, "c") is not None
        assert b.batch.max_jobs(hs) >= 1


def test_the_backends_are_the_folders() -> None:
    folders = {p.parent.name for p in (ROOT / "hosts" / "backends").glob("*/__init__.py")}
    assert folders == set(BUILT_IN) == {n for n in BACKENDS if n in folders}


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
    assert bad == [], "ask the registry (hosts/backends/__init__.py simulated, on_this_machine)"
    planted = ast.parse('if group.host_kind == "sim":\n    pass\nok = kind in ("local", "x")')
    assert _kind_compares(planted) == [1, 3]  # the search finds what it looks for


SHELF_PLAN = """\
[campaign]
name = "shelf"
baseline = "ar"

[hosts.box]
shelf = {{ label = "rack 3" }}
gpus = 1

[server]
python = "{python}"
model = "tiny"
port = {port}
launch = ["{{python}}", "-m", "specbench_tui.sim", "--model-path", "{{model}}", "--tp-size",
          "{{tp}}", "--host", "127.0.0.1", "--port", "{{port}}", "--speed", "50"]
ready_timeout = "60s"

[configs.ar]

[matrix]
configs = ["ar"]
tp = [1]

[workloads.single]
kind = "single"
prompts = ["chat"]
samples = 2
max_tokens = [16]
"""


@pytest.mark.system
def test_a_backend_kept_in_the_tests_runs_a_campaign(tmp_path: Path) -> None:
    """Adding a backend, followed for real: ``tests/support/shelf_backend.py`` is one module
    that exports ``BACKEND``, named in ``SPECBENCH_BACKENDS``; no product file names it. The
    plan takes its key, the dry run describes it, a campaign runs on it, and its check speaks
    through the plan's errors."""
    import json
    import subprocess
    import sys

    from conftest import ROOT as REPO
    from conftest import free_port

    plan = tmp_path / "shelf.toml"
    plan.write_text(SHELF_PLAN.format(python=sys.executable, port=free_port()))
    env = {
        **__import__("os").environ,
        "SPECBENCH_BACKENDS": "shelf_backend",
        "PYTHONPATH": str(Path(__file__).parent / "support"),
    }
    run = [sys.executable, "-m", "specbench_tui", str(plan)]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*run, *args], capture_output=True, text=True, timeout=300, cwd=REPO, env=env
        )

    dry = cli("--dry-run")
    assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-2000:]
    assert "shelf rack 3, 1 GPUs" in dry.stdout
    done = cli("--headless", "--results", str(tmp_path / "res"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    events = [json.loads(x) for x in (tmp_path / "res" / "shelf" / "events.jsonl").open()]
    (started,) = [e for e in events if e["event"] == "campaign_started"]
    assert {g["host_kind"] for g in started["groups"]} == {"shelf"}
    assert sum(e["event"] == "cell_finished" for e in events) == 1
    plan.write_text(plan.read_text().replace('label = "rack 3"', 'label = " "'))
    bad = cli("--dry-run")
    assert bad.returncode != 0 and "name the shelf" in bad.stdout + bad.stderr
    # Without the variable the key is unknown, as any misspelt key is.
    env.pop("SPECBENCH_BACKENDS")
    unknown = cli("--dry-run")
    assert unknown.returncode != 0 and "shelf" in unknown.stdout + unknown.stderr

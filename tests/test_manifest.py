"""The run's manifest: what each group's server ran on and with, read through the server's own
interpreter (the GPU agent's ``--manifest``): the H200's captured ``nvidia-smi -q -x``, the
simulated NVML, package versions and commits read from their files, the model's config hash;
through a real vLLM's interpreter and over a real sshd; and the report's environment section."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, need_program
from sshd_fixture import Sshd, sshd  # noqa: F401 (the fixture)
from support.results_builder import ResultsBuilder

from specbench_tui.engine.manifest import probe_args, read_probe, tool_facts
from specbench_tui.hosts.gpu_agent import parse_smi_xml
from specbench_tui.hosts.host import FAKE_NVML_PATH
from specbench_tui.hosts.ssh import SshAgentRunner, SshConnection
from specbench_tui.hosts.telemetry import AGENT_PATH as AGENT
from specbench_tui.hosts.telemetry import LocalAgentRunner
from specbench_tui.report import render
from specbench_tui.report.render import render_report
from specbench_tui.results.cells import ServiceGroup

SUPPORT = ROOT / "tests" / "support"
CAPTURE = SUPPORT / "nvidia-smi-h200" / "idle.q.xml"


def _manifest(python: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    out = subprocess.run(
        [python, str(AGENT), "--manifest", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_nvidia_smi_xml_of_a_real_h200() -> None:
    got = parse_smi_xml(CAPTURE.read_text())
    assert got["driver"] == "580.159.04" and got["cuda_driver"] == "13.0"
    (d,) = got["devices"]
    assert d["name"] == "NVIDIA H200" and d["uuid"].startswith("GPU-d4422da2")
    assert d["application_clocks_mhz"] == {"graphics": 1980.0, "memory": 3201.0}
    assert d["max_clocks_mhz"] == {"graphics": 1980.0, "sm": 1980.0, "memory": 3201.0}
    assert d["power_limit_w"] == 700.0 and d["default_power_limit_w"] == 700.0


def test_manifest_through_nvidia_smi_without_pynvml(tmp_path: Path) -> None:
    """A GPU host's system python3 (no pynvml): the clocks and limits come from nvidia-smi."""
    (tmp_path / "py").mkdir()
    python = tmp_path / "py" / "python3"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')  # no site-packages
    python.chmod(0o755)
    env = {"PATH": f"{SUPPORT}:{os.environ['PATH']}"}
    env.update({k: "" for k in ("SPECBENCH_SIM_NVML", "SPECBENCH_SIM_NVML_MODULE")})
    got = _manifest(str(python), "--gpus", "0", env=env)
    gpus = got["gpus"]
    assert gpus["source"] == "nvidia-smi" and gpus["driver"] == "580.159.04"
    assert gpus["devices"][0]["application_clocks_mhz"]["graphics"] == 1980.0
    assert gpus["devices"][0]["power_limit_w"] == 700.0
    assert got["os"]["kernel"] == os.uname().release
    assert got["python"]["version"] == ".".join(map(str, sys.version_info[:3]))


def test_manifest_through_the_simulated_nvml(tmp_path: Path) -> None:
    env = {
        "SPECBENCH_SIM_NVML": str(tmp_path),
        "SPECBENCH_SIM_NVML_MODULE": str(FAKE_NVML_PATH),
        "SPECBENCH_SIM_GPUS": "4",
    }
    got = _manifest(sys.executable, "--gpus", "2,3", env=env)
    devs = got["gpus"]["devices"]
    assert got["gpus"]["source"] == "nvml" and [d["index"] for d in devs] == [2, 3]
    assert devs[0]["power_limit_w"] == 600.0 and devs[0]["application_clocks_mhz"]["memory"]
    assert "simulated" in devs[0]["name"]


def test_packages_and_model_are_read_from_their_files(tmp_path: Path) -> None:
    site = tmp_path / "site"
    pkg = site / "fakeengine"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('never imported')\n")
    (pkg / "_version.py").write_text("__version__ = version = '1.2.3'\n__commit_id__ = None\n")
    dist = site / "fakeengine-1.2.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeengine\nVersion: 1.2.3\n")
    commit = "a" * 40
    (dist / "direct_url.json").write_text(
        json.dumps(
            {"url": "https://example.org/x.git", "vcs_info": {"vcs": "git", "commit_id": commit}}
        )
    )
    model = tmp_path / "hub" / "models--x" / "snapshots" / "0123abcd"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"hidden_size": 64}')
    (model / "tokenizer_config.json").write_text("{}")
    env = {"PYTHONPATH": str(site)}
    got = _manifest(
        sys.executable, "--packages", "fakeengine,absent", "--model", str(model), env=env
    )
    fake = got["packages"]["fakeengine"]
    assert fake["version"] == "1.2.3" and fake["commit"] == commit
    assert got["packages"]["absent"] == {"error": "not installed"}
    m = got["model"]
    assert m["files"]["config.json"] == hashlib.sha256(b'{"hidden_size": 64}').hexdigest()
    assert set(m["files"]) == {"config.json", "tokenizer_config.json"}
    assert m["revision"] == "0123abcd"
    (model / "config.json").write_text('{"hidden_size": 65}')
    again = _manifest(sys.executable, "--model", str(model), env=env)["model"]
    assert again["hash"] != m["hash"]  # a changed config is a changed model


def test_the_tools_own_commit() -> None:
    facts = tool_facts()
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    if head:
        assert facts["git_sha"] == head and isinstance(facts["git_dirty"], bool)
    assert facts["python"] == ".".join(map(str, sys.version_info[:3]))


def _group(python: str, engine: str = "vllm", model: str = "") -> ServiceGroup:
    return ServiceGroup(
        id="h.x.tp1",
        host="h",
        host_kind="local",
        config="x",
        label="x",
        tp=1,
        gpu_ids=(0,),
        port=1,
        command=(python, "-m", "x.launch", "--model", model) if model else (python, "-m", "x"),
        env=(),
        api="openai",
        ready_timeout_s=60,
        speculative=False,
        engine=engine,
    )


@pytest.mark.system
async def test_manifest_through_the_real_vllm_interpreter(tmp_path: Path) -> None:
    python = os.environ.get("SPECBENCH_VLLM_PYTHON", str(ROOT / ".venv-vllm" / "bin" / "python"))
    if not Path(python).exists():
        need_program("specbench-vllm-python-missing")  # skipped here, a failure under CI
    got = await read_probe(LocalAgentRunner(python), probe_args(_group(python)), python)
    pkgs = got["packages"]
    assert pkgs["vllm"]["version"].startswith("0.") and pkgs["vllm"]["distribution"]
    assert pkgs["torch"]["version"] and "cuda" in pkgs["torch"]
    # What the interpreter itself says, for comparison: read, not imported, yet equal.
    said = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('torch'))"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    assert pkgs["torch"]["version"] == said
    assert got["python"]["executable"].startswith(str(Path(python).parent.parent))


@pytest.mark.system
async def test_manifest_over_a_real_sshd(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    ssh = SshConnection("sbplain", **sshd.connect_args())  # type: ignore[arg-type]
    try:
        python = "python3"
        got = await read_probe(
            SshAgentRunner(ssh, python, {}),
            probe_args(_group(python, "sglang", str(model))),
            python,
        )
    finally:
        await ssh.close()
    assert got["manifest"] == 1 and got["os"]["kernel"] == os.uname().release
    assert got["model"]["files"]["config.json"] == hashlib.sha256(b"{}").hexdigest()
    assert got["packages"]["sglang"] == {"error": "not installed"}
    assert got["gpus"]["source"] == "none"  # a plain login: no pynvml, no nvidia-smi


def test_the_report_shows_the_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render, "tex_engine", lambda: None)
    b = ResultsBuilder(tmp_path / "syn")
    b.cell("a", "ar", 1, "single", "single")
    b.finished("a", [dict(prompt_id="p", repeat=0)])
    root = b.write()
    probe = _manifest(
        sys.executable,
        "--gpus",
        "0",
        "--packages",
        "polars",
        env={"PATH": f"{SUPPORT}:{os.environ['PATH']}"},
    )
    entry = {"tool": tool_facts(), "engine": "polars", "engine_version": None, "probe": probe}
    (root / "manifest.json").write_text(
        json.dumps({"manifest": 1, "groups": {"sim.ar.tp1": entry}})
    )
    render_report(root)
    md = (root / "report.md").read_text()
    env = md.split("Environment")[-1]
    assert "Software of each group's server" in env and "GPUs of each group" in env
    assert "NVIDIA H200" in env and "1980 / 3201" in env and "700 W" in env
    assert f"kernel {os.uname().release}" in env
    assert "as recorded when the groups ran" in env


def test_the_engine_version_is_what_the_server_said_and_installed_ones_are_marked() -> None:
    from specbench_tui.report.sections.environment import _engine_versions

    assert _engine_versions("0.5.23", "0.5.23") == "0.5.23 (server)"
    # An upgrade under a running server, or another venv on the path: both, each said.
    assert _engine_versions("0.5.22", "0.5.23") == "0.5.22 (server); 0.5.23 installed"
    assert _engine_versions(None, "0.32.0") == "0.32.0 installed"
    assert _engine_versions("0.32.0", "—") == "0.32.0 (server)"
    assert _engine_versions(None, "—") == "—"

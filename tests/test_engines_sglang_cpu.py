"""A real SGLang on this machine's CPU, driven through the whole tool: opt-in.

SGLang 0.5.23 from the registry is 11 GB (CUDA torch and libraries, flashinfer, the CUDA
sgl-kernel) and takes over 20 minutes to install: too much for every CI run, so this test
runs only where ``SPECBENCH_SGLANG_PYTHON`` names the interpreter of such a venv:

    python3 -m venv .venv-sglang && .venv-sglang/bin/pip install sglang==0.5.23
    SPECBENCH_SGLANG_PYTHON=$PWD/.venv-sglang/bin/python .venv/bin/pytest -m system \\
        tests/test_engines_sglang_cpu.py

Its sgl-kernel is the CUDA build, which cannot load without libcuda; SGLang's CPU engine only
needs the kernel package's names to import on the autoregressive path, so the test puts a
stand-in ``sgl_kernel`` (ours, not SGLang's: every function does nothing) first on the server's
PYTHONPATH. It runs autoregressive decoding on a tiny random-weight Qwen3 the project makes
(engines/tiny_model.py), and an n-gram config: on a CPU without Intel AMX SGLang has no
verify path, so that server dies on its first verify step, and the group must fail with one
line naming SGLang's own error.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import ROOT, free_port

pytestmark = pytest.mark.system

SGLANG_PYTHON = os.environ.get("SPECBENCH_SGLANG_PYTHON", "")

SHIM = '''"""A stand-in for sgl_kernel (the registry's build needs CUDA): its names and the one
submodule the n-gram worker needs import, and every function does nothing and returns None,
saying so once on stderr. The autoregressive path calls none of them; the n-gram path does,
and dies on its first verify step, as SGLang's torch-native backend has no verify path on a
CPU."""

import importlib.abc
import importlib.machinery
import sys
import types

_said = set()
SUBMODULES = {"sgl_kernel.speculative"}  # what the n-gram worker imports unconditionally


def _stand_in(name):
    def call(*args, **kwargs):
        if name not in _said:
            _said.add(name)
            print(f"[sgl_kernel stand-in] first call: {name}", file=sys.stderr, flush=True)
        return None

    return call


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        prefix = self.__name__.removeprefix("sgl_kernel").lstrip(".")
        return _stand_in(f"{prefix}.{name}" if prefix else name)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname in SUBMODULES:  # others stay missing: SGLang imports them optionally
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _Module(spec.name)

    def exec_module(self, module):
        module.__path__ = []


sys.meta_path.insert(0, _Finder())


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _stand_in(name)
'''

PLAN = """\
[campaign]
name = "sglang-real"
baseline = "ar"

[hosts.cpu]
local = true
gpus = 1

[server]
engine = "sglang"
python = "{python}"
model = "{model}"
port = {port}
ready_timeout = "20m"
args = ["--device", "cpu", "--attention-backend", "torch_native", "--disable-overlap-schedule",
        "--dtype", "bfloat16", "--context-length", "2048", "--max-total-tokens", "16384",
        "--max-running-requests", "8", "--served-model-name", "tiny", "--enable-metrics"]
env = {{ SGLANG_USE_CPU_ENGINE = "1", PYTHONPATH = "{shim}" }}

[configs.ar]
label = "AR"

[configs.ngram]
args = ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "4"]

[matrix]
configs = ["ar", "ngram"]
tp = [1]

[workloads.single]
kind = "single"
prompts = ["chat", "code"]
samples = 2
max_tokens = [32]

[workloads.mixed]
kind = "concurrency"
levels = [2]
requests = 4
prompts = ["chat"]
max_tokens = 32
"""


@pytest.fixture(scope="module")
def campaign(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    if not SGLANG_PYTHON or not Path(SGLANG_PYTHON).exists():
        pytest.skip("opt-in: set SPECBENCH_SGLANG_PYTHON to a venv with sglang==0.5.23 (11 GB)")
    tmp = tmp_path_factory.mktemp("sglang")
    shim = tmp / "shim"
    (shim / "sgl_kernel").mkdir(parents=True)
    (shim / "sgl_kernel" / "__init__.py").write_text(SHIM)
    model = tmp / "tiny-qwen3"
    subprocess.run(
        [SGLANG_PYTHON, "-m", "specbench_tui.engines.tiny_model", str(model)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=600,
    )
    plan = tmp / "plan.toml"
    plan.write_text(PLAN.format(python=SGLANG_PYTHON, model=model, port=free_port(), shim=shim))
    proc = subprocess.run(
        [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results",
         str(tmp / "res")],
        capture_output=True, text=True, timeout=3600, cwd=ROOT,
    )  # fmt: skip
    return proc, tmp / "res" / "sglang-real"


def test_a_real_sglang_serves_the_campaign_and_its_ngram_death_is_one_line(
    campaign: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    proc, root = campaign
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-5000:]  # the n-gram group failed, nothing else
    events = [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]
    cells = pl.read_parquet(root / "cells.parquet")
    status = dict(zip(cells["name"], cells["status"], strict=True))
    for name in ("cpu.ar.tp1/single/chat/32", "cpu.ar.tp1/single/code/32", "cpu.ar.tp1/mixed/c2"):
        assert status[name] == "done", out[-5000:]
    requests = pl.read_parquet(root / "requests.parquet").filter(pl.col("config") == "ar")
    assert requests.height == 8 and requests.filter(pl.col("error").is_not_null()).height == 0
    assert (requests["output_tokens"] <= 32).all() and requests["accept_length"].is_null().all()
    ready = {e["group"]: e for e in events if e["event"] == "service_ready"}
    assert set(ready) == {"cpu.ar.tp1"}
    assert ready["cpu.ar.tp1"]["engine"] == "sglang"
    assert ready["cpu.ar.tp1"]["engine_version"] == "0.5.23"  # what the server said
    assert ready["cpu.ar.tp1"]["served_model"] == "tiny" and not ready["cpu.ar.tp1"]["speculative"]
    # Its whole effective configuration, from its own /server_info, for the audit.
    manifest = json.loads((root / "manifest.json").read_text())["groups"]["cpu.ar.tp1"]
    assert manifest["settings_source"] == "/server_info"
    assert manifest["settings"]["disable_overlap_schedule"] is True  # the plan's flag
    assert manifest["settings"]["tp_size"] == 1 and len(manifest["settings"]) > 300
    failed = [e for e in events if e["event"] == "cell_failed" and e["group"] == "cpu.ngram.tp1"]
    assert len(failed) == 3 and len({e["reason"] for e in failed}) == 1
    reason = failed[0]["reason"]
    assert "\n" not in reason and "server did not start" in reason, reason
    # The exception SGLang's scheduler died of, from its traceback, not the log's last line
    # (its shutdown's noise); which exception depends on what the stand-in kernels returned
    # (the captured server's: AttributeError 'NoneType' ... 'shape'; this one's may differ).
    assert re.search(r"during start-up: \w+(Error|Exception): \S", reason), reason
    cause = reason.split("during start-up: ", 1)[1]
    log = (root / "logs" / "cpu.ngram.tp1.log").read_text()
    assert cause in log and "Scheduler hit an exception" in log
    assert "ngram_worker.py" in log and "forward_batch_generation" in log  # its verify step
    assert log.rstrip().splitlines()[-1].strip() != cause  # found in the tail, not its end
    # The server's own Prefill and Decode lines were read beside the client's figures.
    report = (root / "report.md").read_text()
    view = report[report.index("## Server view beside the client view") :]
    assert "| AR |" in view or "| AR " in view, view[:2000]
    # Nothing the campaign started is left: SGLang's scheduler and detokenizer included.
    left = subprocess.run(["pgrep", "-f", str(root.parent.parent)], capture_output=True, text=True)
    assert left.stdout.strip() == "", left.stdout

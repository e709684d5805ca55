"""What the real vLLM 0.32 on CPU does with forced acceptance: it takes the synthetic rejection
sampler in ``--speculative-config`` and then refuses it while its engine core warms up
(``AssertionError: Synthetic acceptance not supported with CPU sampling``, the CPU rejection
kernel in ``vllm/utils/cpu_triton_utils.py``). The forced group fails with that cause in one
line and the report's forced section says why it has no curve. When a vLLM build takes it on
CPU this test fails: then it becomes the real forced sweep (the simulator's stand-in runs in
tests/test_forced_accept.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, free_port
from tests.test_engines_vllm import PLAN, build_tiny_model, need_vllm

pytestmark = pytest.mark.system
REFUSAL = "Synthetic acceptance not supported with CPU sampling"


def test_vllm_on_cpu_refuses_synthetic_acceptance_and_says_so(tmp_path) -> None:
    python = need_vllm()
    model = build_tiny_model(python, tmp_path / "tiny-qwen3")
    spec = '{{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}}'
    text = PLAN.format(python=python, model=model, port=free_port(), spec=spec).replace(
        '"summary"]', '"summary"]\nforced_accept = [2.5]'
    )
    plan = tmp_path / "plan.toml"
    plan.write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results",
         str(tmp_path / "res"), "--only", "cpu.ngram-fa2.5.tp1/single/chat/*"],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=ROOT,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    root = tmp_path / "res" / "vllm-real"
    events = [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]
    (failed,) = [e for e in events if e["event"] == "cell_failed"]
    assert failed["group"] == "cpu.ngram-fa2.5.tp1"
    assert failed["reason"].endswith(f"during start-up: {REFUSAL}"), failed["reason"]
    assert f"during start-up: {REFUSAL}" in out  # the headless line names the cause
    report = (root / "report.md").read_text()
    assert "No forced-acceptance cell measured anything" in report and REFUSAL in report

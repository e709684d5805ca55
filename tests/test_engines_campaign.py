"""The post-ready check inside a campaign, against a stand-in for a real vLLM."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.system


def test_speculation_asked_but_not_running_fails_the_group(write_plan, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The post-ready check inside a campaign: a stand-in server that answers like a real
    vLLM without speculation (its captured /metrics, /version and start-up log), whatever the
    config asks, must fail the group with the reason, and leave no speed-up row."""
    plan = write_plan(
        f"""\
[campaign]
name = "nospec"
[hosts.cpu]
local = true
gpus = 1
[server]
engine = "vllm"
python = "{sys.executable}"
model = "/m"
port = {{port}}
ready_timeout = "60s"
launch = ["{{python}}", "{ROOT / "tests" / "support" / "replay.py"}", "--vllm-nospec",
          "--port", "{{port}}"]
[configs.ngram]
args = ["--speculative-config", '{{{{"method": "ngram", "num_speculative_tokens": 3}}}}']
[matrix]
configs = ["ngram"]
tp = [1]
[workloads.single]
kind = "single"
prompts = ["chat"]
samples = 1
max_tokens = [8]
"""
    )
    proc = subprocess.run(
        [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results",
         str(tmp_path / "res")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    root = tmp_path / "res" / "nospec"
    events = [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]
    failed = [e for e in events if e["event"] == "cell_failed"]
    assert len(failed) == 1
    assert (
        "config 'ngram' asks for ngram but vLLM runs without speculative decoding"
        in (failed[0]["reason"])
    )
    assert not [e for e in events if e["event"] == "cell_finished"]
    assert (
        not (root / "requests.parquet").exists()
        or pl.read_parquet(root / "requests.parquet").is_empty()
    )

"""A whole campaign on the simulated SGLang server renders prompts from the model's own
template, read from the model directory, with each workload's kwargs.

The simulator records every prompt its ``/generate`` received (``--sim-record-prompts``), so
the test compares what the server got with the template rendered here: single requests
exactly, multi-turn sessions as the whole conversation re-rendered at every turn.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from specbench_tui.engines.tiny_model import CHAT_TEMPLATE
from specbench_tui.plan.chat_template import ChatTemplate
from specbench_tui.plan.prompt_sets import load_named_set, sample_prompts
from tests.conftest import ROOT, free_port

pytestmark = [pytest.mark.slow, pytest.mark.system]

PLAN = """\
[campaign]
name = "prompts"
baseline = "ar"

[hosts.sim]
sim = true
gpus = 1
speed = 20

[server]
model = "{model}"
port = {port}
args = ["--sim-record-prompts", "{record}"]

[configs.ar]

[matrix]
configs = ["ar"]
tp = [1]

[workloads.nothink]
kind = "single"
prompts = ["chat"]
samples = 2
max_tokens = [12]
chat_template_kwargs = {{ enable_thinking = false }}

[workloads.think]
kind = "single"
prompts = ["code"]
samples = 1
max_tokens = [12]

[workloads.session]
kind = "agentic"
sessions = 1
turns = 3
tool_output_tokens = 20
max_tokens = 12
prompts = ["code"]
chat_template_kwargs = {{ enable_thinking = false }}

[checks]
noise_floor = false
"""

OFF = "<|im_start|>assistant\n<think>\n\n</think>\n\n"


def test_sglang_path_receives_the_models_template(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    (model / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    record = tmp_path / "received.jsonl"
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(model=model, port=free_port(), record=record))
    proc = subprocess.run(
        [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results",
         str(tmp_path / "res")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    template = ChatTemplate(CHAT_TEMPLATE, "test")
    received = [json.loads(x) for x in record.read_text(encoding="utf-8").splitlines()]
    assert {r["api"] for r in received} == {"generate"}
    texts = [r["text"] for r in received]

    def rendered(name: str, n: int, kwargs: dict[str, object]) -> list[str]:
        drawn = sample_prompts(load_named_set(name, tmp_path), n, 0)
        return [template.render(p.messages(), kwargs) for p in drawn]

    off = rendered("chat", 2, {"enable_thinking": False})
    on = rendered("code", 1, {})
    assert all(t.endswith(OFF) for t in off) and on[0].endswith("assistant\n<think>\n")
    for text in [*off, *on]:
        assert text in texts, text[-200:]
    # The session: turn 1 is rendered like a single request; each later turn is the whole
    # conversation again, the earlier answer in its assistant turn, then the new user turn.
    root = tmp_path / "res" / "prompts"
    rows = pl.read_parquet(root / "requests.parquet")
    session = rows.filter(pl.col("workload") == "session").sort("turn")
    assert session.height == 3
    first = sample_prompts(load_named_set("code", tmp_path), None, 0)
    turns = [t for t in texts if t not in off and t not in on]
    assert len(turns) == 3
    assert turns[0] in {template.render(p.messages(), {"enable_thinking": False}) for p in first}
    cell_id = session["cell_id"][0]
    outputs = json.loads((root / "parts" / f"{cell_id}.a1.texts.json").read_text())
    answers = [v["text"] if isinstance(v, dict) else v[0] for _, v in sorted(outputs.items())]
    for before, after, answer in zip(turns, turns[1:], answers, strict=False):
        stem = before.removesuffix(OFF)
        assert after.startswith(
            f"{stem}<|im_start|>assistant\n{answer}<|im_end|>\n<|im_start|>user\n"
        )
        assert after.endswith(OFF)
    # Every row names the template's hash and the kwargs it was rendered with.
    assert set(rows["chat_template_sha256"]) == {template.sha256}
    kwargs = dict(zip(rows["workload"], rows["chat_template_kwargs"], strict=True))
    assert kwargs == {
        "nothink": '{"enable_thinking":false}',
        "think": "{}",
        "session": '{"enable_thinking":false}',
    }
    events = [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]
    ready = [e for e in events if e["event"] == "service_ready"]
    assert ready and ready[0]["chat_template"].startswith(str(model / "chat_template.jinja"))
    assert "ChatML" not in proc.stdout  # no fallback warning: the model has a template

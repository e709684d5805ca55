"""TensorRT-LLM's adapter against the formats of its source (``tests/fixtures/trtllm/``, each
file names the upstream file it follows): the chat stream's per-request accept length, the
Prometheus counters, the speculative config of a ``--config`` YAML, the post-ready check over
HTTP, a plan's dry run and a whole campaign against a stand-in ``trtllm-serve``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import polars as pl
import pytest

from specbench_tui.bench.client import BenchClient
from specbench_tui.engines.acceptance import cell_acceptance
from specbench_tui.engines.counters import CounterWindow, WindowResult
from specbench_tui.engines.inspect import inspect_server
from specbench_tui.engines.registry import adapter
from specbench_tui.engines.streams import BadServerData
from specbench_tui.engines.trtllm import ConfigFileError, speculation_of_yaml, trtllm_spec_counts
from specbench_tui.results.cells import ServiceGroup
from specbench_tui.results.records import Measurement
from tests.conftest import ROOT
from tests.support.replay import FIXTURES, Replay, counters_after, payloads, serve, trtllm_serve

TRT = FIXTURES / "trtllm"
ENGINE = adapter("trtllm")
WORDS = (
    "The draft model proposes three tokens; the target verifies them in one step, and keeps "
    "the longest prefix it agrees with, plus one token of its own.\n"
)


def parse(name: str) -> tuple[Measurement, str]:
    parser = ENGINE.stream_parser("openai")
    for i, p in enumerate(payloads((TRT / name).read_bytes())):
        parser.feed(p, 0.01 * (i + 1))
    out = Measurement()
    parser.finish(out, 1.0)
    return out, parser.text


def test_stream_gives_the_requests_steps_and_accept_length() -> None:
    out, text = parse("chat_stream_spec.sse")
    assert text == WORDS
    assert out.output_tokens == 32 and out.prompt_tokens == 27 and out.cached_tokens == 0
    assert out.chunks == 11  # one per decoding iteration; the role chunk carries no token
    # 32 tokens over 11 iterations: the context one and 10 verify steps, 21 drafts accepted.
    assert out.spec_verify_ct == 10 and out.spec_accepted_tokens == 21
    assert out.accept_length == pytest.approx(3.1)
    assert out.spec_draft_tokens is None  # the stream does not say what was drafted
    assert out.finish_reason == "length" and out.error is None


def test_stream_without_speculation_is_one_token_a_step() -> None:
    out, _ = parse("chat_stream_nospec.sse")
    assert out.output_tokens == 32 and out.chunks == 32
    assert out.accept_length == pytest.approx(1.0) and out.spec_accepted_tokens == 0


@pytest.mark.parametrize(
    ("per_iter", "tokens", "want"),
    [
        (1.0, 1, {"verify": 0}),  # ended on its first token: no step
        (None, 10, {}),
        (2.0, None, {}),
        (4.0, 9, {"verify": 1, "accepted": 7, "accept_length": 8.0}),  # round(9 / 4) = 2 iters
    ],
)
def test_spec_counts_edges(per_iter: float | None, tokens: int | None, want: dict) -> None:
    assert trtllm_spec_counts(per_iter, tokens) == want


@pytest.mark.parametrize("bad", [0.5, float("nan"), "3", True, 40.0])
def test_spec_counts_refuse_what_cannot_be(bad: object) -> None:
    with pytest.raises(BadServerData):
        trtllm_spec_counts(bad, 32)


def test_counters_give_steps_from_position_zero() -> None:
    page = (TRT / "prometheus_one_request.txt").read_text()
    one = ENGINE.parse_counters(page)
    assert one.generation_tokens == 32 and one.verify_steps == 10
    assert one.accepted_tokens == 21 and one.draft_tokens == 30
    assert one.per_position == (9.0, 7.0, 5.0)
    # Before any request finished there are no counter samples at all.
    three = ENGINE.parse_counters(counters_after(page, 3).decode())
    none = ENGINE.parse_counters(counters_after(page, 0).decode())
    assert none.generation_tokens == 0 and none.verify_steps == 0 and none.per_position == ()
    assert three.minus(none).verify_steps == 30
    assert three.minus(one).verify_steps == 20 and three.minus(one).accepted_tokens == 42


def test_cell_acceptance_agrees_between_stream_and_counters() -> None:
    page = (TRT / "prometheus_one_request.txt").read_text()
    rows = [parse("chat_stream_spec.sse")[0] for _ in range(2)]
    deltas = ENGINE.parse_counters(counters_after(page, 3).decode()).minus(
        ENGINE.parse_counters(page)
    )
    acc = cell_acceptance(rows, WindowResult(deltas, True), engine="trtllm", speculative=True)
    assert acc["accept_length_weighted"] == pytest.approx(3.1)
    assert acc["accept_length_counters"] == pytest.approx(3.1)
    assert acc["acceptance_rate_counters"] == pytest.approx(0.7)
    assert acc["accept_per_position_counters"] == pytest.approx([0.9, 0.7, 0.5])
    assert acc["acceptance_check"] == "agree"


@pytest.mark.parametrize(
    ("text", "on", "algorithm"),
    [
        ((TRT / "config_eagle.yaml").read_text(), True, "Eagle"),
        ("speculative_config: {decoding_type: MTP, num_nextn_predict_layers: 1}\n", True, "MTP"),
        ("kv_cache_config:\n  free_gpu_memory_fraction: 0.8\n", False, None),
        ("speculative_config: null\n", False, None),
        (
            "speculative_config:\n  max_draft_len: 4\n  decoding_type: 'NGram'  # n-gram\n",
            True,
            "NGram",
        ),
        ("speculative_config:\n  max_draft_len: 4\nother: 1\n", True, None),
    ],
)
def test_speculation_of_the_config_yaml(text: str, on: bool, algorithm: str | None) -> None:
    asked = speculation_of_yaml(text)
    assert (asked.on, asked.algorithm) == (on, algorithm)


@pytest.mark.parametrize(
    "text",
    [
        "speculative_config: Eagle\n",
        "speculative_config:\nother: 1\n",
        "speculative_config:\n  - a\n",
    ],
)
def test_a_config_yaml_it_cannot_read_is_said(text: str) -> None:
    with pytest.raises(ConfigFileError):
        speculation_of_yaml(text)


def test_command_facts() -> None:
    cmd = [
        "/opt/trt/bin/python",
        "-m",
        "tensorrt_llm.commands.serve",
        "/models/Qwen3-8B",
        "--tp_size",
        "2",
        "--config",
        str(TRT / "config_eagle.yaml"),
    ]
    assert ENGINE.model_path(cmd) == "/models/Qwen3-8B"
    assert ENGINE.model_path(["trtllm-serve", "serve", "/m", "--port", "1"]) == "/m"
    assert ENGINE.requested_speculation(cmd).algorithm == "Eagle"
    assert ENGINE.check_command(cmd) is None
    missing = ENGINE.check_command([*cmd[:-1], "/nowhere/config.yaml"])
    assert missing is not None and "cannot read it here" in missing
    assert not ENGINE.requested_speculation(cmd[:-2]).on


@pytest.fixture
async def trt_server() -> AsyncIterator[tuple[Replay, str]]:
    r = Replay()
    trtllm_serve(r)
    runner, url = await serve(r)
    try:
        yield r, url
    finally:
        await runner.cleanup()


def group(**kw: object) -> ServiceGroup:
    base: dict = dict(
        id="h.eagle.tp1",
        host="h",
        host_kind="local",
        config="eagle",
        label="eagle",
        tp=1,
        gpu_ids=(0,),
        port=0,
        command=(),
        env=(),
        api="openai",
        ready_timeout_s=60,
        speculative=True,
        engine="trtllm",
        spec_algorithm="Eagle",
    )
    base.update(kw)
    return ServiceGroup(**base)  # type: ignore[arg-type]


async def test_post_ready_check_and_counter_window_over_http(
    trt_server: tuple[Replay, str],
) -> None:
    r, url = trt_server
    facts = await inspect_server(group(), url)
    assert facts.problems == [] and facts.notes == []
    assert facts.version == "1.3.0rc2" and facts.served_model == "Qwen3-8B"
    assert facts.speculative and facts.algorithm == "Eagle" and facts.tp == 1 and facts.metrics
    wrong = await inspect_server(group(tp=2, spec_algorithm="MTP"), url)
    assert any("asks for MTP but TensorRT-LLM runs Eagle" in p for p in wrong.problems)
    assert any("TP 2 but TensorRT-LLM runs with TP 1" in p for p in wrong.problems)

    window = CounterWindow(ENGINE, url, settle_timeout_s=2.0)
    async with BenchClient(url, "openai", engine="trtllm", model="Qwen3-8B") as client:
        await window.pause()  # the base read
        warm = await client.generate("hi", max_tokens=32, timeout_s=10)
        window.expect(warm.output_tokens)
        await window.measure()
        rows = []
        for _ in range(2):
            done = await client.generate("hi", max_tokens=32, timeout_s=10)
            window.expect(done.output_tokens)
            rows.append(done)
        await window.pause()
    await window.aclose()
    assert r.requests[0]["model"] == "Qwen3-8B" and "return_token_ids" not in r.requests[0]
    result = window.result()
    assert result.settled and result.deltas is not None
    assert result.deltas.verify_steps == 20  # the warm-up request left out
    acc = cell_acceptance(rows, result, engine="trtllm", speculative=True)
    assert acc["accept_length_weighted"] == pytest.approx(3.1)
    assert acc["accept_length_counters"] == pytest.approx(3.1)
    assert acc["acceptance_check"] == "agree"


PLAN = """\
[campaign]
name = "trt"
baseline = "eagle"
[hosts.box]
local = true
gpus = 1
[server]
engine = "trtllm"
python = "{python}"
model = "/models/Qwen3-8B"
port = {port}
ready_timeout = "60s"
launch = ["{python}", "{replay}", "--trtllm", "--port", "{port}"]
[configs.eagle]
args = ["--config", "{config}"]
[matrix]
configs = ["eagle"]
tp = [1]
[workloads.single]
kind = "single"
prompts = ["chat"]
samples = 2
max_tokens = [32]
warmup = 1
"""


def _plan(write_plan, config: Path) -> Path:  # type: ignore[no-untyped-def]
    return write_plan(
        PLAN.replace("{python}", sys.executable)
        .replace("{replay}", str(ROOT / "tests" / "support" / "replay.py"))
        .replace("{config}", str(config))
    )


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specbench_tui", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


@pytest.mark.system
def test_dry_run_of_a_trtllm_plan(write_plan, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    plan = _plan(write_plan, TRT / "config_eagle.yaml")
    proc = _cli(str(plan), "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    (g,) = doc["groups"]
    assert g["engine"] == "trtllm" and g["speculative"] and g["spec_algorithm"] == "Eagle"
    text = _cli(str(plan), "--dry-run")
    # No template at the model path here: the tool renders ChatML itself, to the completions route.
    assert "TensorRT-LLM, OpenAI completions API, speculative (Eagle)" in text.stdout
    gone = _plan(write_plan, tmp_path / "missing.yaml")
    bad = _cli(str(gone), "--dry-run")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "configs.eagle: --config" in bad.stderr and "cannot read it here" in bad.stderr


@pytest.mark.system
def test_campaign_against_a_stand_in_trtllm_serve(write_plan, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A whole campaign, headless, against the stand-in: the acceptance figures of the cell
    are the recorded request's, from its stream and from the counters alike."""
    plan = _plan(write_plan, TRT / "config_eagle.yaml")
    proc = _cli(str(plan), "--headless", "--results", str(tmp_path / "res"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    root = tmp_path / "res" / "trt"
    cells = pl.read_parquet(root / "cells.parquet")
    assert cells["status"].to_list() == ["done"]
    row = cells.row(0, named=True)
    assert row["accept_length_weighted"] == pytest.approx(3.1)
    assert row["accept_length_counters"] == pytest.approx(3.1)
    assert row["acceptance_rate_counters"] == pytest.approx(0.7)
    assert row["acceptance_check"] == "agree"
    reqs = pl.read_parquet(root / "requests.parquet")
    assert reqs.height == 2 and reqs["accept_length"].to_list() == pytest.approx([3.1, 3.1])
    assert reqs["spec_verify_ct"].to_list() == [10, 10]

"""The engine seam: every adapter behind the registry answers the same questions, and the
knobs the next issues need (forced acceptance) say what they do or why they cannot."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from specbench_tui.engines.adapter import RequestSpec
from specbench_tui.engines.registry import (
    API_NAMES,
    DEFAULT_ENGINE,
    ENGINE_NAMES,
    adapter,
    adapters,
)


def test_the_registry_knows_every_engine_once() -> None:
    assert ENGINE_NAMES == ("sglang", "vllm", "trtllm")
    assert adapter("") is adapter(DEFAULT_ENGINE)  # a log from before groups named it
    assert set(API_NAMES) == {a for e in adapters() for a in e.apis}
    with pytest.raises(ValueError, match="unknown engine 'tgi'; known: sglang, vllm, trtllm"):
        adapter("tgi")


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_every_adapter_answers_for_its_own_defaults(name: str) -> None:
    eng = adapter(name)
    assert eng.name == name and eng.label and eng.default_api in eng.apis
    assert eng.health_paths(eng.default_api)
    values = {"python": "py", "model": "/m", "tp": 2, "port": 1, "host": "h", "config": "c"}
    command = [t.format(**values) for t in eng.default_launch]
    assert eng.model_path(command) == "/m"
    assert not eng.requested_speculation(command).on
    assert eng.check_command(command) is None
    for api in eng.apis:
        path, body = eng.request(api, [{"role": "user", "content": "hi"}], RequestSpec(8))
        assert path.startswith("/") and body["stream"] is True
        assert eng.stream_parser(api) is not eng.stream_parser(api)  # one per request
    assert eng.accept_length(10.0, 4.0, 6.0) is not None  # each engine's own definition


def test_forced_acceptance_knobs() -> None:
    sg = adapter("sglang").forced_accept(["x", "--speculative-algorithm", "EAGLE"], 3.5)
    assert sg.command == ("x", "--speculative-algorithm", "EAGLE")
    assert dict(sg.env) == {
        "SGLANG_SIMULATE_ACC_LEN": "3.5",
        "SGLANG_SIMULATE_ACC_METHOD": "match-expected",
        "SGLANG_SIMULATE_ACC_TOKEN_MODE": "real-draft-token",
    }
    spec = '{"method": "ngram", "num_speculative_tokens": 3}'
    vl = adapter("vllm").forced_accept(["x", "--speculative-config", spec, "--port", "1"], 2.0)
    cfg = json.loads(vl.command[2])
    assert cfg == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_length": 2.0,
    }
    assert vl.command[3:] == ("--port", "1") and not vl.env
    with pytest.raises(ValueError, match="needs a --speculative-config"):
        adapter("vllm").forced_accept(["x"], 2.0)
    with pytest.raises(ValueError, match="needs a command with --speculative-algorithm"):
        adapter("sglang").forced_accept(["x"], 2.0)
    with pytest.raises(ValueError, match="at least 1"):
        adapter("sglang").forced_accept(["--speculative-algorithm", "EAGLE"], 0.5)
    with pytest.raises(ValueError, match="TensorRT-LLM has no forced acceptance"):
        adapter("trtllm").forced_accept(["x"], 2.0)


def test_log_stamps_in_each_engines_form() -> None:
    sg = adapter("sglang").log_stamp("[2026-01-02 03:04:05.250 TP0] Decode batch, #x: 1", 2000)
    assert sg == (datetime(2026, 1, 2, 3, 4, 5, 250000), 0.001)
    vl = adapter("vllm").log_stamp("(APIServer pid=1) INFO 01-02 03:04:05 [loggers.py:1] x", 2026)
    assert vl == (datetime(2026, 1, 2, 3, 4, 5), 1.0)
    assert adapter("sglang").log_stamp("INFO 01-02 03:04:05 x", 2026) is None
    assert adapter("trtllm").log_stamp("INFO:     Application startup complete.", 2026) is None

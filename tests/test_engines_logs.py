"""Engine log lines into the same live series, and what a command asks for."""

from __future__ import annotations

import pytest

from specbench_tui.bench.logparse import LogParser
from specbench_tui.engines import sglang, vllm
from tests.support.replay import FIXTURES


def lines(path: str) -> list[str]:
    text = (FIXTURES / path).read_text()
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


def test_sglang_scheduler_lines_from_its_source() -> None:
    parser = LogParser()
    prefill, plain, gdn, swa, access, ready = (
        parser.parse(ln) for ln in lines("sglang/scheduler.log")
    )
    assert prefill == {
        "new_seq": 1.0,
        "new_token": 27.0,
        "cached_token": 0.0,
        "token_usage": 0.0,
        "running_req": 0.0,
        "queue_req": 0.0,
        "input_throughput": 0.0,
        "cuda_graph": 0.0,
        "prefill": 1.0,
    }
    assert plain is not None and plain["accept_len"] == 3.21 and plain["accept_rate"] == 0.74
    assert plain["gen_throughput"] == 412.37 and plain["queue_req"] == 0.0
    assert plain["decode"] == 1.0 and plain["token"] == 68.0
    assert gdn is not None and gdn["token"] == 1234.0 and gdn["mamba_usage"] == 0.04
    assert swa is not None and swa["running_req"] == 2.0 and swa["token_usage"] == 0.10
    assert access is None and ready is None
    assert LogParser.is_ready(lines("sglang/scheduler.log")[-1])


def test_vllm_periodic_lines_use_the_same_keys() -> None:
    parser = LogParser()
    stats = [parser.parse(ln) for ln in lines("vllm/periodic.log")]
    engine = [s for s in stats if s and "gen_throughput" in s]
    spec = [s for s in stats if s and "accept_len" in s]
    assert engine and spec
    line = (
        "(APIServer pid=13870) INFO 12-01 08:05:24 [metrics.py:120] SpecDecoding metrics: Mean "
        "acceptance length: 3.70, Accepted throughput: 21.30 tokens/s, Drafted throughput: 22.50"
        " tokens/s, Accepted: 213 tokens, Drafted: 225 tokens, Per-position acceptance rate: "
        "0.949, 0.899, 0.848, Avg Draft acceptance rate: 94.7%"
    )
    assert parser.parse(line) == {
        "accept_len": 3.70,
        "accepted_throughput": 21.30,
        "drafted_throughput": 22.50,
        "accepted_tokens": 213.0,
        "drafted_tokens": 225.0,
        "accept_rate_pos0": 0.949,
        "accept_rate_pos1": 0.899,
        "accept_rate_pos2": 0.848,
        "accept_rate": pytest.approx(0.947),
        "decode": 1.0,
    }
    line = (
        "(APIServer pid=13870) INFO 12-01 08:05:24 [loggers.py:335] Engine 000: Avg prompt "
        "throughput: 7.6 tokens/s, Avg generation throughput: 28.1 tokens/s, Running: 1 reqs, "
        "Waiting: 2 reqs, CPU KV cache usage: 12.5%, Prefix cache hit rate: 40.0%"
    )
    assert parser.parse(line) == {
        "input_throughput": 7.6,
        "gen_throughput": 28.1,
        "running_req": 1.0,
        "queue_req": 2.0,
        "token_usage": pytest.approx(0.125),
        "prefix_cache_hit_rate": pytest.approx(0.4),
        "decode": 1.0,
    }
    assert LogParser.is_ready("INFO:     Application startup complete.")


def test_vllm_config_line() -> None:
    spec = vllm.config_facts(lines("vllm/startup_spec.log"))
    assert spec == {"version": "0.32.0", "speculative": True, "algorithm": "ngram", "tp": 1}
    nospec = vllm.config_facts(lines("vllm/startup_nospec.log"))
    assert nospec["speculative"] is False and nospec["algorithm"] is None
    assert vllm.config_facts(["nothing here"]) == {}


@pytest.mark.parametrize(
    ("command", "on", "algorithm"),
    [
        (
            ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}'],
            True,
            "ngram",
        ),
        (['--speculative-config={"method":"eagle3","model":"/m"}'], True, "eagle3"),
        (["-sc", '{"model": "/draft"}'], True, "draft_model"),
        (["--speculative-config.method", "mtp"], True, "mtp"),
        (["--max-model-len", "2048"], False, None),
    ],
)
def test_vllm_requested_speculation(command: list[str], on: bool, algorithm: str | None) -> None:
    asked = vllm.ADAPTER.requested_speculation(command)
    assert (asked.on, asked.algorithm) == (on, algorithm)


def test_sglang_requested_speculation() -> None:
    asked = sglang.ADAPTER.requested_speculation(
        ["--speculative-algorithm", "DDTREE", "--tp-size", "2"]
    )
    assert asked.on and asked.algorithm == "DDTREE"
    assert (
        sglang.ADAPTER.requested_speculation(["--speculative-algorithm=EAGLE3"]).algorithm
        == "EAGLE3"
    )
    assert not sglang.ADAPTER.requested_speculation(["--tp-size", "2"]).on

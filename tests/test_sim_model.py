"""The simulator's argument parsing and performance model, without starting a process."""

from __future__ import annotations

import random
import statistics

import pytest

from specbench_tui.sim.cache import PrefixCache
from specbench_tui.sim.config import SimArgsError, parse_args
from specbench_tui.sim.model import PerfModel, classify_prompt
from specbench_tui.sim.textgen import TokenStream, count_tokens


def test_parse_accepts_sglang_command_lines() -> None:
    cfg = parse_args(
        [
            "--model-path",
            "/dev/shm/Qwen3.6-27B",
            "--tp-size=4",
            "--host",
            "127.0.0.1",
            "--port",
            "30001",
            "--attention-backend",
            "triton",
            "--trust-remote-code",
            "--page-size",
            "1",
            "--speculative-algorithm",
            "ddtree",
            "--speculative-ddtree-budget=64",
            "--speculative-ddtree-allow-hybrid-unsafe",
            "--mem-fraction-static",
            "0.85",
            "--json-model-override-args",
            '{"a": -1}',
            "--speed",
            "10",
            "--seed",
            "7",
            "--sim-fault",
            "slow:2.5",
            "--sim-fault=diverge",
        ],
        env={"CUDA_VISIBLE_DEVICES": "4,5,6,7"},
    )
    assert (cfg.model_path, cfg.tp_size, cfg.port) == ("/dev/shm/Qwen3.6-27B", 4, 30001)
    assert cfg.algorithm == "DDTREE" and cfg.ddtree_budget == 64
    assert cfg.extra["attention_backend"] == "triton"
    assert cfg.extra["trust_remote_code"] is True
    assert cfg.extra["speculative_ddtree_allow_hybrid_unsafe"] is True
    assert cfg.extra["page_size"] == "1"
    assert cfg.extra["json_model_override_args"] == '{"a": -1}'
    assert (cfg.speed, cfg.seed, cfg.gpu_ids) == (10.0, 7, (4, 5, 6, 7))
    assert [f.name for f in cfg.faults] == ["slow", "diverge"]
    assert cfg.fault("slow").value == 2.5  # type: ignore[union-attr]


def test_parse_defaults_and_errors() -> None:
    cfg = parse_args(["--tp-size", "2"], env={})
    assert cfg.gpu_ids == (0, 1) and cfg.algorithm is None and cfg.gpu_state_dir is None
    assert parse_args([], env={"SPECBENCH_SIM_STATE": "/tmp/x"}).gpu_state_dir == "/tmp/x"
    for bad in (["--tp-size", "x"], ["--sim-fault", "explode"], ["stray"], ["--speed", "0"]):
        with pytest.raises(SimArgsError):
            parse_args(bad, env={})


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Translate the following sentence into French: good morning", "translate"),
        ("Summarize the following article in three sentences. The city council...", "summarize"),
        ("Fix the bug:\n```python\ndef add(a, b):\n    return a - b\n```", "code"),
        ("Tom has 12 apples and gives away 5. How many apples does he have left?", "math"),
        ("What makes a good weekend trip in autumn?", "chat"),
    ],
)
def test_classify_prompt(text: str, kind: str) -> None:
    assert classify_prompt(text) == kind


def _tokens_per_s(args: list[str], kind: str = "code", batch: int = 1) -> float:
    model = PerfModel(parse_args(args, env={}))
    return batch * model.mean_accept(kind) * 1000 / model.step_cost(batch).total_ms


def test_speculation_speeds_up_and_ddtree_peaks_mid_budget() -> None:
    ar = _tokens_per_s([])
    dflash = _tokens_per_s(["--speculative-algorithm", "DFLASH"])
    ddtree = {
        b: _tokens_per_s(
            ["--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", str(b)]
        )
        for b in (8, 16, 32, 64, 128, 256)
    }
    assert dflash > 3 * ar
    best = max(ddtree, key=ddtree.__getitem__)
    assert best in (32, 64)
    assert ddtree[best] > dflash and ddtree[256] < ddtree[best]
    assert _tokens_per_s(["--tp-size", "8"]) > _tokens_per_s(["--tp-size", "4"]) > ar


def test_sampled_accept_length_matches_class_mean() -> None:
    model = PerfModel(parse_args(["--speculative-algorithm", "DFLASH"], env={}))
    rng = random.Random(1)
    for kind, target in (("code", 4.5), ("translate", 2.5)):
        p = model.token_accept_prob(kind, sampled=False)
        mean = statistics.fmean(model.sample_accept(rng, p) for _ in range(20000))
        assert mean == pytest.approx(target, rel=0.05)


def test_token_stream_is_independent_of_chunking() -> None:
    a = TokenStream("prompt", temperature=0, seed=0, nonce=1, diverge=False)
    b = TokenStream("prompt", temperature=0, seed=9, nonce=2, diverge=False)
    assert "".join(a.next_words(50)) == "".join(b.next_words(3) + b.next_words(47))
    c = TokenStream("prompt", temperature=0, seed=0, nonce=1, diverge=True)
    assert "".join(c.next_words(50)) != "".join(
        TokenStream("prompt", temperature=0, seed=0, nonce=1, diverge=False).next_words(50)
    )


def test_prefix_cache_matches_longest_prefix() -> None:
    cache = PrefixCache()
    first = "x" * 1000
    assert cache.match(first) == 0
    cache.insert(first + "answer" * 20)
    hit = cache.match(first + "answer" * 20 + "more" * 100)
    assert count_tokens(first) <= hit < count_tokens(first + "answer" * 20 + "more" * 100)
    assert cache.match(first) == count_tokens(first) - 1  # the last token is always computed

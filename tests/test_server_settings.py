"""A server's effective settings, read from what real engines report, and which keys make two
servers incomparable (engines/settings.py)."""

from __future__ import annotations

import json
from pathlib import Path

from specbench_tui.engines import settings
from specbench_tui.engines.settings import counts, differing, from_command, from_log, said

FIXTURES = Path(__file__).parent / "fixtures"
SGLANG = FIXTURES / "sglang-0.5.23-cpu"
VLLM = FIXTURES / "vllm"


def _info(which: str) -> dict:
    return json.loads((SGLANG / which / "server_info.json").read_text())


def test_two_real_sglang_servers_differ_in_their_one_changed_argument() -> None:
    # The two servers were started alike but for --incremental-streaming-output; their
    # random seeds and start-up timings differ too, and say nothing of what was measured.
    ar, inc = settings.from_server_info(_info("ar")), settings.from_server_info(_info("inc"))
    assert ar["random_seed"] != inc["random_seed"]
    assert differing(ar, inc) == ["incremental_streaming_output"]
    assert said(ar, inc, ["incremental_streaming_output"]) == (
        "incremental_streaming_output: False vs True"
    )


def test_a_real_sglang_server_against_itself_with_speculation_changed_is_comparable() -> None:
    ar = _info("ar")
    spec = {**ar, "speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 4}
    assert differing(ar, spec) == []
    # ... but not when the engine also turned a scheduling knob, as DDTree needs.
    spec["disable_overlap_schedule"] = not ar["disable_overlap_schedule"]
    spec["cuda_graph_max_bs"] = 8
    assert differing(ar, spec) == ["cuda_graph_max_bs", "disable_overlap_schedule"]


def test_real_vllm_non_default_args_of_a_speculative_and_a_plain_server_agree() -> None:
    spec = from_log((VLLM / "startup_spec.log").read_text().splitlines())
    plain = from_log((VLLM / "startup_nospec.log").read_text().splitlines())
    assert spec is not None and plain is not None
    assert spec["speculative_config"]["method"] == "ngram"
    assert spec["port"] != plain["port"]
    # Port, the per-request metrics switch and the speculative config are not settings the
    # comparison holds equal.
    assert differing(spec, plain) == []
    # A key only one side sets is at vLLM's default on the other.
    plain2 = {**plain, "max_num_batched_tokens": 512}
    assert differing(spec, plain2) == ["max_num_batched_tokens"]
    assert said(spec, plain2, ["max_num_batched_tokens"]) == (
        "max_num_batched_tokens: default vs 512"
    )


def test_a_log_without_the_line_or_with_a_broken_one_has_no_settings() -> None:
    assert from_log(["INFO started"]) is None
    assert from_log(["INFO 12-01 [api_utils.py:286] non-default args: {'a': open('x')}"]) is None


def test_the_plans_command_is_read_flag_by_flag() -> None:
    cmd = ["python", "-m", "x", "--tp", "2", "--dtype=bf16", "--enforce-eager", "--port", "9"]
    got = from_command(cmd)
    assert got == {"tp": "2", "dtype": "bf16", "enforce_eager": True, "port": "9"}
    other = from_command([*cmd[:-2], "--block-size", "16", "--port", "10"])
    assert differing(got, other) == ["block_size"]


def test_values_spelled_differently_are_the_same() -> None:
    assert differing({"a": "8", "b": [1, 2]}, {"a": 8, "b": (1, 2)}) == []


def test_which_keys_count() -> None:
    for key in (
        "disable_overlap_schedule",
        "cuda_graph_max_bs",
        "attention_backend",
        "max_running_requests",
        "model_path",
        "dtype",
    ):
        assert counts(key), key
    for key in (
        "port",
        "nccl_port",
        "host",
        "random_seed",
        "log_level",
        "enable_metrics",
        "speculative_algorithm",
        "num_speculative_tokens",
        "speculative_config",
        "startup_time",
        "served_model_name",
    ):
        assert not counts(key), key


def test_capacity_settings_count_only_where_the_load_reaches_them() -> None:
    a = {"max_running_requests": 32, "max_total_num_tokens": 455408, "dtype": "bf16"}
    b = {"max_running_requests": 48, "max_total_num_tokens": 507288, "dtype": "bf16"}
    assert differing(a, b) == []  # one request at a time: neither cap binds
    assert differing(a, b, 8) == []  # tokens in flight not known: the pool is not judged
    assert differing(a, b, 8, need=8 * 2000) == []  # 16,000 tokens never fill either pool
    assert differing(a, b, 8, need=500_000) == ["max_total_num_tokens"]
    assert differing(a, b, 32) == ["max_running_requests"]
    # A cap one side leaves at its default might bind: it counts under any concurrency.
    assert differing({"max_num_seqs": 8}, {}, 2) == ["max_num_seqs"]
    assert differing({"max_num_seqs": 8}, {}) == []
    # The memory behind the pool counts under concurrency where the pool is not reported.
    share_a, share_b = {"gpu_memory_utilization": 0.8}, {"gpu_memory_utilization": 0.7}
    assert differing(share_a, share_b) == []
    assert differing(share_a, share_b, 4) == ["gpu_memory_utilization"]
    assert differing({**share_a, **a}, {**share_b, **b}, 4, need=100) == []

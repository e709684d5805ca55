"""Plan lint at --dry-run: relaxed acceptance, simulated acceptance set by hand or without
real draft tokens, and ignore_eos in acceptance cells are warnings that say what they cost;
a plan that forces acceptance through ``forced_accept`` gets none."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench_tui.plan.loader import load_plan
from specbench_tui.plan.review import render_json, render_text, review

PLAN = """\
[campaign]
name = "lint"
baseline = "ar"

[hosts.h]
ssh = "gpu1"
gpus = 2

[server]
model = "/m"
{server}

[configs.ar]

[configs.spec]
args = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3"{args}]
{config}

[matrix]
configs = ["ar", "spec"]
tp = [1, 2]

[workloads.single]
kind = "single"
prompts = ["chat"]
samples = 1
max_tokens = [32]
"""


def _warnings(tmp_path: Path, *, args: str = "", config: str = "", server: str = "") -> list[str]:
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(args=args, config=config, server=server))
    r = review(load_plan(path), tmp_path / "results")
    assert render_json(r)["warnings"] == list(r.warnings)
    text = render_text(r)
    assert all(f"warning: {w}" in text for w in r.warnings)
    return list(r.warnings)


def test_a_plain_or_forced_plan_has_no_warning(tmp_path: Path) -> None:
    assert _warnings(tmp_path) == []
    assert _warnings(tmp_path, config="forced_accept = [2, 3.5]") == []


@pytest.mark.parametrize(
    "flag",
    ['"--speculative-accept-threshold-single", "0.7"', '"--speculative-accept-threshold-acc=0.5"'],
)
def test_relaxed_acceptance_thresholds_below_one_warn(tmp_path: Path, flag: str) -> None:
    (w,) = _warnings(tmp_path, args=", " + flag)
    assert w.startswith("config spec: --speculative-accept-threshold-")  # once, not per TP
    assert "lossy" in w and "not the baseline's" in w
    assert _warnings(tmp_path, args=', "--speculative-accept-threshold-single", "1.0"') == []


def test_simulated_acceptance_by_hand_and_in_the_fixed_token_mode_warn(tmp_path: Path) -> None:
    by_hand, fixed = _warnings(tmp_path, config='env = { SGLANG_SIMULATE_ACC_LEN = "3" }')
    assert "not marked forced" in by_hand and "use forced_accept" in by_hand
    assert "token id 100" in fixed and "real-draft-token" in fixed
    (only,) = _warnings(
        tmp_path,
        config='env = { SGLANG_SIMULATE_ACC_LEN = "3", '
        'SGLANG_SIMULATE_ACC_TOKEN_MODE = "real-draft-token" }',
    )
    assert "not marked forced" in only


def test_vllm_synthetic_acceptance_by_hand_warns(tmp_path: Path) -> None:
    spec = '{{"method": "ngram", "num_speculative_tokens": 3, "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2}}'  # noqa: E501
    text = PLAN.replace('model = "/m"', 'model = "/m"\nengine = "vllm"').replace(
        '["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3"{args}]',
        f"['--speculative-config', '{spec}']",
    )
    path = tmp_path / "plan.toml"
    path.write_text(text.replace("{config}", "").replace("{server}", ""))
    (w,) = review(load_plan(path), tmp_path / "results").warnings
    assert "synthetic" in w and "not marked forced" in w


def test_ignore_eos_in_acceptance_cells_warns(tmp_path: Path) -> None:
    (w,) = _warnings(tmp_path, args=""", "--json-model-override-args", '{{"ignore_eos": true}}'""")
    assert "ignore_eos" in w and "overstate" in w
    # Not where nothing is accepted (autoregressive) and not on forced cells.
    assert _warnings(tmp_path, server='env = { X = "ignore_eos" }') == [
        "config spec: 'X=ignore_eos' asks for ignore_eos in acceptance cells: past the end of "
        "its answer a model writes degenerate, repetitive text that drafters predict easily, "
        "so the accept length and speed-up overstate real use; leave ignore_eos out where "
        "acceptance is measured"
    ]

"""Forced acceptance (``forced_accept``): the plan axis, each engine's knob in the expanded
server, the bounds a plan is held to, the simulator's forced mode and the check that a forced
cell measured the accept length it was forced to (a knob the engine ignores fails it)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import polars as pl
import pytest
from conftest import MINIMAL_PLAN

from specbench_tui.bench.forced import forced_verdict, measured_accept
from specbench_tui.engine.campaign import Campaign, CampaignOptions
from specbench_tui.errors import InputError
from specbench_tui.plan.expand import expand
from specbench_tui.plan.loader import load_plan
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.sim.config import SimArgsError, parse_args
from specbench_tui.sim.model import PerfModel, forced_drafts

VLLM_PLAN = """\
[campaign]
name = "v"
baseline = "ar"

[hosts.cpu]
local = true
gpus = 1

[server]
engine = "vllm"
python = "python3"
model = "m"
port = 18400

[configs.ar]

[configs.ngram]
args = ["--speculative-config", '{{"method": "ngram", "num_speculative_tokens": 3}}']
forced_accept = [1.5, 2.5]

[matrix]
configs = ["ar", "ngram"]
tp = [1]

[workloads.single]
kind = "single"
prompts = ["chat"]
samples = 1
max_tokens = [32]
"""

FORCED_SIM = MINIMAL_PLAN.replace(
    '"--speculative-num-draft-tokens", "8"]',
    '"--speculative-num-draft-tokens", "8"]\nforced_accept = [1.5, 4]',
).replace("[workloads.single]", "[checks]\ngreedy_equivalence = true\n\n[workloads.single]")


def _plan(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path


def test_each_value_is_a_forced_variant_with_vllms_knob(tmp_path: Path) -> None:
    exp = expand(load_plan(_plan(tmp_path, VLLM_PLAN)))
    names = [g.config for g in exp.groups]
    # The real config stays, its forced variants come with it (the matrix names the base).
    assert names == ["ar", "ngram", "ngram-fa1.5", "ngram-fa2.5"]
    by = {g.config: g for g in exp.groups}
    real = by["ngram"].command
    forced = by["ngram-fa2.5"].command
    spec = json.loads(forced[forced.index("--speculative-config") + 1])
    assert spec == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_length": 2.5,
    }
    assert "synthetic" not in " ".join(real)
    assert by["ngram"].forced_accept is None and by["ngram-fa2.5"].forced_accept == 2.5
    cells = {c.config: c for c in exp.cells}
    assert cells["ngram-fa1.5"].forced_accept == 1.5 and cells["ngram"].forced_accept is None
    assert len({c.id for c in exp.cells}) == len(exp.cells)  # a forced cell is its own


def test_sglang_knob_is_environment_and_the_dry_run_says_it(tmp_path: Path) -> None:
    exp = expand(load_plan(_plan(tmp_path, FORCED_SIM.replace("{port}", "31999"))))
    g = next(g for g in exp.groups if g.config == "dflash-fa4")
    env = dict(g.env)
    assert env["SGLANG_SIMULATE_ACC_LEN"] == "4"
    assert env["SGLANG_SIMULATE_ACC_TOKEN_MODE"] == "real-draft-token"
    real = next(g for g in exp.groups if g.config == "dflash")
    assert "SGLANG_SIMULATE_ACC_LEN" not in dict(real.env)


@pytest.mark.parametrize(
    ("edit", "where", "says"),
    [
        ("[1.5, 4.5]", "configs.ngram.forced_accept[1]", "4.5 is above k + 1 = 4"),
        ("[0.5]", "configs.ngram.forced_accept[0]", "greater than or equal to 1"),
    ],
)
def test_values_outside_one_to_k_plus_one_are_located_errors(
    tmp_path: Path, edit: str, where: str, says: str
) -> None:
    text = VLLM_PLAN.replace("forced_accept = [1.5, 2.5]", f"forced_accept = {edit}")
    with pytest.raises(InputError) as e:
        load_plan(_plan(tmp_path, text))
    assert where in str(e.value) and says in str(e.value)


def test_forcing_a_config_without_speculation_is_an_error(tmp_path: Path) -> None:
    text = VLLM_PLAN.replace("[configs.ar]", "[configs.ar]\nforced_accept = [2]")
    with pytest.raises(InputError, match=r"configs\.ar\.forced_accept: config 'ar' runs no spec"):
        load_plan(_plan(tmp_path, text))


def test_sim_draws_forced_acceptance_as_vllms_schedule() -> None:
    rng = random.Random(1)
    steps = [1 + forced_drafts(rng, 2.3, 3) for _ in range(20000)]
    assert set(steps) == {2, 3}  # minimum variance: floor(L - 1) drafts or one more
    assert abs(sum(steps) / len(steps) - 2.3) < 0.02
    assert {1 + forced_drafts(rng, 9.0, 3) for _ in range(50)} == {4}  # capped by the depth
    cfg = parse_args(
        ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3"],
        env={"SGLANG_SIMULATE_ACC_LEN": "2.5"},
    )
    assert cfg.forced_accept == 2.5 and PerfModel(cfg).mean_accept("chat") == 2.5
    with pytest.raises(SimArgsError, match="at least 1"):
        parse_args([], env={"SGLANG_SIMULATE_ACC_LEN": "0.5"})


def test_forced_verdict_passes_near_and_fails_far_or_unmeasured() -> None:
    ok = forced_verdict("x-fa2.5", 1, 2.5, [("a", 2.41), ("b", 2.56)])
    assert ok.status == "pass" and "2.41-2.56" in ok.text
    far = forced_verdict("x-fa2.5", 1, 2.5, [("a", 2.45), ("b", 3.81)])
    assert far.status == "fail" and "3.81 in b" in far.text and "did not take" in far.text
    none = forced_verdict("x-fa2.5", 1, 2.5, [("a", None)])
    assert none.status == "fail" and "no accept length was measured" in none.text
    assert measured_accept({"accept_length_weighted": None, "accept_length_counters": 2.0}) == 2.0


async def _run(path: Path, tmp_path: Path, *, sim: bool = False) -> tuple[Campaign, int]:
    plan = load_plan(path)
    layout = ResultsLayout.for_campaign(tmp_path / "results", plan.spec.campaign.name)
    c = Campaign.prepare(plan, layout, CampaignOptions(sim=sim))
    return c, await c.run()


@pytest.mark.system
async def test_a_forced_sweep_on_the_simulator_measures_its_values(write_plan, tmp_path) -> None:
    c, code = await _run(write_plan(FORCED_SIM), tmp_path)
    assert code == 0
    for config in ("dflash-fa1.5", "dflash-fa4"):
        v = c.state.checks[("forced_accept", "sim", config, 1)]
        assert v.status == "pass", v.text
    # Greedy equivalence is judged on the real config only.
    assert ("greedy", "sim", "dflash", 1) in c.state.checks
    assert not any(k[0] == "greedy" and "-fa" in k[2] for k in c.state.checks)
    df = pl.read_parquet(c.layout.cells)
    rows = {r["config"]: r for r in df.iter_rows(named=True)}
    assert rows["dflash"]["forced_accept"] is None and rows["dflash-fa4"]["forced_accept"] == 4.0
    assert abs(rows["dflash-fa4"]["accept_length_weighted"] - 4.0) < 0.4
    assert abs(rows["dflash-fa1.5"]["accept_length_weighted"] - 1.5) < 0.15


@pytest.mark.system
async def test_a_rehearsal_of_a_vllm_sweep_forces_through_vllms_knob(tmp_path) -> None:
    # vLLM on CPU refuses synthetic acceptance (README): the stand-in is the simulator, which
    # reads vLLM's --speculative-config as vLLM does, synthetic rejection sampler included.
    text = VLLM_PLAN.replace("18400", "18431").replace("max_tokens = [32]", "max_tokens = [128]")
    c, code = await _run(_plan(tmp_path, text), tmp_path, sim=True)
    assert code == 0
    g = c.state.groups["cpu.ngram-fa2.5.tp1"].group
    assert g is not None and '"synthetic_acceptance_length":2.5' in " ".join(g.command)
    for config, forced in (("ngram-fa1.5", 1.5), ("ngram-fa2.5", 2.5)):
        v = c.state.checks[("forced_accept", "cpu", config, 1)]
        assert v.status == "pass", v.text
        (cell,) = [x for x in c.state.cells.values() if x.config == config]
        assert abs(cell.figures["accept_length_weighted"] - forced) <= 0.1 * forced


@pytest.mark.system
async def test_a_knob_the_server_ignores_fails_the_check(write_plan, tmp_path) -> None:
    text = FORCED_SIM.replace('"8"]', '"8", "--sim-fault", "ignore-forced"]')
    c, code = await _run(write_plan(text.replace("[1.5, 4]", "[1.2]")), tmp_path)
    assert code == 1  # every cell done, yet the campaign fails its check
    v = c.state.checks[("forced_accept", "sim", "dflash-fa1.2", 1)]
    assert v.status == "fail" and "did not take the forced acceptance" in v.text
    (cell,) = [x for x in c.state.cells.values() if x.config == "dflash-fa1.2"]
    assert cell.failed_check and c.state.checks[("greedy", "sim", "dflash", 1)].status == "pass"


def test_the_simulator_reads_vllms_synthetic_acceptance() -> None:
    spec = {"method": "ngram", "num_speculative_tokens": 3}
    cfg = parse_args(["--speculative-config", json.dumps(spec)], env={})
    assert (cfg.algorithm, cfg.num_steps, cfg.forced_accept) == ("EAGLE", 3, None)
    assert cfg.server_info()["speculative_algorithm"] == "ngram"  # as the plan named it
    forced = {**spec, "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.5}
    assert parse_args(["--speculative-config", json.dumps(forced)], env={}).forced_accept == 2.5
    forced["synthetic_acceptance_length"] = 4.5
    with pytest.raises(SimArgsError, match=r"must be in \[1, 4\], got 4.5"):
        parse_args(["--speculative-config", json.dumps(forced)], env={})


# vLLM 0.32 on CPU, asked for the synthetic rejection sampler (its log, shortened): the engine
# core's worker fails warming up the CPU rejection kernel, and the API server's own last
# exception only points above.
VLLM_CPU_REFUSAL = [
    "(Worker pid=20956) ERROR 12-03 12:33:06 [multiproc_executor.py:1063]     assert not "
    'SYNTHETIC_MODE, "Synthetic acceptance not supported with CPU sampling"',
    "(Worker pid=20956) ERROR 12-03 12:33:06 [multiproc_executor.py:1063] AssertionError: "
    "Synthetic acceptance not supported with CPU sampling",
    "(EngineCore pid=13930) ERROR 12-03 12:33:06 [core.py:1510] RuntimeError: Worker failed "
    "with error 'Synthetic acceptance not supported with CPU sampling', please check the stack "
    "trace above for the root cause",
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
    "proc(s): {}",
    "  warnings.warn('resource_tracker: There appear to be %d '",
]


def test_a_start_up_failure_names_the_engines_cause() -> None:
    from specbench_tui.engines.registry import adapter

    assert adapter("vllm").startup_failure(VLLM_CPU_REFUSAL) == (
        "Synthetic acceptance not supported with CPU sampling"
    )
    assert adapter("sglang").startup_failure(VLLM_CPU_REFUSAL) == (
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {}"
    )
    assert adapter("sglang").startup_failure(["Loading weights", "done"]) is None

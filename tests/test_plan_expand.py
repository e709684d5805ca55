"""Plan expansion: the seed campaign's shape, stable content ids, group order, dry-run output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbench_tui.cli import main
from specbench_tui.plan.expand import expand
from specbench_tui.plan.loader import load_plan
from tests.conftest import PLANS

SEED = PLANS / "ddtree-qwen36-ct200.toml"


def test_seed_campaign_shape() -> None:
    exp = expand(load_plan(SEED))
    assert len(exp.groups) == 24
    assert len(exp.cells) == 480
    kinds = {
        k: sum(1 for c in exp.cells if c.kind == k) for k in ("single", "agentic", "concurrency")
    }
    assert kinds == {"single": 360, "agentic": 24, "concurrency": 96}
    # concurrency only on TP4/TP8, as the workload restricts it
    assert {c.tp for c in exp.cells if c.kind == "concurrency"} == {4, 8}
    # ddtree's params expand to six configs with the budget substituted in args and label
    dd = [g for g in exp.groups if g.config.startswith("ddtree-") and g.tp == 1]
    assert [g.config for g in dd] == [f"ddtree-{b}" for b in (8, 16, 32, 64, 128, 256)]
    g16 = next(g for g in dd if g.config == "ddtree-16")
    assert g16.label == "DDTree (budget 16)"
    i = g16.command.index("--speculative-ddtree-budget")
    assert g16.command[i + 1] == "16"
    assert g16.command[:2] == ("/opt/sglang/.venv/bin/python", "-m")
    assert dict(g16.env)["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"] == "1"


def test_groups_ordered_by_tp_each_server_once() -> None:
    exp = expand(load_plan(SEED))
    tps = [g.tp for g in exp.groups]
    assert tps == sorted(tps)
    assert len({g.id for g in exp.groups}) == len(exp.groups)
    # cells of a group are contiguous: its server starts once
    seen: list[str] = []
    for c in exp.cells:
        if not seen or seen[-1] != c.group:
            assert c.group not in seen
            seen.append(c.group)
    # small TP sizes take GPUs from the top, away from GPU 0 where the foreign service sits
    assert next(g for g in exp.groups if g.tp == 1).gpu_ids == (7,)
    assert next(g for g in exp.groups if g.tp == 8).gpu_ids == tuple(range(8))


def test_ids_are_stable_and_content_derived(tmp_path: Path) -> None:
    text = SEED.read_text()
    a = expand(load_plan(SEED))
    b = expand(load_plan(SEED))
    assert [c.id for c in a.cells] == [c.id for c in b.cells]
    assert len({c.id for c in a.cells}) == 480
    changed = tmp_path / "p.toml"
    changed.write_text(
        text.replace(
            '"--speculative-num-draft-tokens", "16"', '"--speculative-num-draft-tokens", "8"'
        )
    )
    c = expand(load_plan(changed))
    before = {x.name: x.id for x in a.cells}
    after = {x.name: x.id for x in c.cells}
    renewed = {n for n in before if before[n] != after[n]}
    assert renewed and all(".dflash." in n for n in renewed)
    assert len(renewed) == sum(1 for n in before if ".dflash." in n)


def test_matrix_exclude(tmp_path: Path) -> None:
    p = tmp_path / "p.toml"
    p.write_text(
        SEED.read_text().replace(
            "tp = [1, 4, 8]\n",
            "tp = [1, 4, 8]\n"
            'exclude = [{ config = "ddtree-256", tp = 1 }, { config = "dflash", tp = 8 }]\n',
        )
    )
    exp = expand(load_plan(p))
    ids = {g.id for g in exp.groups}
    assert "ct200.ddtree-256.tp1" not in ids and "ct200.dflash.tp8" not in ids
    assert len(exp.groups) == 22


def test_dry_run_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(SEED), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "24 service groups, 480 cells" in out
    assert "ddtree-qwen.service" in out
    assert "--speculative-ddtree-budget 256" in out
    assert "estimated wall time" in out and "server start-up" in out
    assert "assumed (default)" in out or "measured (from " in out


def test_dry_run_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(SEED), "--dry-run", "--json"]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out)
    # One document, a line per item of its lists: `head` shows its start, not 248 KB at once.
    lines = out.splitlines()
    assert lines[0] == "{" and lines[1].startswith('"campaign":{') and lines[-1] == "}"
    assert '"cells":[' in lines and max(len(x) for x in lines) < 5000
    start = lines.index('"cells":[') + 1
    cell_lines = lines[start : start + len(doc["cells"])]
    assert [json.loads(x.rstrip(",")) for x in cell_lines] == doc["cells"]
    assert doc["campaign"]["name"] == "ddtree-qwen36-ct200"
    assert len(doc["groups"]) == 24 and len(doc["cells"]) == 480
    cell = doc["cells"][0]
    for key in ("id", "group", "config", "tp", "workload", "kind"):
        assert key in cell
    # A believable estimate for a campaign that took a few hours
    assert 2 * 3600 < doc["estimate_s"] < 10 * 3600


def test_demo_plan_is_small() -> None:
    exp = expand(load_plan(PLANS / "demo.toml"))
    assert {g.host_kind for g in exp.groups} == {"sim"}
    assert len(exp.cells) < 100


def test_sim_rehearsal_keeps_shape_and_uses_simulator() -> None:
    exp = expand(load_plan(SEED), sim=True)
    assert len(exp.groups) == 24 and len(exp.cells) == 480
    g = exp.groups[0]
    assert g.host_kind == "sim" and "specbench_tui.sim" in g.command
    assert "--attention-backend" in g.command  # the server args still reach the simulator


def test_vllm_plan_expands_with_the_engine_defaults() -> None:
    exp = expand(load_plan(PLANS / "vllm-cpu.toml"))
    ar, ngram = exp.groups
    assert (ar.engine, ar.api, ngram.engine, ngram.api) == ("vllm", "openai", "vllm", "openai")
    assert ar.command[1:5] == (
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        ".cache/tiny-qwen3",
    )
    assert ar.command[ar.command.index("--tensor-parallel-size") + 1] == "1"
    assert not ar.speculative and ar.spec_algorithm is None
    assert ngram.speculative and ngram.spec_algorithm == "ngram"
    # Doubled braces in the plan are single braces on the command line: valid JSON.
    cfg = ngram.command[ngram.command.index("--speculative-config") + 1]
    assert json.loads(cfg)["num_speculative_tokens"] == 3


def test_a_config_of_another_engine_gets_that_engines_defaults(write_plan) -> None:  # type: ignore[no-untyped-def]
    plan = write_plan(
        """\
[campaign]
name = "mixed"
[hosts.h]
ssh = "gpu1"
gpus = 2
[server]
model = "/m"
launch = ["{python}", "-m", "sglang.launch_server", "--model-path", "{model}", "--port", "{port}"]
api = "sglang"
[configs.sg]
args = ["--speculative-algorithm", "EAGLE"]
[configs.vl]
engine = "vllm"
served_model_name = "qwen"
[matrix]
configs = ["sg", "vl"]
tp = [2]
[workloads.s]
kind = "single"
prompts = ["chat"]
max_tokens = [8]
"""
    )
    sg, vl = expand(load_plan(plan)).groups
    assert sg.engine == "sglang" and sg.api == "sglang" and "sglang.launch_server" in sg.command
    assert sg.speculative and sg.spec_algorithm == "EAGLE"
    assert vl.engine == "vllm" and vl.api == "openai" and vl.served_model_name == "qwen"
    assert "vllm.entrypoints.openai.api_server" in vl.command and not vl.speculative


def test_dry_run_names_engine_api_and_speculation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(PLANS / "vllm-cpu.toml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "host cpu (local, process, 1 GPUs)" in out
    assert "vLLM, OpenAI completions API, no speculation" in out
    assert "vLLM, OpenAI completions API, speculative (ngram)" in out
    assert main([str(PLANS / "vllm-cpu.toml"), "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(g["engine"], g["speculative"], g["spec_algorithm"]) for g in doc["groups"]] == [
        ("vllm", False, None),
        ("vllm", True, "ngram"),
    ]


def _groups_estimate(tmp_path: Path, checks: str) -> tuple[dict[str, float], list[str]]:
    from specbench_tui.plan.review import review

    text = SEED.read_text().replace("[checks]\n", f"[checks]\n{checks}\n", 1)
    plan = tmp_path / f"seed-{len(checks)}.toml"
    plan.write_text(text)
    est = review(load_plan(plan), tmp_path).estimate
    return est.per_group_s, est.assumptions


def test_the_estimate_counts_the_checks_probes(tmp_path: Path) -> None:
    """The probes sent at the end of groups take time the dry run must count: the noise
    floor on each baseline group (on by default), the state leak on every group."""
    off, _ = _groups_estimate(tmp_path, "noise_floor = false")
    floor, said = _groups_estimate(tmp_path, "")
    leak, leak_said = _groups_estimate(tmp_path, "state_leak = true")
    for gid, t in off.items():
        if ".ar." in gid:
            # 4 requests alone and 32 batched, up to 1024 tokens, at the group's decode rate
            assert floor[gid] - t > 20, gid
        else:
            assert floor[gid] == pytest.approx(t), gid
        assert leak[gid] > floor[gid], gid
    assert any("noise-floor probe on 3 baseline groups" in a for a in said)
    assert any("state-leak probe on every group" in a for a in leak_said)

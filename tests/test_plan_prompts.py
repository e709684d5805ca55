"""What a plan says about its prompts: template files and kwargs, checked and expanded."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from specbench_tui.cli import main
from specbench_tui.engines.tiny_model import CHAT_TEMPLATE
from specbench_tui.plan.expand import expand
from specbench_tui.plan.loader import load_plan
from tests.conftest import MINIMAL_PLAN


def bad(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    code = main([str(path), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_a_missing_template_file_is_one_located_line(
    capsys: pytest.CaptureFixture[str], write_plan: Callable[..., Path]
) -> None:
    path = write_plan(MINIMAL_PLAN.replace("[server]\n", '[server]\nchat_template = "t.jinja"\n'))
    err = bad(capsys, path)
    assert re.search(r"plan\.toml:\d+: server\.chat_template: cannot read .*t\.jinja", err), err


def test_a_broken_template_is_said_with_its_line(
    capsys: pytest.CaptureFixture[str], write_plan: Callable[..., Path]
) -> None:
    path = write_plan(
        MINIMAL_PLAN.replace('label = "AR"', 'label = "AR"\nchat_template = "t.jinja"')
    )
    (path.parent / "t.jinja").write_text("ok\n{% for m in messages %}\n")
    err = bad(capsys, path)
    assert re.search(r"configs\.ar\.chat_template: chat template .*t\.jinja:\d+: not a valid", err)


def test_server_rendering_needs_the_openai_api(
    capsys: pytest.CaptureFixture[str], write_plan: Callable[..., Path]
) -> None:
    path = write_plan(MINIMAL_PLAN.replace("[server]\n", '[server]\nchat_template_on = "server"\n'))
    err = bad(capsys, path)
    assert 'server.chat_template_on: chat_template_on = "server" needs api = "openai"' in err


def test_kwargs_merge_and_ids_move_only_with_them(write_plan: Callable[..., Path]) -> None:
    plain = write_plan(MINIMAL_PLAN, "plain.toml")
    text = MINIMAL_PLAN.replace(
        "[server]\n", "[server]\nchat_template_kwargs = { enable_thinking = true, a = 1 }\n"
    ).replace('label = "AR"', 'label = "AR"\nchat_template_kwargs = { a = 2 }')
    text += "chat_template_kwargs = { enable_thinking = false }\n"  # the workload's
    merged = write_plan(text, "merged.toml")
    before = {c.name: c for c in expand(load_plan(plain)).cells}
    after = {c.name: c for c in expand(load_plan(merged)).cells}
    ar, dflash = after["sim.ar.tp1/single/chat/32"], after["sim.dflash.tp1/single/chat/32"]
    assert dict(ar.chat_template_kwargs) == {"enable_thinking": False, "a": 2}
    assert dict(dflash.chat_template_kwargs) == {"enable_thinking": False, "a": 1}
    assert before["sim.ar.tp1/single/chat/32"].chat_template_kwargs == ()
    assert ar.id != before["sim.ar.tp1/single/chat/32"].id  # another prompt: another cell
    # A plan that says nothing of templates keeps the ids it had (a resume finds its cells).
    again = write_plan(MINIMAL_PLAN, "again.toml")
    assert [c.id for c in expand(load_plan(again)).cells] == [c.id for c in before.values()]


def test_dry_run_shows_the_first_prompt_rendered(
    capsys: pytest.CaptureFixture[str], write_plan: Callable[..., Path]
) -> None:
    path = write_plan(
        MINIMAL_PLAN.replace("[server]\n", '[server]\nchat_template = "t.jinja"\n')
        + "chat_template_kwargs = { enable_thinking = false }\n"
    )
    (path.parent / "t.jinja").write_text(CHAT_TEMPLATE)
    assert main([str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    block = out[out.index("prompts (the first of each set") :]
    assert "chat/chat-" in block and "(ar, dflash" in block and "enable_thinking" in block
    assert re.search(r"template .*t\.jinja \(sha256 [0-9a-f]{12}\)", block)
    assert "    | <|im_start|>assistant" in block and "    | </think>" in block
    assert main([str(path), "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (shown,) = doc["prompts"]
    assert shown["rendered"].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert shown["kwargs"] == {"enable_thinking": False}


def test_a_slurm_job_gets_the_plans_template_file(write_plan: Callable[..., Path]) -> None:
    from specbench_tui.plan.job_files import job_files

    path = write_plan(MINIMAL_PLAN.replace("[server]\n", '[server]\nchat_template = "t/x.jinja"\n'))
    (path.parent / "t").mkdir()
    (path.parent / "t" / "x.jinja").write_text("{{ messages[0]['content'] }}")
    files = job_files(load_plan(path))
    assert files["t/x.jinja"] == "{{ messages[0]['content'] }}"
    assert "plan.toml" in files


def test_temperature_list_is_an_axis_and_sampling_reaches_the_body(
    write_plan: Callable[..., Path],
) -> None:
    from specbench_tui.bench.client import BenchClient, Sampling

    one = {c.name: c for c in expand(load_plan(write_plan(MINIMAL_PLAN, "one.toml"))).cells}
    axis = write_plan(
        MINIMAL_PLAN + "temperature = [0, 1]\ntop_p = 0.9\ntop_k = 20\nseed = 7\n", "axis.toml"
    )
    cells = {c.name: c for c in expand(load_plan(axis)).cells}
    t0, t1 = cells["sim.ar.tp1/single/chat/32/t0"], cells["sim.ar.tp1/single/chat/32/t1"]
    assert (t0.temperature, t1.temperature) == (0.0, 1.0) and t0.id != t1.id
    assert (t1.top_p, t1.top_k, t1.sampling_seed) == (0.9, 20, 7)
    assert "sim.ar.tp1/single/chat/32" in one  # one temperature: the names stay as they were
    sampling = Sampling(t1.temperature, t1.top_p, t1.top_k, t1.sampling_seed)
    msgs = [{"role": "user", "content": "x"}]
    path, body = BenchClient("http://h", "sglang").request_body(msgs, 8, sampling)
    assert path == "/generate"
    assert body["sampling_params"] == {
        "max_new_tokens": 8,
        "temperature": 1.0,
        "top_p": 0.9,
        "top_k": 20,
        "sampling_seed": 7,
    }
    path, body = BenchClient("http://h", "openai", engine="vllm").request_body(msgs, 8, sampling)
    assert path == "/v1/completions"
    assert (body["temperature"], body["top_p"], body["top_k"], body["seed"]) == (1.0, 0.9, 20, 7)
    _, greedy = BenchClient("http://h", "openai", engine="vllm").request_body(msgs, 8, Sampling())
    assert greedy["temperature"] == 0.0 and not {"top_p", "top_k", "seed"} & set(greedy)

"""Prompt-set resolution, loading and sampling; per-cell metric summaries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbench_tui.bench.metrics import SUMMARY_COLUMNS, describe, percentile, summarize
from specbench_tui.bench.workloads import planned_requests, tool_output
from specbench_tui.errors import InputError
from specbench_tui.plan import prompt_sets
from specbench_tui.plan.prompt_sets import (
    Prompt,
    load_named_set,
    load_prompt_set,
    resolve_prompt_set,
    sample_prompts,
)
from specbench_tui.results.cells import Cell
from specbench_tui.results.records import RequestRecord


def write_set(path: Path, n: int, **extra: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"q{i}", "prompt": f"question {i}", **extra} for i in range(n)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    return path


@pytest.fixture
def shipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "shipped"
    write_set(d / "code.jsonl", 3)
    write_set(d / "chat.jsonl", 3)
    monkeypatch.setattr(prompt_sets, "SHIPPED_DIR", d)
    return d


def test_resolution_order(tmp_path: Path, shipped: Path) -> None:
    plan_dir = tmp_path / "plan"
    plan_dir.mkdir()
    assert resolve_prompt_set("code", plan_dir) == shipped / "code.jsonl"
    local = write_set(plan_dir / "prompts" / "code.jsonl", 2)
    assert resolve_prompt_set("code", plan_dir) == local  # beside the plan wins
    own = write_set(plan_dir / "sets" / "mine.jsonl", 2)
    assert resolve_prompt_set("sets/mine.jsonl", plan_dir) == own
    loaded = load_named_set("sets/mine.jsonl", plan_dir)
    assert loaded[0].set_name == "sets/mine.jsonl"


def test_missing_set_lists_shipped(tmp_path: Path, shipped: Path) -> None:
    with pytest.raises(InputError, match=r"'cod'.*shipped sets: chat, code"):
        resolve_prompt_set("cod", tmp_path)
    with pytest.raises(InputError, match=r"nope\.jsonl not found"):
        resolve_prompt_set("nope.jsonl", tmp_path)


def test_load_and_errors(tmp_path: Path) -> None:
    p = write_set(tmp_path / "s.jsonl", 2, system="be brief")
    got = load_prompt_set(p)
    assert got[0] == Prompt(id="q0", prompt="question 0", system="be brief", set_name="s")
    assert got[0].messages()[0] == {"role": "system", "content": "be brief"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": \n')
    with pytest.raises(InputError, match=r"bad\.jsonl:2: not valid JSON"):
        load_prompt_set(bad)
    bad.write_text('{"id": "a", "prompt": "x"}\n\n{"id": "a", "prompt": "y"}\n')
    with pytest.raises(InputError, match=r"bad\.jsonl:3: duplicate id 'a' \(first on line 1\)"):
        load_prompt_set(bad)
    bad.write_text('{"id": "a"}\n')
    with pytest.raises(InputError, match=r"bad\.jsonl:1: \"prompt\" must be"):
        load_prompt_set(bad)
    bad.write_text("\n")
    with pytest.raises(InputError, match="empty"):
        load_prompt_set(bad)


def test_sampling_is_deterministic(tmp_path: Path) -> None:
    ps = load_prompt_set(write_set(tmp_path / "s.jsonl", 20))
    a = sample_prompts(ps, 5, seed=1)
    assert a == sample_prompts(ps, 5, seed=1)
    assert [p.id for p in a] == sorted((p.id for p in a), key=lambda i: int(i[1:]))
    assert len(a) == 5
    assert any(sample_prompts(ps, 5, seed=s) != a for s in range(2, 6))
    assert sample_prompts(ps, None, 1) == ps == sample_prompts(ps, 50, 1)


def test_planned_requests() -> None:
    base = {
        "id": "x",
        "name": "x",
        "group": "g",
        "host": "h",
        "config": "c",
        "tp": 1,
        "workload": "w",
        "prompt_set": "code",
        "max_tokens": 8,
        "concurrency": None,
        "prompts": ("code",),
    }
    single = Cell(kind="single", samples=2, repeats=3, warmup=1, **base)
    assert planned_requests(single) == 6
    assert planned_requests(single, 1) == 3
    assert planned_requests(Cell(kind="single", repeats=2, **base), 5) == 10
    with pytest.raises(ValueError):
        planned_requests(Cell(kind="single", **base))
    assert planned_requests(Cell(kind="agentic", sessions=2, turns=8, **base)) == 16
    assert planned_requests(Cell(kind="concurrency", requests=64, **base)) == 64


def test_tool_output_is_deterministic_and_sized() -> None:
    a = tool_output(512, "s1")
    assert a == tool_output(512, "s1") and a != tool_output(512, "s2")
    assert 512 * 4 <= len(a) < 512 * 4 + 200


def test_percentiles() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0
    assert percentile(list(map(float, range(101))), 90) == 90.0
    assert describe([None, None]) == {"mean": None, "p50": None, "p90": None, "p99": None}


def test_summarize() -> None:
    rows = [
        RequestRecord(
            ttft_s=0.1,
            e2e_s=1.0,
            tpot_s=0.01,
            itl_s=[0.01, 0.03],
            output_tokens=10,
            output_tok_s=10.0,
            accept_length=2.0,
        ),
        RequestRecord(
            ttft_s=0.3,
            e2e_s=2.0,
            tpot_s=0.03,
            itl_s=[0.02],
            output_tokens=30,
            output_tok_s=15.0,
            accept_length=4.0,
        ),
        RequestRecord(error="timeout after 30 s", ttft_s=9.0, itl_s=[5.0], output_tokens=3),
    ]
    s = summarize(rows, wall_s=4.0)
    assert set(s) == set(SUMMARY_COLUMNS)
    assert s["requests"] == 3 and s["errors"] == 1
    assert s["throughput_tok_s"] == pytest.approx(40 / 4.0)
    assert s["ttft_s_mean"] == pytest.approx(0.2) and s["ttft_s_p50"] == pytest.approx(0.2)
    assert s["itl_s_mean"] == pytest.approx(0.02)  # over all gaps of the good requests
    assert s["itl_s_p90"] == pytest.approx(0.028)
    assert s["accept_length_p50"] == pytest.approx(3.0)
    none = summarize([RequestRecord(error="connection refused")])
    assert none["throughput_tok_s"] is None and none["accept_length_mean"] is None
    assert summarize([])["requests"] == 0


def test_rate_figures_and_itl_per_token() -> None:
    from specbench_tui.bench.figures import chunk_tokens, fill_rates, token_gaps

    # Running counts 3, 3 (text grew, count did not), 7, 8: chunks carry 3, 0, 4, 1 tokens.
    assert chunk_tokens([3, 3, 7, 8], 8, 4) == [3, 0, 4, 1]
    assert chunk_tokens([-1, -1], 2, 2) == [1, 1]  # no counts, one token per chunk
    assert chunk_tokens([-1, -1, -1], 7, 3) == []  # no counts, several per chunk: unknown
    # A chunk that carried no token hands its gap to the next one: 0.01 + 0.03 over 4 tokens.
    assert token_gaps([0.01, 0.03, 0.02], [3, 0, 4, 1]) == [
        (pytest.approx(0.01), 4),
        (0.02, 1),
    ]
    assert token_gaps([0.01], []) == []
    r = RequestRecord(ttft_s=0.5, e2e_s=2.5, output_tokens=9, chunks=4)
    fill_rates(r, [3, 3, 7, 9])
    assert r.decode_tok_s == pytest.approx(8 / 2.0)  # TTFT left out
    assert r.e2e_tok_s == pytest.approx(9 / 2.5)  # TTFT included
    assert r.chunk_tokens == [3, 0, 4, 2]
    failed = RequestRecord(ttft_s=0.5, e2e_s=2.5, output_tokens=9, error="timeout after 2 s")
    fill_rates(failed, [])
    assert failed.decode_tok_s is None and failed.e2e_tok_s is None


def test_summary_names_each_figure_and_weighs_itl_by_token() -> None:
    from specbench_tui.bench.metrics import describe_weighted

    rows = [
        RequestRecord(
            ttft_s=0.1,
            e2e_s=1.1,
            itl_s=[0.4, 0.6],
            chunk_tokens=[1, 4, 1],  # 4 tokens at 0.1 s each, then 1 token at 0.6 s
            output_tokens=6,
            output_tok_s=6 / 1.1,
            e2e_tok_s=6 / 1.1,
            decode_tok_s=5.0,
        ),
    ]
    s = summarize(rows, wall_s=2.0)
    assert s["itl_token_s_p50"] == pytest.approx(0.1)  # per token: 0.1 x4, 0.6 x1
    assert s["itl_token_s_mean"] == pytest.approx((0.4 + 0.6) / 5)
    assert s["chunk_gap_s_mean"] == pytest.approx(0.5) == s["itl_s_mean"]  # per SSE event
    assert s["decode_tok_s_p50"] == 5.0 and s["e2e_tok_s_p50"] == pytest.approx(6 / 1.1)
    # Weighted percentiles equal those of the values repeated.
    pairs = [(0.3, 2), (0.1, 3), (0.7, 1), (0.2, 0)]
    flat = [v for v, w in pairs for _ in range(w)]
    assert describe_weighted(pairs) == pytest.approx(describe(flat))

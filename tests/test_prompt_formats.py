"""Standard prompt sets: the formats read, categories as prompt-set values, MT-Bench sessions,
and ``specbench-tui prompts get`` against a local HTTP server.

Every file here is written by the tests in the formats' shapes (FastChat question lines,
HumanEval problems, SPEED-Bench rows); none of the data sets is copied.
"""

from __future__ import annotations

import gzip
import hashlib
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from specbench_tui.cli import main
from specbench_tui.plan import prompt_formats
from specbench_tui.plan.expand import expand
from specbench_tui.plan.loader import load_plan
from specbench_tui.plan.prompt_sets import PromptLibrary, session_tasks
from specbench_tui.results.cells import planned_requests
from tests.conftest import MINIMAL_PLAN, free_port

CATEGORIES = ["writing", "coding", "translation", "qa", "rag"]


def fastchat(path: Path, per_category: int = 2, turns: int = 2) -> Path:
    """A FastChat-format question file: Spec-Bench's shape (two MT-Bench categories with two
    turns, three task categories with one)."""
    rows, qid = [], 80
    for cat in CATEGORIES:
        n_turns = turns if cat in ("writing", "coding") else 1
        for _ in range(per_category):
            qid += 1
            rows.append(
                {
                    "question_id": qid,
                    "category": cat,
                    "turns": [f"{cat} question {qid} turn {t}" for t in range(n_turns)],
                }
            )
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def plan_with(write_plan: Callable[..., Path], tables: str, workloads: str) -> Path:
    text = MINIMAL_PLAN.split("[workloads.single]")[0] + tables + workloads
    return write_plan(text)


def test_spec_bench_groups_mt_bench_categories(tmp_path: Path) -> None:
    path = fastchat(tmp_path / "q.jsonl")
    sb = [q.category for q in prompt_formats.read_questions("spec-bench", path)]
    mt = [q.category for q in prompt_formats.read_questions("mt-bench", path)]
    assert sb[:4] == ["mt_bench"] * 4 and sb[4:] == ["translation"] * 2 + ["qa"] * 2 + ["rag"] * 2
    assert mt[:4] == ["writing", "writing", "coding", "coding"]
    q = prompt_formats.read_questions("mt-bench", path)[0]
    assert q.id == "81" and len(q.turns) == 2


def test_other_formats(tmp_path: Path) -> None:
    he = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(he, "wt", encoding="utf-8") as f:
        for i in range(3):
            f.write(json.dumps({"task_id": f"HumanEval/{i}", "prompt": f"def f{i}():\n"}) + "\n")
    qs = prompt_formats.read_questions("humaneval", he)
    assert [q.id for q in qs] == ["HumanEval-0", "HumanEval-1", "HumanEval-2"]
    assert qs[0].turns == ("def f0():\n",) and qs[0].category is None
    speed = tmp_path / "speed.parquet"
    pl.DataFrame(
        {
            "question_id": ["a", "b"],
            "category": ["coding", "multilingual"],
            "sub_category": ["x", "y"],
            "turns": [["write code"], ["translate", "again"]],
            "multiturn": [False, True],
        }
    ).write_parquet(speed)
    qs = prompt_formats.read_questions("speed-bench", speed)
    assert [(q.id, q.category, q.turns) for q in qs] == [
        ("a", "coding", ("write code",)),
        ("b", "multilingual", ("translate", "again")),
    ]
    own = tmp_path / "own.jsonl"
    own.write_text('{"id": 1, "prompt": "p", "category": "c", "system": "s"}\n')
    (q,) = prompt_formats.read_questions("jsonl", own)
    assert (q.id, q.category, q.system) == ("1", "c", "s")


def test_bad_lines_are_located(tmp_path: Path) -> None:
    bad = tmp_path / "q.jsonl"
    bad.write_text('{"question_id": 1, "category": "qa", "turns": ["x"]}\n{"question_id": 2}\n')
    with pytest.raises(Exception, match=r"q\.jsonl:2: \"category\" must be"):
        prompt_formats.read_questions("mt-bench", bad)
    bad.write_text('{"question_id": 1, "category": "qa", "turns": []}\n')
    with pytest.raises(Exception, match=r"q\.jsonl:1: \"turns\" must be a non-empty list"):
        prompt_formats.read_questions("spec-bench", bad)


def test_categories_become_prompt_sets_of_cells(write_plan: Callable[..., Path]) -> None:
    path = plan_with(
        write_plan,
        '[prompt_sets.sb]\nformat = "spec-bench"\npath = "q.jsonl"\n\n'
        '[prompt_sets.mt]\nformat = "mt-bench"\npath = "q.jsonl"\n'
        'categories = ["coding", "qa"]\n\n',
        '[workloads.single]\nkind = "single"\nprompts = ["sb", "mt", "chat"]\nsamples = "all"\n'
        "max_tokens = [16]\n\n"
        '[workloads.talk]\nkind = "agentic"\nprompts = ["mt"]\nsessions = "all"\nmax_tokens = 8\n',
    )
    fastchat(path.parent / "q.jsonl")
    plan = load_plan(path)
    cells = [c for c in expand(plan).cells if c.config == "ar"]
    single = {c.prompt_set: c for c in cells if c.workload == "single"}
    assert list(single) == [
        "sb/mt_bench",
        "sb/translation",
        "sb/qa",
        "sb/rag",
        "mt/coding",
        "mt/qa",
        "chat",
    ]
    assert single["sb/qa"].name == "sim.ar.tp1/single/sb/qa/16" and single["sb/qa"].samples is None
    lib = plan.prompts
    assert [p.id for p in lib.load("sb/mt_bench")] == ["81", "82", "83", "84"]
    assert all(p.set_name == "sb/qa" for p in lib.load("sb/qa"))
    assert lib.count("mt") == 4  # the table's categories only
    # MT-Bench in an agentic workload: each question a session of its own turns.
    talk = {c.prompt_set: c for c in cells if c.workload == "talk"}
    assert list(talk) == ["mt/coding", "mt/qa"]
    assert talk["mt/coding"].sessions == 2 and planned_requests(talk["mt/coding"]) == 4
    # A one-turn question is a one-turn session: a benchmark's question gets no tool output.
    assert talk["mt/qa"].sessions == 2 and planned_requests(talk["mt/qa"]) == 2


async def test_mt_bench_session_sends_its_second_turn_after_the_first_answer(
    tmp_path: Path,
) -> None:
    """A session of an MT-Bench question against a server that echoes what it got."""
    from aiohttp import web

    from specbench_tui.bench.workloads import run_cell
    from specbench_tui.plan.model import PromptSetSpec
    from specbench_tui.results.cells import Cell, ServiceGroup

    seen: list[str] = []

    async def generate(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append(body["text"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        n = len(seen)
        meta = {"prompt_tokens": 1, "completion_tokens": 1, "finish_reason": {"type": "length"}}
        await resp.write(
            f"data: {json.dumps({'text': f'answer {n}', 'meta_info': meta})}\n\n".encode()
        )
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/generate", generate)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        fastchat(tmp_path / "q.jsonl", per_category=1)
        lib = PromptLibrary(tmp_path, {"mt": PromptSetSpec(format="mt-bench", path="q.jsonl")})
        group = ServiceGroup(
            "h.ar.tp1", "h", "local", "ar", "AR", 1, (0,), port, ("x",), (), "sglang", 60, False
        )
        pool = lib.load("mt/writing")
        cell = Cell(
            id="c", name="c", group=group.id, host="h", config="ar", tp=1, workload="talk",
            kind="agentic", prompt_set="mt/writing", max_tokens=4, concurrency=None,
            prompts=("mt/writing",), sessions=1, turns=4, requests=2,
        )  # fmt: skip
        result = await run_cell(
            cell, group, f"http://127.0.0.1:{port}", campaign="t", attempt=1, seed=0, prompts=lib
        )
    finally:
        await runner.cleanup()
    assert result.complete and [r.turn for r in result.records] == [0, 1]
    q = session_tasks(pool, 1, "talk", 0)[0]
    assert seen[0].endswith(f"user\n{q.prompt}<|im_end|>\n<|im_start|>assistant\n")
    assert seen[1] == (
        seen[0] + f"answer 1<|im_end|>\n<|im_start|>user\n{q.later_turns[0]}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_missing_standard_set_says_how_to_get_it(
    capsys: pytest.CaptureFixture[str],
    write_plan: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    path = plan_with(
        write_plan,
        '[prompt_sets.sb]\nformat = "spec-bench"\n\n',
        '[workloads.single]\nkind = "single"\nprompts = ["sb"]\n',
    )
    assert main([str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "prompt_sets.sb: prompt set 'sb': " in err
    assert "run `specbench-tui prompts get spec-bench` (without internet: download https://" in err
    assert prompt_formats.SOURCES["spec-bench"].sha256 in err  # type: ignore[operator]


def test_unknown_category_is_located(
    capsys: pytest.CaptureFixture[str], write_plan: Callable[..., Path]
) -> None:
    path = plan_with(
        write_plan,
        '[prompt_sets.sb]\nformat = "spec-bench"\npath = "q.jsonl"\ncategories = ["qa", "rgg"]\n\n',
        '[workloads.single]\nkind = "single"\nprompts = ["sb"]\n',
    )
    fastchat(path.parent / "q.jsonl")
    assert main([str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "prompt_sets.sb.categories[1]: no category 'rgg'; did you mean 'rag'?" in err


def test_dry_run_lists_each_set(
    capsys: pytest.CaptureFixture[str], write_plan: Callable[..., Path]
) -> None:
    path = plan_with(
        write_plan,
        '[prompt_sets.sb]\nformat = "spec-bench"\npath = "q.jsonl"\n\n',
        '[workloads.single]\nkind = "single"\nprompts = ["sb", "chat"]\nsamples = 1\n',
    )
    fastchat(path.parent / "q.jsonl")
    assert main([str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert (
        "  sb: 10 prompts; Spec-Bench (hemingkx/Spec-Bench" in out and "licence Apache-2.0" in out
    )
    assert "    mt_bench 4, translation 2, qa 2, rag 2" in out
    assert "  chat: " in out and "shipped with specbench-tui" in out
    assert "single/sb/qa/1024" in out  # the default cap on every answer
    assert main([str(path), "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    sb = next(s for s in doc["prompt_sets"] if s["name"] == "sb")
    assert sb["counts"] == {"mt_bench": 4, "translation": 2, "qa": 2, "rag": 2}
    assert {c["prompt_set"] for c in doc["cells"]} >= {"sb/mt_bench", "sb/rag", "chat"}


# -- prompts get ------------------------------------------------------------------------------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, bytes]]:
    """A local HTTP server holding one question file."""
    root = tmp_path / "www"
    root.mkdir()
    data = fastchat(root / "question.jsonl").read_bytes()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, *a) -> None:  # type: ignore[no-untyped-def]
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/question.jsonl", data
    finally:
        server.shutdown()
        server.server_close()


def test_prompts_get_checks_the_pinned_hash(
    served: tuple[str, bytes],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, data = served
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    pinned = replace(
        prompt_formats.SOURCES["spec-bench"], url=url, sha256=hashlib.sha256(data).hexdigest()
    )
    monkeypatch.setitem(prompt_formats.SOURCES, "spec-bench", pinned)
    assert main(["prompts", "get", "spec-bench"]) == 0
    dest = tmp_path / "cache" / "prompts" / "spec-bench.jsonl"
    assert dest.read_bytes() == data
    assert "sha256" in capsys.readouterr().out
    assert main(["prompts", "get", "spec-bench"]) == 0
    assert "already at" in capsys.readouterr().out
    # Another file behind the URL: nothing is saved over the good one.
    monkeypatch.setitem(prompt_formats.SOURCES, "spec-bench", replace(pinned, sha256="0" * 64))
    assert main(["prompts", "get", "spec-bench", "--force"]) == 1
    err = capsys.readouterr().err
    assert f"has sha256 {pinned.sha256}, not the pinned {'0' * 64}; not saved" in err
    assert dest.read_bytes() == data
    # The cached file is what a plan's table reads when it gives no path.
    lib = PromptLibrary(tmp_path, {"sb": prompt_formats_spec("spec-bench")})
    assert lib.count("sb") == 10


def prompt_formats_spec(fmt: str):  # type: ignore[no-untyped-def]
    from specbench_tui.plan.model import PromptSetSpec

    return PromptSetSpec(format=fmt)  # type: ignore[arg-type]


def test_prompts_get_without_network_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path / "cache"))
    dead = replace(
        prompt_formats.SOURCES["mt-bench"], url=f"http://127.0.0.1:{free_port()}/q.jsonl"
    )
    monkeypatch.setitem(prompt_formats.SOURCES, "mt-bench", dead)
    assert main(["prompts", "get", "mt-bench"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "cannot download http://127.0.0.1:" in err
    assert "without internet: download it on a machine that has it (curl -fLo mt-bench.jsonl" in err
    assert str(tmp_path / "cache" / "prompts" / "mt-bench.jsonl") in err
    assert not (tmp_path / "cache" / "prompts" / "mt-bench.jsonl").exists()

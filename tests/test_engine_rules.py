"""The engine's pure rules, without a process: how an attempt is judged, whether a dead
server gets another, which cells a run takes, and how much packing saves the seed campaign."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import MINIMAL_PLAN, PLANS

from specbench_tui.engine.selection import select_cells
from specbench_tui.engine.verdict import Verdict, judge, restart_allowed
from specbench_tui.errors import InputError
from specbench_tui.plan.expand import expand
from specbench_tui.plan.loader import load_plan
from specbench_tui.plan.review import render_text, review

CLEAN: dict[str, Any] = {
    "requests": 10,
    "errors": [],
    "complete": True,
    "stop": None,
    "server_alive": True,
    "max_error_share": 0.2,
}


def _judge(**kw: Any) -> Verdict:
    return judge(**(CLEAN | kw))


def test_judge_every_branch() -> None:
    assert _judge() == Verdict("done")
    # the server died (its process exited, or a request was lost to it): an infrastructure
    # fault, never a result: set aside to run again on a new server, whatever the rows say
    assert _judge(server_alive=False, errors=["boom"] * 3) == Verdict("requeue", "server died")
    assert _judge(server_dead=True) == Verdict("requeue", "server died")
    assert _judge(server_dead=True, errors=["connection refused"]).outcome == "requeue"
    assert _judge(server_alive=False, complete=False).reason == "server died"
    # more failed requests than the plan allows: failed, naming the most common error
    many = _judge(errors=["timeout", "reset", "timeout"])
    assert many == Verdict("failed", "3 of 10 requests failed; most often: timeout")
    assert _judge(errors=["timeout", "reset"]) == Verdict("done")  # 20% is not above 20%
    assert _judge(requests=0, errors=[]) == Verdict("done")  # nothing measured, no share
    # the operator's stops
    assert _judge(stop="skip") == Verdict("skipped", "skipped while running")
    assert _judge(stop="abort") == Verdict("requeue", "aborted")
    assert _judge(stop="pause") == Verdict("requeue", "interrupted")
    assert _judge(stop="restart") == Verdict("requeue", "interrupted")
    assert _judge(complete=False) == Verdict("requeue", "interrupted")
    # the link to the host dropped: set aside, even when the server looks dead or the rows
    # look bad (neither is known yet); a skip still skips
    assert _judge(link_dropped=True, server_alive=False) == Verdict("requeue", "host unreachable")
    assert _judge(link_dropped=True, errors=["x"] * 9) == Verdict("requeue", "host unreachable")
    assert _judge(link_dropped=True, stop="skip") == Verdict("skipped", "skipped while running")
    # the operator's skip outranks a dead server: nothing of the cell is counted either way
    assert _judge(server_alive=False, stop="skip").outcome == "skipped"
    assert _judge(server_dead=True, stop="skip").outcome == "skipped"


def test_restart_allowed_counts_up_to_the_limit() -> None:
    assert restart_allowed(0, 1) and not restart_allowed(1, 1)
    assert not restart_allowed(0, 0)
    assert [restart_allowed(n, 3) for n in range(5)] == [True, True, True, False, False]


def _cells(write_plan: Any) -> list[Any]:
    text = MINIMAL_PLAN.replace("max_tokens = [32]", "max_tokens = [32, 64]")
    return expand(load_plan(write_plan(text))).cells


def _state(**status: str) -> Any:
    """A reduced log as select_cells reads it: each cell's status by id."""
    return SimpleNamespace(cells={cid: SimpleNamespace(status=s) for cid, s in status.items()})


def test_select_cells_resume_only_and_rerun(write_plan) -> None:
    cells = _cells(write_plan)
    ids = [c.id for c in cells]
    assert len(cells) == 4  # ar and dflash, two lengths each
    a, b, c, d = ids
    # a fresh run takes all, in plan order
    assert select_cells(_state(), cells) == ids
    # a resume: ended cells stay ended; interrupted (running) and pending ones run
    resumed = _state(**{a: "done", b: "failed", c: "running", d: "skipped"})
    assert select_cells(resumed, cells) == [c]
    # --rerun-failed: a resume plus the failed ones (never-run and interrupted cells too)
    assert select_cells(resumed, cells, rerun_failed=True) == [b, c]
    queued = _state(**{a: "failed", b: "done"})  # c and d never ran: a crashed rerun's cells
    assert select_cells(queued, cells, rerun_failed=True) == [a, c, d]
    with pytest.raises(InputError, match="no failed cells to rerun, and none left to run"):
        select_cells(
            _state(**{a: "done", b: "done", c: "skipped", d: "done"}),
            cells,
            rerun_failed=True,
            where="res/t",
        )
    # --only narrows, by glob on the id or the name, or a part of the name
    dflash = [x.id for x in cells if x.config == "dflash"]
    assert select_cells(_state(), cells, only="*dflash*") == dflash
    assert select_cells(_state(), cells, only="dflash") == dflash
    assert select_cells(_state(), cells, only=a) == [a]
    assert select_cells(resumed, cells, only="*dflash*") == [x for x in dflash if x == c]
    with pytest.raises(InputError, match="matches no cell"):
        select_cells(_state(), cells, only="nothing-like-it")
    # a console's rerun adds ended cells by id, keeping plan order
    assert select_cells(resumed, cells, rerun=[d, a]) == [a, c, d]


def test_the_seed_campaign_packed_takes_at_most_half_the_time(tmp_path: Path) -> None:
    seed = (PLANS / "ddtree-qwen36-ct200.toml").read_text()
    assert "pack" not in seed.split("[hosts.", 1)[0]  # the seed itself does not pack
    packed = tmp_path / "seed-packed.toml"
    packed.write_text(seed.replace('baseline = "ar"\n', 'baseline = "ar"\npack = true\n', 1))
    r = review(load_plan(packed), tmp_path)
    ratio = r.estimate.total_s / r.estimate.unpacked_s
    assert 0.3 < ratio <= 0.5, ratio
    unpacked = review(load_plan(PLANS / "ddtree-qwen36-ct200.toml"), tmp_path)
    assert unpacked.estimate.unpacked_s == pytest.approx(r.estimate.unpacked_s)
    assert f"({ratio:.0%} of that)" in render_text(r)

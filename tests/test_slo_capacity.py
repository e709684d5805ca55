"""The SLO figures (goodput, the share meeting the SLO and its Wilson interval), the capacity
search's bisection, and the [slo] table and capacity workload of a plan."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from specbench_tui.bench.client import Completion
from specbench_tui.bench.figures import (
    Span,
    slo_columns,
    slo_figures,
    slo_good,
    slo_said,
    wilson_interval,
)
from specbench_tui.bench.workloads import run_cell
from specbench_tui.errors import InputError
from specbench_tui.plan.capacity import CapacitySearch, search
from specbench_tui.plan.estimate import capacity_points, estimate
from specbench_tui.plan.expand import expand
from specbench_tui.plan.loader import load_plan
from specbench_tui.plan.prompt_sets import PromptLibrary
from specbench_tui.results.cells import Cell, ServiceGroup
from specbench_tui.results.records import SLO_COLUMNS, Measurement

# -- the figures ------------------------------------------------------------------------------


def test_wilson_interval_known_values() -> None:
    lo, hi = wilson_interval(9, 10)  # type: ignore[misc]
    assert (round(lo, 3), round(hi, 3)) == (0.596, 0.982)
    assert wilson_interval(10, 10) == (pytest.approx(0.7225, abs=1e-4), 1.0)
    assert wilson_interval(0, 5)[0] == 0.0  # type: ignore[index]
    assert wilson_interval(0, 0) is None
    # 45 of 50 (0.9): the interval a textbook gives, [0.786, 0.957]
    lo, hi = wilson_interval(45, 50)  # type: ignore[misc]
    assert (round(lo, 3), round(hi, 3)) == (0.786, 0.957)


def _req(
    ttft: float = 0.1, tpot: float | None = 0.02, e2e: float = 1.0, **kw: object
) -> Measurement:
    return Measurement(ttft_s=ttft, tpot_s=tpot, e2e_s=e2e, output_tokens=50, **kw)  # type: ignore[arg-type]


def test_one_token_output_does_not_pass_a_tpot_limit_vacuously() -> None:
    one = Measurement(ttft_s=0.1, e2e_s=0.1, output_tokens=1, tpot_s=None)
    assert not slo_good(one, {"tpot": 0.05})
    assert not slo_good(one, {"ttft": 1.0, "tpot": 0.05})
    assert slo_good(one, {"ttft": 1.0})  # no TPOT limit given: only TTFT applies
    assert slo_good(_req(), {"tpot": 0.05, "ttft": 0.5, "e2e": 2.0})
    assert not slo_good(_req(tpot=0.06), {"tpot": 0.05})
    assert not slo_good(_req(ttft=0.6), {"ttft": 0.5, "tpot": 0.05})
    assert not slo_good(_req(e2e=2.5), {"e2e": 2.0})


def test_failed_requests_count_as_not_good() -> None:
    rows = [_req() for _ in range(8)] + [
        Measurement(error="timeout"),
        Measurement(ttft_s=0.1, e2e_s=0.2, tpot_s=0.01, output_tokens=9, error="HTTP 500"),
    ]
    f = slo_figures(rows, 4.0, {"tpot": 0.05}, 0.9)
    assert (f.requests, f.good) == (10, 8)
    assert f.share == 0.8
    assert f.goodput == 2.0  # 8 good requests over a 4 s window
    cols = slo_columns(rows, 4.0, {"tpot": 0.05}, 0.9)
    assert set(cols) == set(SLO_COLUMNS)
    assert cols["slo_share_lo"] == pytest.approx(wilson_interval(8, 10)[0])  # type: ignore[index]
    assert cols["slo_met"] is False
    assert cols["slo_limits"] == "TPOT <= 50ms"
    assert slo_said(cols).startswith("SLO met by 80% [0.49, 0.94], goodput 2.00 req/s")


def test_a_level_passes_on_the_lower_bound_not_the_share() -> None:
    # Every one of 20 requests good: the share is 1, its lower bound 0.839 < 0.9.
    rows = [_req() for _ in range(20)]
    assert not slo_figures(rows, 1.0, {"tpot": 0.05}, 0.9).met
    assert slo_figures(rows * 2, 1.0, {"tpot": 0.05}, 0.9).met  # 40 of 40: 0.912


# -- the search -------------------------------------------------------------------------------


@pytest.mark.parametrize("capacity", [1, 2, 17, 37, 63])
def test_bisection_finds_a_known_capacity(capacity: int) -> None:
    s = search([1, 64], 8, lambda lv: lv <= capacity)
    assert s.passed == capacity
    assert s.failed == capacity + 1
    assert s.note == "bracket closed"
    assert len(s.tried) <= 8


def test_bisection_tries_the_listed_levels_first() -> None:
    listed = [1, 2, 4, 8, 16, 32, 64]
    s = search(listed, 12, lambda lv: lv <= 20)
    order = list(s.tried)
    assert order[:2] == [1, 64]
    first_unlisted = next(i for i, lv in enumerate(order) if lv not in listed)
    assert all(lv in listed for lv in order[:first_unlisted])
    assert (s.passed, s.failed) == (20, 21)


def test_bisection_ends_outside_the_bracket_and_at_the_cap() -> None:
    below = search([4, 64], 8, lambda lv: False)
    assert list(below.tried) == [4] and below.passed is None and below.failed == 4
    assert below.note.startswith("below the bracket")
    above = search([4, 64], 8, lambda lv: True)
    assert list(above.tried) == [4, 64] and above.passed == 64 and above.failed is None
    assert above.note.startswith("at least the top")
    capped = search([1, 1000], 4, lambda lv: lv <= 300)
    assert len(capped.tried) == 4
    assert capped.passed is not None and capped.failed is not None
    assert capped.passed <= 300 < capped.failed
    assert "max_points" in capped.note
    with pytest.raises(ValueError):
        CapacitySearch([8, 8], 4)


# -- the plan ---------------------------------------------------------------------------------

PLAN = """
[campaign]
name = "cap"
baseline = "ar"

[hosts.sim]
sim = true
gpus = 2

[configs.ar]
[configs.dflash]
args = ["--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "16"]

[matrix]
configs = ["ar", "dflash"]
tp = [1, 2]

{slo}

[workloads.cap]
kind = "capacity"
levels = [1, 64]
requests = {requests}
max_points = 6

[workloads.conc]
kind = "concurrency"
levels = [1, 4]
requests = 8
"""


def _plan(tmp_path: Path, slo: str = '[slo]\ntpot = "50ms"\nttft = "2s"', requests: int = 40):
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(slo=slo, requests=requests))
    return load_plan(path)


def test_slo_table_parses_durations_and_the_share(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    assert plan.spec.slo is not None
    assert plan.spec.slo.limits() == {"ttft": 2.0, "tpot": 0.05}
    assert plan.spec.slo.target == 0.9
    plan = _plan(tmp_path, '[slo]\ne2e = "1m"\nshare = 0.5', requests=10)
    assert plan.spec.slo is not None and plan.spec.slo.target == 0.5
    assert plan.spec.slo.limits() == {"e2e": 60.0}


@pytest.mark.parametrize(
    ("slo", "requests", "said"),
    [
        ("[slo]\ntarget = 0.9", 40, "at least one of ttft, tpot, e2e"),
        ('[slo]\ntpot = "fast"', 40, "not a duration"),
        ('[slo]\ntpot = "50ms"\ntarget = 1.5', 40, "target"),
        ("", 40, "needs an [slo] table"),
        ('[slo]\ntpot = "50ms"', 16, "use at least 35"),
    ],
)
def test_slo_mistakes_are_one_line(tmp_path: Path, slo: str, requests: int, said: str) -> None:
    with pytest.raises(InputError) as exc:
        _plan(tmp_path, slo, requests)
    assert said in str(exc.value)


def test_capacity_expands_to_one_cell_per_config_and_tp(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    cells = [c for c in expand(plan).cells if c.kind == "capacity"]
    assert sorted((c.config, c.tp) for c in cells) == [
        ("ar", 1),
        ("ar", 2),
        ("dflash", 1),
        ("dflash", 2),
    ]
    c = cells[0]
    assert c.levels == (1, 64) and c.max_points == 6 and c.requests == 40
    assert dict(c.slo) == {"ttft": 2.0, "tpot": 0.05} and c.slo_target == 0.9
    assert Cell.from_json(c.to_json()) == c


def test_concurrency_cell_ids_do_not_depend_on_the_slo(tmp_path: Path) -> None:
    with_slo = {c.name: c.id for c in expand(_plan(tmp_path)).cells if c.kind == "concurrency"}
    other = _plan(tmp_path, '[slo]\ntpot = "10ms"\ntarget = 0.5')
    again = {c.name: c.id for c in expand(other).cells if c.kind == "concurrency"}
    assert with_slo == again
    caps = {c.name: c.id for c in expand(_plan(tmp_path)).cells if c.kind == "capacity"}
    caps2 = {c.name: c.id for c in expand(other).cells if c.kind == "capacity"}
    assert set(caps) == set(caps2) and all(caps[n] != caps2[n] for n in caps)


def test_the_estimate_counts_the_levels_the_search_tries(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    x = expand(plan)
    cell = next(c for c in x.cells if c.kind == "capacity")
    points = capacity_points(cell)
    assert points[:2] == [1, 64] and 2 < len(points) <= 6
    est = estimate(plan.spec, plan.prompts, x.groups, x.cells)
    assert est.per_cell_requests[cell.id] == len(points) * 40
    assert est.per_cell_s[cell.id] > 0


# -- the driver, against a client whose TPOT grows with the requests in flight ----------------


class LoadClient:
    """A stand-in for the bench client: TPOT = 10 ms + 1 ms per other request in flight when
    a request is sent, 11 tokens each; no time passes (the figures come from the numbers)."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.sent = 0
        self.clock = 0.0

    async def generate(self, messages: object, **_: object) -> Completion:
        self.sent += 1
        self.in_flight += 1
        tpot = 0.010 + 0.001 * (self.in_flight - 1)
        await asyncio.sleep(0)  # let every client of the level send before any ends
        await asyncio.sleep(0)
        self.in_flight -= 1
        start, self.clock = self.clock, self.clock + 0.1
        done = Completion(output_tokens=11, ttft_s=0.05, e2e_s=0.05 + 10 * tpot, tpot_s=tpot)
        done.span = Span(start, start + done.e2e_s)  # type: ignore[operator]
        return done

    async def aclose(self) -> None:
        pass


def _capacity_cell(**kw: object) -> Cell:
    fields: dict[str, object] = dict(
        id="cap",
        name="sim.ar.tp1/cap",
        group="sim.ar.tp1",
        host="sim",
        config="ar",
        tp=1,
        workload="cap",
        kind="capacity",
        prompt_set="chat",
        max_tokens=11,
        concurrency=None,
        prompts=("chat",),
        requests=40,
        warmup=1,
        levels=(1, 32),
        max_points=8,
        slo=(("tpot", 0.0205),),
        slo_target=0.9,
    )
    fields.update(kw)
    return Cell(**fields)  # type: ignore[arg-type]


GROUP = ServiceGroup(
    id="sim.ar.tp1",
    host="sim",
    host_kind="sim",
    config="ar",
    label="ar",
    tp=1,
    gpu_ids=(0,),
    port=0,
    command=(),
    env=(),
    api="sglang",
    ready_timeout_s=60,
    speculative=False,
)


async def test_the_driver_finds_the_level_where_tpot_crosses_the_limit(tmp_path: Path) -> None:
    # TPOT 10 ms + 1 ms per other client: within 20.5 ms up to 11 clients.
    client = LoadClient()
    cell = _capacity_cell()
    result = await run_cell(
        cell, GROUP, "http://unused", campaign="c", attempt=1, seed=0,
        prompts=PromptLibrary(tmp_path), client=client,  # type: ignore[arg-type]
    )  # fmt: skip
    fig = result.figures
    assert fig["max_concurrency_under_slo"] == 11
    assert fig["capacity_fail_level"] == 12
    levels = fig["capacity_levels"]
    assert levels[:2] == [1, 32] and len(levels) <= 8
    # Every level's measured rows carry it; each client's warm-up is sent and not recorded.
    per_level = {lv: sum(1 for r in result.records if r.concurrency == lv) for lv in levels}
    assert set(per_level.values()) == {40}
    assert client.sent == len(result.records) + sum(levels)
    assert result.complete and result.planned == 40 * len(levels)
    shares = dict(zip(levels, fig["capacity_shares"], strict=True))
    assert shares[11] == 1.0 and shares[12] < 0.9
    assert fig["slo_limits"] == "TPOT <= 20.5ms"

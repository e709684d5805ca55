"""GPU board energy per cell: the one computation (bench/energy.py) against a stand-in that
replays NVML-like samples with a known energy counter and a known power, the engine's watch
that records it (engine/energy_watch.py), the agent reading the counter, and the report."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from support.results_builder import ResultsBuilder

from specbench_tui.bench.energy import ENERGY_COLUMNS, PowerSample, cell_energy, idle_power
from specbench_tui.engine.energy_watch import EnergyWatch, cell_spans
from specbench_tui.engine.headless import format_event
from specbench_tui.hosts.gpu_agent import parse_smi
from specbench_tui.hosts.host import FAKE_NVML_PATH
from specbench_tui.hosts.telemetry import AGENT_PATH, GpuProcess, GpuSample
from specbench_tui.report.build import build_report
from specbench_tui.report.inputs import load_inputs
from specbench_tui.report.render import render_texts
from specbench_tui.report.sections import energy as energy_section
from specbench_tui.report.tex_fit import layout
from specbench_tui.results.events import (
    BatchJobChanged,
    CellEnergy,
    CellFinished,
    CellStarted,
    Event,
    GroupStarted,
    ServiceReady,
)
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.records import RequestRecord
from specbench_tui.results.schema import TELEMETRY_SCHEMA
from specbench_tui.results.state import CampaignState
from specbench_tui.results.views import cell_rows

# --- the stand-in: a known power curve, its exact energy, and NVML-like samples of both -------


def power(gpu: int, t: float) -> float:
    """W: a board that swings between about 300 and 500 W over a minute."""
    return 400.0 + 100.0 * math.sin(2 * math.pi * t / 60.0) + 10.0 * gpu


def energy_j(gpu: int, a: float, b: float) -> float:
    """The exact integral of ``power`` over [a, b]."""
    k = 60.0 / (2 * math.pi)

    def prim(t: float) -> float:
        return (400.0 + 10.0 * gpu) * t - 100.0 * k * math.cos(t / k)

    return prim(b) - prim(a)


BASE_MJ = 5e9  # a counter counts from the driver's load: never near zero


def replay(
    gpus: tuple[int, ...] = (0, 1),
    t0: float = 0.0,
    t1: float = 120.0,
    step: float = 1.0,
    counter: bool = True,
    pids: frozenset[int] = frozenset({100}),
) -> list[PowerSample]:
    """Samples every ``step`` s: the power read then, and the counter as the exact energy."""
    out = []
    n = round((t1 - t0) / step)
    for i in range(n + 1):
        t = t0 + i * step
        for g in gpus:
            mj = BASE_MJ + 1000.0 * energy_j(g, 0.0, t) if counter else None
            out.append(PowerSample(t, g, round(power(g, t), 1), mj, pids))
    return out


def truth(gpus: tuple[int, ...], a: float, b: float) -> float:
    return sum(energy_j(g, a, b) for g in gpus)


def test_counter_method_is_exact_over_the_window() -> None:
    got = cell_energy(replay(), [(10.0, 70.0)], [0, 1], 6000, own_pids={100})
    assert got.energy_method == "nvml_counter"
    assert got.energy_valid and got.energy_note.startswith("no idle floor")
    assert got.gpu_energy_j == pytest.approx(truth((0, 1), 10.0, 70.0), rel=1e-9)
    assert got.j_per_output_token == pytest.approx(got.gpu_energy_j / 6000)
    assert got.avg_power_w == pytest.approx(got.gpu_energy_j / 60.0)
    assert got.energy_samples == 61


def test_counter_edges_between_samples_are_read_on_the_line_between_them() -> None:
    # Constant power: the counter's straight line is exact anywhere between two samples.
    flat = [
        PowerSample(float(t), 0, 250.0, BASE_MJ + 250_000.0 * t, frozenset()) for t in range(0, 60)
    ]
    got = cell_energy(flat, [(3.25, 41.6)], [0], 100)
    assert got.energy_method == "nvml_counter"
    assert got.gpu_energy_j == pytest.approx(250.0 * (41.6 - 3.25), rel=1e-12)


def test_power_integral_is_within_one_percent_without_a_counter() -> None:
    got = cell_energy(replay(counter=False), [(10.3, 70.8)], [0, 1], 6000)
    assert got.energy_method == "power_integral"
    assert got.energy_valid
    assert got.gpu_energy_j == pytest.approx(truth((0, 1), 10.3, 70.8), rel=0.01)


def test_sequential_cells_count_only_their_requests_own_spans() -> None:
    spans = [(10.0, 30.0), (31.0, 51.0), (52.0, 72.0)]
    got = cell_energy(replay(), spans, [0, 1], 900)
    exact = sum(truth((0, 1), a, b) for a, b in spans)
    assert got.gpu_energy_j == pytest.approx(exact, rel=1e-9)
    assert got.energy_window_s == pytest.approx(60.0)


def test_a_gap_over_three_seconds_makes_it_invalid() -> None:
    samples = [s for s in replay() if not 30.0 < s.t < 34.5]  # 30 -> 35: a 5 s gap
    got = cell_energy(samples, [(10.0, 70.0)], [0, 1], 6000)
    assert not got.energy_valid
    assert "5.0 s gap" in got.energy_note and "over 3 s" in got.energy_note
    # A 3 s gap is allowed.
    ok = cell_energy([s for s in replay() if not 30.0 < s.t < 33.0], [(10.0, 70.0)], [0, 1], 1)
    assert ok.energy_valid


def test_a_counter_reset_says_so_and_falls_back_to_the_integral() -> None:
    samples = [
        PowerSample(s.t, s.gpu, s.power_w, s.energy_mj - (BASE_MJ - 1000.0) * (s.t >= 40), s.pids)
        if s.gpu == 1 and s.energy_mj is not None
        else s
        for s in replay()
    ]
    got = cell_energy(samples, [(10.0, 70.0)], [0, 1], 6000)
    assert got.energy_method == "power_integral"
    assert got.energy_valid
    assert "GPU 1's energy counter went back" in got.energy_note
    assert got.gpu_energy_j == pytest.approx(truth((0, 1), 10.0, 70.0), rel=0.01)


def test_a_gpu_without_the_counter_takes_the_integral_for_all() -> None:
    samples = [
        PowerSample(s.t, s.gpu, s.power_w, None if s.gpu == 1 else s.energy_mj, s.pids)
        for s in replay()
    ]
    got = cell_energy(samples, [(10.0, 70.0)], [0, 1], 6000)
    assert got.energy_method == "power_integral"
    assert "no energy counter on GPU 1" in got.energy_note


def test_fewer_than_twenty_samples_is_low_confidence() -> None:
    got = cell_energy(replay(), [(10.5, 25.5)], [0, 1], 100)
    assert got.energy_samples == 15
    assert not got.energy_valid and got.energy_note.startswith("low confidence: 15 samples")
    # Edges between samples: the counter's straight line there, close to the exact figure.
    assert got.gpu_energy_j == pytest.approx(truth((0, 1), 10.5, 25.5), rel=1e-3)


def trace(gpus: tuple[int, ...], t0: float, t1: float, step: float = 0.05) -> list[PowerSample]:
    """The agent's reads of the counter alone between samples (``energy_trace``)."""
    n = round((t1 - t0) / step)
    return [
        PowerSample(t0 + i * step, g, None, BASE_MJ + 1000.0 * energy_j(g, 0.0, t0 + i * step))
        for i in range(n + 1)
        for g in gpus
    ]


def test_a_short_cell_is_exact_where_the_counter_was_read_at_its_edges() -> None:
    """A 2.3 s cell has two one-second samples in its window: low confidence on them alone.
    With the counter read every 0.05 s between samples, its edges are pinned: valid, and the
    energy within the step's share of the exact figure (the samples alone miss it by more)."""
    a, b = 10.37, 12.68
    alone = cell_energy(replay(), [(a, b)], [0, 1], 100)
    assert not alone.energy_valid and alone.energy_note.startswith("low confidence: 2 samples")
    got = cell_energy(replay() + trace((0, 1), 9.0, 14.0), [(a, b)], [0, 1], 100)
    assert got.energy_valid, got.energy_note
    assert got.energy_method == "nvml_counter" and got.energy_samples == 2
    exact = truth((0, 1), a, b)
    assert got.gpu_energy_j == pytest.approx(exact, rel=1e-3)
    assert abs(got.gpu_energy_j - exact) < abs(alone.gpu_energy_j - exact)
    # A trace too sparse at an edge (one read a second) pins nothing.
    sparse = cell_energy(replay() + trace((0, 1), 9.5, 13.5, 1.0), [(a, b)], [0, 1], 100)
    assert not sparse.energy_valid


def test_a_floor_above_the_cells_own_power_gives_no_figure_above_idle() -> None:
    got = cell_energy(replay(), [(10.0, 70.0)], [0, 1], 6000, idle_power_w=5000.0)
    assert got.j_per_output_token_above_idle is None
    assert "idle floor unreliable: 5000 W idle" in got.energy_note


def test_another_process_on_the_groups_gpus_makes_it_invalid() -> None:
    samples = [
        PowerSample(s.t, s.gpu, s.power_w, s.energy_mj, s.pids | {777})
        if s.gpu == 1 and 40 <= s.t <= 45
        else s
        for s in replay()
    ]
    got = cell_energy(samples, [(10.0, 70.0)], [0, 1], 6000, own_pids={100})
    assert not got.energy_valid
    assert "another process on the group's GPUs (pid 777 on GPU 1)" in got.energy_note
    # The same process outside the window costs nothing.
    later = cell_energy(samples, [(50.0, 110.0)], [0, 1], 6000, own_pids={100})
    assert later.energy_valid


def test_samples_that_stop_before_the_window_ends_give_no_figure() -> None:
    got = cell_energy(replay(t1=60.0), [(10.0, 70.0)], [0, 1], 6000)
    assert got.gpu_energy_j is None and not got.energy_valid
    assert "do not reach past both edges" in got.energy_note


def test_above_idle_takes_the_floor_times_the_window_off() -> None:
    idle = [PowerSample(float(t), g, 70.0 + g, None) for t in range(0, 10) for g in (0, 1)]
    floor, n = idle_power(idle, 0.0, 9.0, [0, 1])
    assert floor == pytest.approx(141.0) and n == 10
    assert idle_power(idle, 0.0, 9.0, [0, 1, 2]) == (None, 0)
    got = cell_energy(replay(), [(10.0, 70.0)], [0, 1], 6000, idle_power_w=floor)
    assert got.j_per_output_token_above_idle == pytest.approx(
        (truth((0, 1), 10.0, 70.0) - 141.0 * 60.0) / 6000
    )
    assert set(got.figures()) == set(ENERGY_COLUMNS)


# --- the engine's watch: samples and events in, one cell_energy event out ---------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def gpu_sample(t: float, gpu: int, watts: float, mj: float | None, pids: tuple[int, ...]) -> Any:
    return GpuSample(
        t=t,
        host="h",
        gpu=gpu,
        name="H200",
        util_pct=90.0,
        mem_used_mib=1.0,
        mem_total_mib=2.0,
        power_w=watts,
        temp_c=50.0,
        processes=tuple(GpuProcess(p, "python", 1.0) for p in pids),
        energy_mj=mj,
    )


def record(started: float, e2e: float, tokens: int, error: str | None = None) -> RequestRecord:
    return RequestRecord(
        cell_id="c1", started_at=started, e2e_s=e2e, output_tokens=tokens, error=error
    )


def test_the_watch_records_a_cell_once_the_sample_after_its_window_is_in() -> None:
    clock = Clock()
    out: list[Event] = []
    changed: list[int] = []
    watch = EnergyWatch(out.append, lambda: changed.append(1), clock=clock)
    skew = 5.0  # the GPU host's clock runs 5 s behind the client's

    def tick(t: float, watts: float, pids: tuple[int, ...] = (100,)) -> None:
        clock.now = t + 0.01  # each sample arrives 10 ms after it was taken
        for g in (2, 3):
            mj = BASE_MJ + 1000.0 * watts * t  # constant power from t = 0
            watch.sample(gpu_sample(t - skew, g, watts, mj, pids))

    watch.on_event(GroupStarted(group="g", host="h", gpu_ids=[2, 3], ts=0.0))
    for t in range(0, 5):
        tick(float(t), 80.0, pids=(100, 101) if t == 3 else (100,))  # the server's workers
    watch.on_event(ServiceReady(group="g", ts=5.0))
    for t in range(5, 15):
        tick(float(t), 80.0)
    watch.on_event(CellStarted(cell_id="c1", group="g", cell="cell one", attempt=1, ts=15.0))
    for t in range(15, 46):
        tick(float(t), 300.0, pids=(100, 101))
    records = [record(16.0, 12.0, 500), record(29.0, 15.0, 700), record(45.0, 0.5, 9, "x")]
    watch.cell_finished("c1", records, concurrent=False)
    assert out == []  # no sample past the window's end (44.0) yet... 45.0 is: settle below
    tick(46.0, 300.0)
    (ev,) = out
    assert isinstance(ev, CellEnergy) and ev.cell_id == "c1" and ev.attempt == 1
    f = ev.figures
    assert f["energy_method"] == "nvml_counter" and f["energy_output_tokens"] == 1200
    assert f["gpu_energy_j"] == pytest.approx(2 * 300.0 * 27.5, rel=1e-3)
    assert f["idle_power_w"] == pytest.approx(160.0)
    assert f["j_per_output_token_above_idle"] == pytest.approx(
        (2 * 300.0 * 27.5 - 160.0 * 27.5) / 1200, rel=1e-3
    )
    assert f["energy_valid"] and changed == [1]
    line = format_event(ev)
    assert line is not None and "GPU board energy 16500.0 J (nvml_counter)" in line
    assert "J/token" in line and "above idle" in line


def test_the_watch_gives_up_waiting_and_says_why() -> None:
    clock = Clock()
    out: list[Event] = []
    watch = EnergyWatch(out.append, clock=clock, wait_s=10.0)
    watch.on_event(GroupStarted(group="g", host="h", gpu_ids=[0], ts=0.0))
    watch.on_event(ServiceReady(group="g", ts=0.5))
    watch.on_event(CellStarted(cell_id="c1", group="g", cell="c", ts=1.0))
    for t in range(1, 20):
        clock.now = float(t)
        watch.sample(gpu_sample(float(t), 0, 200.0, None, ()))
    watch.cell_finished("c1", [record(2.0, 30.0, 10)], concurrent=True)
    clock.now = 40.0
    watch.sample(gpu_sample(19.5, 0, 200.0, None, ()))  # the agent fell behind
    (ev,) = out
    assert isinstance(ev, CellEnergy) and ev.figures["gpu_energy_j"] is None
    assert "do not reach past both edges" in ev.figures["energy_note"]
    assert "NOT" not in (format_event(ev) or "") and "none" in (format_event(ev) or "")


def test_concurrency_windows_are_the_request_span() -> None:
    recs = [record(10.0, 5.0, 1), record(11.0, 9.0, 1), record(12.0, 1.0, 1)]
    assert cell_spans(recs, concurrent=True) == [(10.0, 20.0)]
    assert cell_spans(recs, concurrent=False) == [(10.0, 15.0), (11.0, 20.0), (12.0, 13.0)]


def test_the_reducer_folds_energy_into_the_attempt_it_names() -> None:
    b = ResultsBuilder(Path("/nonexistent"))
    b.cell("c1", "ar", 1, "single", "single")
    state = CampaignState()
    state.apply(_started(b))
    state.apply(CellStarted(cell_id="c1", group="sim.ar.tp1", attempt=2, ts=1.0))
    state.apply(CellFinished(cell_id="c1", group="sim.ar.tp1", attempt=2, ts=2.0))
    state.apply(CellEnergy(cell_id="c1", attempt=1, figures={"gpu_energy_j": 1.0}))
    assert "gpu_energy_j" not in state.cells["c1"].figures  # an earlier attempt's
    # Until it has its energy (or on a host without telemetry, ever) the row has the columns,
    # null: a run's cells.parquet has one shape with or without GPU telemetry.
    (before,) = cell_rows(state)
    assert all(before[k] is None for k in ENERGY_COLUMNS)
    state.apply(CellEnergy(cell_id="c1", attempt=2, figures={"gpu_energy_j": 2.0}))
    (row,) = cell_rows(state)
    assert row["gpu_energy_j"] == 2.0 and row["wall_s"] == 0.0


def _started(b: ResultsBuilder) -> Event:
    from specbench_tui.results.events import CampaignStarted

    return CampaignStarted(
        campaign="syn", groups=list(b.groups.values()), cells=list(b.cells.values())
    )


# --- the agent reads the counter; nvidia-smi has none -----------------------------------------


def test_the_agent_reads_the_energy_counter(tmp_path: Path) -> None:
    data = {"gpu": 0, "pid": os.getpid(), "mem_used_mib": 1000, "power_w": 400.0}
    (tmp_path / "gpu0.json").write_text(json.dumps(data))
    env = {
        **os.environ,
        "SPECBENCH_SIM_NVML": str(tmp_path),
        "SPECBENCH_SIM_NVML_MODULE": str(FAKE_NVML_PATH),
        "SPECBENCH_SIM_GPUS": "1",
    }
    out = subprocess.run(
        [sys.executable, str(AGENT_PATH), "--count", "3", "--interval", "0.2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    samples = [GpuSample.from_json("h", r) for r in rows]
    rises = [
        (b.energy_mj - a.energy_mj) / (b.t - a.t) / 1000.0
        for a, b in itertools.pairwise(samples)
        if a.energy_mj is not None and b.energy_mj is not None
    ]
    assert len(rises) == 2 and all(r == pytest.approx(400.0, rel=0.1) for r in rises)
    smi = parse_smi("0, GPU-1, H200, 5, 1, 2, 0, 75.5, 700, 30, 0, P0, 580\n", "", t=1.0)
    assert smi[0]["energy_mj"] is None
    assert GpuSample.from_json("h", {"t": 1, "gpu": 0}).energy_mj is None  # an older agent


def test_the_probe_says_which_gpus_have_the_counter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--dry-run --check`` says before a campaign where its energy will come from: the
    agent's probe counts the GPUs that answer the counter, the host line says it."""
    from specbench_tui.hosts import telemetry
    from specbench_tui.hosts.telemetry import TelemetryMode, probe_telemetry

    for i in range(2):
        data = {"gpu": i, "pid": os.getpid(), "mem_used_mib": 10, "power_w": 100.0}
        (tmp_path / f"gpu{i}.json").write_text(json.dumps(data))
    env = {
        **os.environ,
        "SPECBENCH_SIM_NVML": str(tmp_path),
        "SPECBENCH_SIM_NVML_MODULE": str(FAKE_NVML_PATH),
        "SPECBENCH_SIM_GPUS": "2",
    }
    out = subprocess.run(
        [sys.executable, str(AGENT_PATH), "--probe"], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    nvml = json.loads(out.stdout)["nvml"]
    assert nvml["ok"] and nvml["gpus"] == 2 and nvml["energy_gpus"] == 2

    async def fake_probe(runner: Any, timeout_s: float = 0) -> dict[str, Any]:
        return runner  # the "runner" below is the probe's line itself

    monkeypatch.setattr(telemetry, "probe_interpreter", fake_probe)

    async def chosen(line: dict[str, Any]) -> TelemetryMode:
        return await probe_telemetry(lambda _python: line, ["python3"])  # type: ignore[arg-type,return-value]

    import asyncio

    every = asyncio.run(chosen({"probe": 1, "nvml": nvml}))
    assert every.describe().endswith("energy: NVML counter on every GPU")
    some = asyncio.run(chosen({"probe": 1, "nvml": {**nvml, "energy_gpus": 1}}))
    assert "NVML counter on 1 of 2 GPUs" in some.describe()
    older = asyncio.run(chosen({"probe": 1, "nvml": {"ok": True, "gpus": 2}}))  # an older agent
    assert older.describe().endswith("energy: counter support not known")
    smi = TelemetryMode("nvidia-smi", "python3", "", 2, "550.1")
    assert "integral of power.draw" in smi.describe()


# --- the report -----------------------------------------------------------------------------


def _results(tmp_path: Path, *, energy: bool = True, baseline: bool = False) -> Path:
    """Two configs, two cells each; with ``baseline``, ``ar`` is the plan's baseline and
    ``dflash`` decodes twice as fast, so its speed-up is known."""
    b = ResultsBuilder(tmp_path / "res")
    for config in ("ar", "dflash"):
        for i in range(2):
            label = "DFlash (linear, block 16, budget 256)" if config == "dflash" else ""
            b.cell(f"{config}{i}", config, 1, "single", "single", label=label)
    for config in ("ar", "dflash"):
        b.ready(f"sim.{config}.tp1")
        for i in range(2):
            cid = f"{config}{i}"
            fast = baseline and config == "dflash"
            b.finished(cid, [{"output_tokens": 1000, "e2e_s": 0.55 if fast else 1.05}])
            if energy:
                valid = not (config == "dflash" and i == 1)
                joules = 5000.0 if config == "ar" else 3000.0
                figures = cell_energy(
                    replay(gpus=(7,)), [(10.0, 40.0)], [7], 1000, idle_power_w=80.0
                ).figures()
                figures.update(gpu_energy_j=joules, energy_window_s=30.0, energy_valid=valid)
                if not valid:
                    figures["energy_note"] = "a 4.0 s gap between GPU 7's samples in the window"
                b.events.append(
                    CellEnergy(cell_id=cid, group=f"sim.{config}.tp1", figures=figures, ts=b.now())
                )
    b.telemetry({"time": [1.0, 2.0], "host": ["sim"] * 2, "gpu": [7, 7], "power_w": [1.0, 2.0]})
    return b.write(plan="[campaign]\nname = 'syn'\nbaseline = 'ar'\n" if baseline else "")


def test_the_report_shows_gpu_board_energy_per_config(tmp_path: Path) -> None:
    root = _results(tmp_path)
    # A part written before the counter was read, and one after: both load, the older
    # rows' counter null.
    newer = {k: [3.0] if k == "time" else [None] for k in TELEMETRY_SCHEMA}
    newer.update(host=["sim"], gpu=[7], energy_mj=[5e9])
    pl.DataFrame(newer, schema=TELEMETRY_SCHEMA).write_parquet(
        ResultsLayout(root).telemetry_parts / "000002.parquet"
    )
    inp = load_inputs(root)
    assert inp.telemetry["energy_mj"].to_list() == [None, None, 5e9]
    sec = energy_section.build(inp)
    assert sec is not None
    (table,) = sec.tables()
    titles = [c.title for c in table.columns]
    rows = {r[0].text: dict(zip(titles, (c.text for c in r), strict=True)) for r in table.rows}
    assert rows["ar"]["J/token"] == "5.0000" and rows["ar"]["Valid cells"] == "2/2"
    # (2 x 5000 J - 80 W x 60 s) / 2000 tokens: pooled over both cells, ratios of sums.
    assert rows["ar"]["J/token above idle"] == "2.6000"
    assert rows["ar"]["Power W"] == "167" and rows["ar"]["Idle W"] == "80"
    assert (
        rows["DFlash (linear, block 16, budget 256)"]["Valid cells"] == "1/2"
        and rows["DFlash (linear, block 16, budget 256)"]["J/token"] == "3.0000"
    )
    (whole,) = layout(table)  # the table fits the page whole, a long label and all
    assert not whole.landscape and whole.parts == 1
    md, tex = render_texts(build_report(root))
    for doc in (md, tex):
        assert "GPU board energy" in doc and "J/token" in doc and "above idle" in doc
        assert "3.0000" in doc and "4.0 s gap" in doc
    cells = pl.DataFrame(cell_rows(inp.state), infer_schema_length=None)
    assert {"gpu_energy_j", "j_per_output_token", "energy_valid", "energy_method"} <= set(
        cells.columns
    )


def test_energy_per_token_stands_beside_the_speed_up(tmp_path: Path) -> None:
    """The per-TP table gives J/token next to the speed-up, and the energy section sets each
    config's J/token against the baseline's in the same scope, with its speed-up."""
    from specbench_tui.report.frames import comparison
    from specbench_tui.report.sections import single

    root = _results(tmp_path, baseline=True)
    inp = load_inputs(root)
    cmp = {r["config"]: r for r in comparison(inp).to_dicts()}
    assert cmp["dflash"]["speedup"] == pytest.approx(2.0, rel=0.01)
    # Pooled over the valid cells only (dflash's second is not valid): 3000 J / 1000 tokens.
    assert cmp["dflash"]["j_per_token"] == pytest.approx(3.0)
    assert cmp["ar"]["j_per_token"] == pytest.approx(5.0)
    assert cmp["ar"]["j_per_token_above_idle"] == pytest.approx(2.6)

    (tp_table,) = single.build(inp).tables()
    titles = [c.title for c in tp_table.columns]
    assert titles.index("J/token") == titles.index("Speed-up [95% CI]") + 5
    row = {r[0].text: dict(zip(titles, (c.text for c in r), strict=True)) for r in tp_table.rows}
    assert row["ar"]["J/token"] == "5.0000" and row["ar"]["J/token above idle"] == "2.6000"

    from specbench_tui.report.sections import summary

    (answers,) = [
        t for t in summary.build(inp, None).tables() if t.caption.startswith("The fastest")
    ]
    titles = [c.title for c in answers.columns]
    assert titles[titles.index("Speed-up [95% CI]") + 1 :][:2] == ["J/token", "J/token above idle"]
    (top,) = answers.rows
    assert [c.text for c in top][titles.index("J/token")] == "3.0000"  # dflash, the fastest

    sec = energy_section.build(inp)
    assert sec is not None
    against = [t for t in sec.tables() if t.caption.startswith("Energy per token against")]
    (t,) = against
    titles = [c.title for c in t.columns]
    (r,) = [dict(zip(titles, (c.text for c in r), strict=True)) for r in t.rows]
    assert r["J/token"] == "3.0000" and r["J/token vs baseline"] == "0.60x"
    assert r["Speed-up [95% CI]"].startswith("2.0")
    # The console's results table: the same J/token on the pooled row and the point's row.
    from specbench_tui.tui.results_source import comparison as console_rows

    live = console_rows(root).filter(pl.col("config") == "ar")
    assert live["j_per_token"].to_list() == [pytest.approx(5.0)] * 2 and live.height == 2
    md, tex = render_texts(build_report(root))
    assert "Energy per token against speed-up" in md and "J/token vs baseline" in md
    assert "Energy per token against speed-{}up" in tex and "only marks" in tex


def test_older_results_without_energy_still_report(tmp_path: Path) -> None:
    root = _results(tmp_path, energy=False)
    assert energy_section.build(load_inputs(root)) is None
    md, _ = render_texts(build_report(root))
    assert "GPU board energy" not in md and "GPU telemetry" in md


@pytest.mark.system
def test_the_energy_tables_fit_the_pdf_page(tmp_path: Path) -> None:
    from support.report_pdf import overfull_boxes

    from specbench_tui.report.render import render_report

    root = _results(tmp_path, baseline=True)  # with the energy-against-speed-up table and chart
    render_report(root)
    assert overfull_boxes(root / "report.tex", tmp_path / "tex") == []


# --- a capture from a real H200: the agent's NVML samples around a 60 s matmul load ----------

H200 = Path(__file__).parent / "support" / "nvml-h200-energy" / "samples.json"


def h200_samples() -> list[PowerSample]:
    data = json.loads(H200.read_text())
    return [
        PowerSample(s["t"], 0, s["power_w"], s["energy_mj"], frozenset({479}))
        for s in data["samples"]
    ]


def test_on_the_h200_capture_both_methods_agree_within_five_percent() -> None:
    samples = h200_samples()
    busy = [s.t for s in samples if (s.power_w or 0) > 400]
    window = [(busy[0] - 0.5, busy[0] - 0.5 + 60.0)]  # the load started between two samples
    counter = cell_energy(samples, window, [0], 36160, own_pids={479})
    integral = cell_energy(
        [dataclasses.replace(s, energy_mj=None) for s in samples], window, [0], 36160
    )
    assert counter.energy_method == "nvml_counter" and counter.energy_valid
    assert integral.energy_method == "power_integral" and integral.energy_valid
    assert counter.gpu_energy_j == pytest.approx(41287.0, rel=0.02)  # what the run printed
    assert integral.gpu_energy_j == pytest.approx(counter.gpu_energy_j, rel=0.05)
    # The idle floor: the load's context up, the GPU idle (about 125 W on this board).
    floor, n = idle_power(samples, samples[6].t, busy[0] - 1.0, [0])
    assert floor == pytest.approx(124.8, abs=0.5) and n >= 8
    # A driver reload half-way: the counter goes back, the integral takes over.
    reload_at = busy[30]
    reset = [
        dataclasses.replace(s, energy_mj=(s.energy_mj or 0) - 4e7) if s.t >= reload_at else s
        for s in samples
    ]
    fell_back = cell_energy(reset, window, [0], 36160)
    assert fell_back.energy_method == "power_integral" and "went back" in fell_back.energy_note
    assert fell_back.gpu_energy_j == pytest.approx(integral.gpu_energy_j)
    # Five samples lost mid-load: a 6 s gap, no valid figure.
    gapped = [s for s in samples if not busy[20] <= s.t <= busy[24]]
    assert not cell_energy(gapped, window, [0], 36160).energy_valid


def test_groups_run_as_slurm_jobs_say_where_their_energy_stays(tmp_path: Path) -> None:
    b = ResultsBuilder(tmp_path / "res")
    b.cell("c1", "ar", 1, "single", "single", host="cluster")
    gid = "cluster.ar.tp1"
    b.groups[gid] = dataclasses.replace(b.groups[gid], host_kind="slurm")
    b.events.append(BatchJobChanged(group=gid, system="Slurm", job_id="7", state="RUNNING"))
    b.finished("c1", [{"output_tokens": 10}])
    sec = energy_section.build(load_inputs(b.write()))
    assert sec is not None and not sec.tables()
    md, _ = render_texts(build_report(b.root))
    assert "No GPU board energy for the groups on cluster" in md


def test_a_pooled_figure_above_an_unreliable_idle_floor_is_left_out() -> None:
    """Cells whose floor drew more than they did pool to no figure above idle, never a
    negative one; J/token stands."""
    from specbench_tui.report.energy_pool import pool_energy

    cell = {"gpu_energy_j": 100.0, "energy_output_tokens": 50, "energy_window_s": 1.0}
    low = pool_energy([{**cell, "idle_power_w": 40.0}])
    high = pool_energy([{**cell, "idle_power_w": 140.0}])
    assert low["j_per_token_above_idle"] == pytest.approx(1.2)
    assert high["j_per_token_above_idle"] is None and high["j_per_token"] == pytest.approx(2.0)

"""The GPU conditions a cell records, from a real H100's agent lines (NVML): clocks, power
limit and clocks-event reasons are read, parsed as every sample is, and summarised as a
cell's conditions (bench/conditions.py). Lines: tests/fixtures/nvml-h100-conditions/."""

from __future__ import annotations

import json
from pathlib import Path

from specbench_tui.bench.conditions import (
    GpuCondition,
    conditions_said,
    gpu_conditions,
    throttle_names,
)
from specbench_tui.hosts.telemetry import GpuSample

HERE = Path(__file__).parent / "fixtures" / "nvml-h100-conditions"


def _samples(state: str) -> list[GpuSample]:
    lines = (HERE / f"{state}.jsonl").read_text().splitlines()
    return [GpuSample.from_json("h100", json.loads(line)) for line in lines]


def _conditions(state: str) -> dict:
    return gpu_conditions(GpuCondition.of(s) for s in _samples(state))


def test_every_line_carries_the_conditions() -> None:
    for state in ("idle", "load1", "after"):
        for s in _samples(state):
            assert s.sm_clock_mhz and s.mem_clock_mhz == 2619.0
            assert s.power_limit_w == 700.0
            assert s.throttle_reasons in (0x1, 0x4)


def test_a_dense_load_is_power_capped_and_idle_is_not_slowed() -> None:
    load = _conditions("load1")
    assert load["gpu_sm_clock_mhz"] == 1357.5 and load["gpu_power_limit_w"] == 700.0
    assert throttle_names(load["gpu_throttle_mask"]) == ["power cap"]
    idle = _conditions("idle")
    assert idle["gpu_sm_clock_mhz"] == 345.0
    assert idle["gpu_throttle_mask"] == 0  # "GPU idle" is a state, not a slowdown
    assert "THROTTLED: power cap" in conditions_said(load)
    assert "THROTTLED" not in conditions_said(idle)


def test_every_condition_is_a_column_of_the_one_shape() -> None:
    """cells.parquet has the same columns with or without telemetry (results/records.py)."""
    from specbench_tui.results.records import GPU_CONDITION_COLUMNS

    got = _conditions("load1")
    got_idle = _conditions("idle")
    assert set(got) | set(got_idle) <= set(GPU_CONDITION_COLUMNS)
    assert set(got) == set(GPU_CONDITION_COLUMNS)

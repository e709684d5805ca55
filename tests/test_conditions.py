"""The host CPU conditions of a cell (bench/conditions.py): parsed from /proc as the kernel
writes it, figured over a window, and read by a campaign at each cell's edges."""

from __future__ import annotations

from specbench_tui.bench.conditions import (
    CPU_FILES,
    conditions_said,
    cpu_conditions,
    parse_cpu,
)
from specbench_tui.engine.cell_runner import read_cpu
from specbench_tui.hosts.host import Host

STAT = """cpu  {user} 0 {system} {idle} 0 0 0 {steal} 0 0
cpu0 1 0 1 1 0 0 0 0 0 0
cpu1 1 0 1 1 0 0 0 0 0 0
intr 1 2 3
procs_running 3
"""
PRESSURE = """some avg10=23.36 avg60=42.07 avg300=65.54 total={total}
full avg10=0.00 avg60=0.00 avg300=0.00 total=0
"""


def _reading(user: int, idle: int, steal: int, load: float, total: int, at: float):
    return parse_cpu(
        STAT.format(user=user, system=0, idle=idle, steal=steal),
        f"{load} 5.28 4.30 1/256 12919\n",
        PRESSURE.format(total=total),
        at,
    )


def test_a_window_of_counters_gives_busy_steal_load_and_pressure() -> None:
    before = _reading(1000, 1000, 0, 1.0, 5_000_000, at=10.0)
    after = _reading(1600, 1300, 100, 3.0, 7_000_000, at=14.0)  # 4 s, 1000 jiffies
    got = cpu_conditions(before, after)
    assert got == {
        "host_cpu_busy": 0.7,  # 600 user + 100 steal of 1000
        "host_cpu_steal": 0.1,
        "host_load_per_cpu": 1.5,  # 3.0 over 2 CPUs
        "host_cpus": 2,
        "host_cpu_pressure": 0.5,  # 2 s of waiting in 4 s
    }
    said = conditions_said(got)
    assert "host load 1.50/CPU" in said and "CPU waited 50%" in said and "steal 10.0%" in said


def test_missing_or_broken_counters_give_no_figures() -> None:
    assert parse_cpu(None, "1.0 1 1 1/1 1") is None
    assert parse_cpu("cpu  a b c", "1.0 1 1 1/1 1") is None
    assert parse_cpu(STAT.format(user=1, system=1, idle=1, steal=0), "") is None
    good = _reading(1, 1, 0, 1.0, 1, at=0.0)
    assert cpu_conditions(None, good) == {} and cpu_conditions(good, good) == {}
    # A kernel without pressure stall information: the rest stands.
    no_psi = parse_cpu(STAT.format(user=5, system=0, idle=5, steal=0), "2.0 1 1 1/1 1", None, 1)
    assert "host_cpu_pressure" not in cpu_conditions(good, no_psi)


async def test_this_hosts_counters_are_read_at_a_cells_edges() -> None:
    host = Host("local", 1)
    before = await read_cpu(host)
    assert before is not None and before.cpus >= 1
    after = await read_cpu(host)
    assert after is not None and after.at >= before.at
    assert await read_cpu(None) is None
    assert len(CPU_FILES) == 3

"""The conditions a cell ran under, beside its figures: what a comparison between two cells
must hold equal (report/comparability.py judges them).

Host CPU, read from the server's host at the cell's two edges (``/proc/stat`` and
``/proc/loadavg``, one read each through the host's transport):

- ``host_cpu_busy``: the share of the host's CPU time that was not idle over the window
  (from the ``cpu`` line's deltas: user + nice + system + irq + softirq + steal over all);
- ``host_cpu_steal``: the share a hypervisor took (steal over all), which a virtual host
  loses without seeing it;
- ``host_load_per_cpu``: the kernel's one-minute load average at the window's end over the
  host's CPUs: above 1, runnable work waited for a CPU (the client's event loop among it
  where the client runs on that host);
- ``host_cpu_pressure``: the share of the window in which some runnable task waited for a
  CPU (``/proc/pressure/cpu``'s "some" total, where the kernel keeps it): exact over the
  window where the load average trails it by a minute.

GPU, from the telemetry samples inside the window (``gpu_conditions``): the median SM and
memory clocks, the highest temperature, the lowest enforced power limit, the throttle reasons
seen (``gpu_throttle_mask``: NVML's clocks-event bits that slow a GPU, named by
``throttle_names``) and how many processes that are not the group's
server held its GPUs.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: Where the host's CPU counters are read.
PROC_STAT = "/proc/stat"
PROC_LOADAVG = "/proc/loadavg"
PROC_PRESSURE = "/proc/pressure/cpu"
CPU_FILES = (PROC_STAT, PROC_LOADAVG, PROC_PRESSURE)


@dataclass(frozen=True)
class CpuReading:
    """The host's aggregate CPU counters (jiffies) and load at one moment."""

    busy: int
    steal: int
    total: int
    cpus: int
    load1: float
    pressure_us: float | None = None  # CPU pressure "some" total (µs), where kept
    at: float = 0.0  # when it was read (the reader's monotonic clock)


def parse_cpu(
    stat: str | None, loadavg: str | None, pressure: str | None = None, at: float = 0.0
) -> CpuReading | None:
    """``/proc/stat``'s ``cpu`` line and CPU count with ``/proc/loadavg``'s first figure (and
    ``/proc/pressure/cpu``'s "some" total where given); None where either of the first two
    is missing or malformed."""
    if not stat or not loadavg:
        return None
    fields: list[int] = []
    cpus = 0
    for line in stat.splitlines():
        word = line.split(" ", 1)[0]
        if word == "cpu":
            try:
                fields = [int(x) for x in line.split()[1:]]
            except ValueError:
                return None
        elif word.startswith("cpu") and word[3:].isdigit():
            cpus += 1
    if len(fields) < 8 or cpus == 0:
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is in user.
    user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
    try:
        load1 = float(loadavg.split()[0])
    except (IndexError, ValueError):
        return None
    busy = user + nice + system + irq + softirq + steal
    return CpuReading(busy, steal, busy + idle + iowait, cpus, load1, _pressure(pressure), at)


def _pressure(text: str | None) -> float | None:
    for line in (text or "").splitlines():
        if line.startswith("some ") and "total=" in line:
            try:
                return float(line.rsplit("total=", 1)[1])
            except ValueError:
                return None
    return None


def cpu_conditions(before: CpuReading | None, after: CpuReading | None) -> dict[str, Any]:
    """The host CPU figures over a window (none where an edge was not read, or no time
    passed on the counters)."""
    if before is None or after is None:
        return {}
    total = after.total - before.total
    if total <= 0:
        return {}
    out: dict[str, Any] = {
        "host_cpu_busy": round((after.busy - before.busy) / total, 4),
        "host_cpu_steal": round((after.steal - before.steal) / total, 4),
        "host_load_per_cpu": round(after.load1 / after.cpus, 3),
        "host_cpus": after.cpus,
    }
    wall = after.at - before.at
    if before.pressure_us is not None and after.pressure_us is not None and wall > 0:
        share = (after.pressure_us - before.pressure_us) / (wall * 1e6)
        out["host_cpu_pressure"] = round(min(max(share, 0.0), 1.0), 4)
    return out


#: NVML's clocks-event (throttle) reasons, by bit (nvml.h ``nvmlClocksEventReason*``). The
#: ones that slow a busy GPU below what it was set to run at; an idle GPU, application clocks
#: and sync boost are settings or states, not slowdowns, and are left out of comparisons.
THROTTLE_BITS: dict[int, str] = {
    0x4: "power cap",
    0x8: "hardware slowdown",
    0x20: "thermal (software)",
    0x40: "thermal (hardware)",
    0x80: "power brake",
}


def throttle_names(mask: int | None) -> list[str]:
    """The slowing reasons a clocks-event mask holds, named."""
    if not mask:
        return []
    return [name for bit, name in THROTTLE_BITS.items() if int(mask) & bit]


@dataclass(frozen=True)
class GpuCondition:
    """What one telemetry sample says of a GPU's conditions (None where not read)."""

    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    temp_c: float | None = None
    power_limit_w: float | None = None
    throttle_reasons: int | None = None

    @classmethod
    def of(cls, sample: Any) -> GpuCondition:
        """The conditions among a sample's readings (any shape with the readings' names)."""
        return cls(**{f: getattr(sample, f, None) for f in cls.__dataclass_fields__})


def gpu_conditions(
    samples: Iterable[GpuCondition], foreign_pids: Iterable[int] = ()
) -> dict[str, Any]:
    """A window's GPU conditions from its samples (of all the group's GPUs): medians of the
    clocks, the highest temperature, the lowest power limit, every throttle reason seen;
    ``gpu_foreign_processes``: processes on the GPUs that are not the group's server."""
    got = list(samples)
    out: dict[str, Any] = {}

    def values(name: str) -> list[float]:
        return [float(v) for s in got if (v := getattr(s, name)) is not None]

    if sm := values("sm_clock_mhz"):
        out["gpu_sm_clock_mhz"] = round(statistics.median(sm), 1)
    if mem := values("mem_clock_mhz"):
        out["gpu_mem_clock_mhz"] = round(statistics.median(mem), 1)
    if temp := values("temp_c"):
        out["gpu_temp_max_c"] = max(temp)
    if limit := values("power_limit_w"):
        out["gpu_power_limit_w"] = min(limit)
    masks = [int(s.throttle_reasons) for s in got if s.throttle_reasons is not None]
    if masks:
        seen = 0
        for m in masks:
            seen |= m
        out["gpu_throttle_mask"] = seen & sum(THROTTLE_BITS)  # the slowing reasons only
    foreign = sorted(set(foreign_pids))
    if got:
        out["gpu_foreign_processes"] = len(foreign)
    return out


def conditions_said(f: Mapping[str, Any]) -> str:
    """A cell's conditions in one line (the console's detail): host load, CPU busy and steal,
    GPU clocks, temperature, power limit, throttling and foreign processes, where read."""
    parts = []
    if f.get("host_load_per_cpu") is not None:
        parts.append(f"host load {float(f['host_load_per_cpu']):.2f}/CPU")
    if f.get("host_cpu_busy") is not None:
        parts.append(f"CPU busy {float(f['host_cpu_busy']):.0%}")
    if f.get("host_cpu_pressure") is not None:
        parts.append(f"CPU waited {float(f['host_cpu_pressure']):.0%}")
    if f.get("host_cpu_steal"):
        parts.append(f"steal {float(f['host_cpu_steal']):.1%}")
    if f.get("gpu_sm_clock_mhz") is not None:
        mem = f.get("gpu_mem_clock_mhz")
        parts.append(
            f"SM {float(f['gpu_sm_clock_mhz']):.0f} MHz"
            + (f", mem {float(mem):.0f} MHz" if mem is not None else "")
        )
    if f.get("gpu_temp_max_c") is not None:
        parts.append(f"{float(f['gpu_temp_max_c']):.0f} °C max")
    if f.get("gpu_power_limit_w") is not None:
        parts.append(f"limit {float(f['gpu_power_limit_w']):.0f} W")
    names = throttle_names(f.get("gpu_throttle_mask"))
    if names:
        parts.append("THROTTLED: " + ", ".join(names))
    if f.get("gpu_foreign_processes"):
        parts.append(f"{f['gpu_foreign_processes']} FOREIGN GPU process(es)")
    return " · ".join(parts)

"""A stand-in for pynvml on the simulated host, with the subset the telemetry agent uses.

The simulated server has no GPU; it writes what a real one would show into
``$SPECBENCH_SIM_NVML/gpu<N>.json``::

    {"gpu": N, "pid": 1234, "name": "python3", "mem_used_mib": 81000, "mem_total_mib": 97887,
     "util_pct": 85, "power_w": 450, "temp_c": 61, "updated": 1700000000.0}

This module reads those files back through NVML's API, so the agent, the reader and the "wait
until the GPUs are free" logic run the same code on a laptop as on an H200 host. As with the
real driver, a process's GPU memory disappears with the process: a file whose pid is dead
(or a zombie) reads as an idle GPU, so a killed simulator frees its GPUs without cleaning up.

Writers should replace files atomically (write a temporary file, then ``os.replace``); a file
read half-written is answered with its previous content, or idle.

Standard library only: the agent loads this file by path, outside the package.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

NVML_TEMPERATURE_GPU = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2

SIM_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition (simulated)"
TOTAL_MIB = 97887
IDLE_MIB = 500
IDLE_POWER_W = 30.0
IDLE_TEMP_C = 32.0
MIB = 1024 * 1024


class NVMLError(Exception):
    """Same name and role as pynvml.NVMLError, so ``except nvml.NVMLError`` works for both."""

    def __init__(self, value: int | str = 0) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return str(self.value) if isinstance(self.value, str) else f"NVML error {self.value}"


@dataclass
class Memory:
    total: int
    used: int
    free: int


@dataclass
class Utilization:
    gpu: int
    memory: int


@dataclass
class ProcessInfo:
    pid: int
    usedGpuMemory: int | None


@dataclass(frozen=True)
class Handle:
    index: int


_state_dir: str | None = None
_count = 0
_last_good: dict[int, dict[str, Any]] = {}


def nvmlInit() -> None:
    global _state_dir, _count
    state = os.environ.get("SPECBENCH_SIM_NVML", "")
    if not state:
        raise NVMLError("SPECBENCH_SIM_NVML is not set: no simulated GPU state directory")
    if not os.path.isdir(state):
        raise NVMLError(f"simulated GPU state directory {state} does not exist")
    try:
        count = int(os.environ.get("SPECBENCH_SIM_GPUS", "8"))
    except ValueError as e:
        raise NVMLError(f"SPECBENCH_SIM_GPUS is not an integer: {e}") from e
    _state_dir, _count = state, max(0, count)


def nvmlShutdown() -> None:
    global _state_dir
    _state_dir = None
    _last_good.clear()
    _energy.clear()


def _require_init() -> str:
    if _state_dir is None:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return _state_dir


def nvmlDeviceGetCount() -> int:
    _require_init()
    return _count


def nvmlDeviceGetHandleByIndex(index: int) -> Handle:
    _require_init()
    if not 0 <= index < _count:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return Handle(index)


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[-1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return True


def _read(handle: Handle) -> dict[str, Any] | None:
    """The GPU's state written by a live simulated server, or None when the GPU is idle."""
    path = os.path.join(_require_init(), f"gpu{handle.index}.json")
    try:
        with open(path) as f:
            data = json.load(f)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        _last_good[handle.index] = data
    except FileNotFoundError:
        _last_good.pop(handle.index, None)
        return None
    except (OSError, ValueError):
        data = _last_good.get(handle.index)  # caught mid-write
        if data is None:
            return None
    try:
        pid = int(data.get("pid", 0))
    except (TypeError, ValueError):
        return None
    return data if _pid_alive(pid) else None


def _num(data: dict[str, Any], key: str, default: float) -> float:
    try:
        return float(data.get(key, default))
    except (TypeError, ValueError):
        return default


def nvmlDeviceGetName(handle: Handle) -> str:
    _require_init()
    return SIM_NAME


def nvmlDeviceGetMemoryInfo(handle: Handle) -> Memory:
    data = _read(handle)
    total_mib = _num(data, "mem_total_mib", TOTAL_MIB) if data else TOTAL_MIB
    used_mib = _num(data, "mem_used_mib", IDLE_MIB) if data else IDLE_MIB
    total, used = int(total_mib * MIB), int(min(used_mib, total_mib) * MIB)
    return Memory(total=total, used=used, free=total - used)


def nvmlDeviceGetUtilizationRates(handle: Handle) -> Utilization:
    data = _read(handle)
    util = int(_num(data, "util_pct", 0)) if data else 0
    return Utilization(gpu=max(0, min(100, util)), memory=0)


def nvmlDeviceGetPowerUsage(handle: Handle) -> int:
    """Milliwatts, as the real call."""
    data = _read(handle)
    return int(1000 * (_num(data, "power_w", IDLE_POWER_W) if data else IDLE_POWER_W))


#: Where each simulated board's energy counter starts (mJ): a real counter counts from the
#: driver's load, so it is never near zero when a campaign reads it.
ENERGY_BASE_MJ = 10**9
_energy: dict[int, tuple[float, float, float]] = {}  # gpu -> (mJ, at, W at that read)


def nvmlDeviceGetTotalEnergyConsumption(handle: Handle) -> int:
    """Millijoules since "the driver loaded" (this module's first read of the GPU), as the
    real call: the power read last time, held until now (the board's own counter sums its
    power the same way, at a far finer step). A restarted agent starts the count again,
    as a driver reload does."""
    now = time.time()
    watts = nvmlDeviceGetPowerUsage(handle) / 1000.0
    mj, at, before = _energy.get(handle.index, (float(ENERGY_BASE_MJ), now, watts))
    mj += 1000.0 * before * max(0.0, now - at)
    _energy[handle.index] = (mj, now, watts)
    return int(mj)


def nvmlDeviceGetTemperature(handle: Handle, sensor: int = NVML_TEMPERATURE_GPU) -> int:
    data = _read(handle)
    return int(_num(data, "temp_c", IDLE_TEMP_C) if data else IDLE_TEMP_C)


def nvmlDeviceGetComputeRunningProcesses(handle: Handle) -> list[ProcessInfo]:
    """Bytes of GPU memory per process, as the real call (which reports MiB * 2**20)."""
    data = _read(handle)
    if not data:
        return []
    used = max(0.0, _num(data, "mem_used_mib", 0) - IDLE_MIB)
    return [ProcessInfo(pid=int(data["pid"]), usedGpuMemory=int(used * MIB))]


# --- what the run's manifest reads: fixed settings of the simulated board (no driver version:
# a simulated host says it has none, as its telemetry line does) -------------------------------

SIM_CUDA_DRIVER = 13000  # as nvmlSystemGetCudaDriverVersion: 1000 * major + 10 * minor
SIM_CLOCKS_MHZ = {0: 2430, 1: 2430, 2: 14001}  # graphics, SM, memory (NVML's clock types)
SIM_POWER_LIMIT_MW = 600_000


def nvmlSystemGetCudaDriverVersion() -> int:
    _require_init()
    return SIM_CUDA_DRIVER


def nvmlDeviceGetUUID(handle: Handle) -> str:
    _require_init()
    return f"GPU-5151{handle.index:04d}-0000-0000-0000-simulated000"


def nvmlDeviceGetApplicationsClock(handle: Handle, clock_type: int) -> int:
    _require_init()
    if clock_type not in SIM_CLOCKS_MHZ:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return SIM_CLOCKS_MHZ[clock_type]


def nvmlDeviceGetMaxClockInfo(handle: Handle, clock_type: int) -> int:
    return nvmlDeviceGetApplicationsClock(handle, clock_type)


def nvmlDeviceGetPowerManagementLimit(handle: Handle) -> int:
    _require_init()
    return SIM_POWER_LIMIT_MW


def nvmlDeviceGetPowerManagementDefaultLimit(handle: Handle) -> int:
    return nvmlDeviceGetPowerManagementLimit(handle)


# --- the conditions a sample reads each interval: clocks as set unless the simulated server's
# state says it is throttled (``sm_clock_mhz``, ``throttle_reasons`` in its GPU file) ---------

NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2


def nvmlDeviceGetClockInfo(handle: Handle, clock_type: int) -> int:
    data = _read(handle)
    if clock_type == NVML_CLOCK_SM and data:
        return int(_num(data, "sm_clock_mhz", SIM_CLOCKS_MHZ[NVML_CLOCK_SM]))
    return nvmlDeviceGetApplicationsClock(handle, clock_type)


def nvmlDeviceGetEnforcedPowerLimit(handle: Handle) -> int:
    return nvmlDeviceGetPowerManagementLimit(handle)


def nvmlDeviceGetCurrentClocksEventReasons(handle: Handle) -> int:
    """0x1 (idle) with no server on the GPU, else what the server's state says (0: none)."""
    data = _read(handle)
    return int(_num(data, "throttle_reasons", 0)) if data else 0x1

"""GPU telemetry agent: one JSON line per GPU per interval on stdout.

Self-contained on purpose (standard library and pynvml only, no import of this package): it
is piped to ``python3 -`` on a GPU host over SSH, where specbench is not installed. Run it by
hand to check a host::

    python3 gpu_agent.py --interval 1 --count 3 --gpus 0,1

A line: {"t": epoch, "gpu": i, "name": str, "util_pct", "mem_used_mib", "mem_total_mib",
"power_w", "temp_c", "processes": [{"pid", "name", "mem_mib", "cmd"}]}. A field the GPU does
not support is null. When NVML cannot be loaded or initialised, the agent prints one
{"error": "..."} line and exits with status 3, so the reader can tell "no NVML here" apart
from a crash. Bad arguments exit with status 2.

With SPECBENCH_SIM_NVML set (a directory of simulated GPU state), the simulated NVML module
is loaded instead of pynvml, from the file (or directory holding ``fake_nvml.py``) named by
SPECBENCH_SIM_NVML_MODULE, else from ``../sim/fake_nvml.py`` next to this file.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import time
from types import ModuleType
from typing import Any

EXIT_NO_NVML = 3
EXIT_USAGE = 2
MIB = 1024 * 1024


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def load_nvml() -> ModuleType:
    """pynvml, or the simulated NVML when SPECBENCH_SIM_NVML says so."""
    if not os.environ.get("SPECBENCH_SIM_NVML"):
        import pynvml

        return pynvml
    path = os.environ.get("SPECBENCH_SIM_NVML_MODULE", "")
    if not path:
        me = globals().get("__file__", "")
        if me and os.path.isfile(me):  # run from a file, not piped in
            here = os.path.dirname(os.path.abspath(me))
            path = os.path.join(os.path.dirname(here), "sim", "fake_nvml.py")
    if os.path.isdir(path):
        path = os.path.join(path, "fake_nvml.py")
    if not path or not os.path.isfile(path):
        raise ImportError(
            f"simulated NVML module not found ({path or 'SPECBENCH_SIM_NVML_MODULE unset'})"
        )
    spec = importlib.util.spec_from_file_location("specbench_fake_nvml", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load simulated NVML from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses in the module look themselves up there
    spec.loader.exec_module(module)
    return module


def proc_info(pid: int) -> tuple[str | None, str | None]:
    """The process's short name and command line, when this user may read them (a process
    in another container's PID namespace is not visible at all)."""
    name = cmd = None
    try:
        with open(f"/proc/{pid}/comm") as f:
            name = f.read().strip() or None
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = " ".join(f.read().replace(b"\0", b" ").decode(errors="replace").split())
        if raw:
            cmd = raw[:200]
            if name is None:
                name = os.path.basename(raw.split(" ", 1)[0]) or None
    except OSError:
        pass
    return name, cmd


def text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def sample(nvml: ModuleType, index: int, handle: Any) -> dict[str, Any]:
    """One GPU's reading; each query may fail alone (NotSupported on some boards, a GPU that
    fell off the bus), and then only that field is null."""
    err = nvml.NVMLError

    def get(fn: Any, *args: Any) -> Any:
        try:
            return fn(handle, *args)
        except err:
            return None

    out: dict[str, Any] = {"t": round(time.time(), 3), "gpu": index}
    name = get(nvml.nvmlDeviceGetName)
    out["name"] = text(name) if name is not None else None
    util = get(nvml.nvmlDeviceGetUtilizationRates)
    out["util_pct"] = float(util.gpu) if util is not None else None
    mem = get(nvml.nvmlDeviceGetMemoryInfo)
    out["mem_used_mib"] = round(mem.used / MIB, 1) if mem is not None else None
    out["mem_total_mib"] = round(mem.total / MIB, 1) if mem is not None else None
    power = get(nvml.nvmlDeviceGetPowerUsage)
    out["power_w"] = round(power / 1000.0, 1) if power is not None else None
    temp = get(nvml.nvmlDeviceGetTemperature, getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
    out["temp_c"] = float(temp) if temp is not None else None
    procs = []
    for p in get(nvml.nvmlDeviceGetComputeRunningProcesses) or []:
        used = getattr(p, "usedGpuMemory", None)
        pname, cmd = proc_info(p.pid)
        procs.append(
            {
                "pid": p.pid,
                "name": pname,
                "mem_mib": round(used / MIB, 1) if isinstance(used, int) else None,
                "cmd": cmd,
            }
        )
    out["processes"] = procs
    return out


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="gpu_agent", description="GPU telemetry as JSON lines")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    ap.add_argument("--count", type=int, default=0, help="intervals to sample; 0 = forever")
    ap.add_argument("--gpus", default="", help="comma-separated GPU indices (default: all)")
    args = ap.parse_args(argv)
    if args.interval <= 0 or args.count < 0:
        ap.error("--interval must be > 0 and --count >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        nvml = load_nvml()
    except Exception as e:  # ImportError, or a broken module
        emit({"error": f"NVML unavailable: {type(e).__name__}: {e}"})
        return EXIT_NO_NVML
    try:
        nvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound / DriverNotLoaded / ...
        emit({"error": f"NVML init failed: {e}"})
        return EXIT_NO_NVML
    try:
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as e:
            emit({"error": f"NVML cannot count GPUs: {e}"})
            return EXIT_NO_NVML
        try:
            wanted = [int(x) for x in args.gpus.split(",") if x.strip()] or list(range(count))
        except ValueError:
            emit({"error": f"--gpus must be comma-separated integers, got {args.gpus!r}"})
            return EXIT_USAGE
        missing = [i for i in wanted if not 0 <= i < count]
        if missing:
            emit({"error": f"no GPU {missing} on this host ({count} GPUs)"})
            return EXIT_USAGE
        handles: dict[int, Any] = {}
        n = 0
        next_t = time.monotonic()
        while True:
            for i in wanted:
                if i not in handles:
                    try:
                        handles[i] = nvml.nvmlDeviceGetHandleByIndex(i)
                    except nvml.NVMLError as e:
                        emit({"t": round(time.time(), 3), "gpu": i, "error": str(e)})
                        continue
                emit(sample(nvml, i, handles[i]))
            n += 1
            if args.count and n >= args.count:
                return 0
            next_t += args.interval
            time.sleep(max(0.0, next_t - time.monotonic()))
    except (BrokenPipeError, KeyboardInterrupt):
        # the reader went away (SSH dropped, campaign ended): leave quietly
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (no flush error at exit)
        return 0
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


if __name__ == "__main__":
    sys.exit(main())

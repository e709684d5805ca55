"""GPU telemetry agent: one JSON line per GPU per interval on stdout.

Self-contained on purpose (standard library only, pynvml when it can be imported, no import
of this package): it is piped to ``python -`` on a GPU host over SSH, where specbench is not
installed. Run it by hand to check a host::

    python3 gpu_agent.py --probe
    python3 gpu_agent.py --interval 1 --count 3 --gpus 0,1 [--source nvml|nvidia-smi]

Two sources give the same lines. NVML (``pynvml``, package nvidia-ml-py) is read in-process;
on a GPU host it usually exists only in the serving venv, not in the system ``python3``.
``nvidia-smi`` is always installed with the driver, so without pynvml the agent runs its
CSV queries (``QUERY_GPU``, ``QUERY_APPS`` and the first of ``QUERY_CONDITIONS`` the driver
answers) each interval instead. ``auto`` (the default
when run by hand) takes NVML when it works, else nvidia-smi.

``--probe`` prints one line saying what this interpreter can read, and exits 0:
{"probe": 1, "python": path, "nvml": {"ok", "gpus", "driver", "error"}, "smi": {...}}.

``--manifest`` prints one line describing what a server run through this interpreter runs
on, and exits 0 (every part it cannot read is an "error" in that part, never a failure):
{"manifest": 1, "python": {...}, "os": {...}, "packages": {name: {"version", "commit", ...}},
"gpus": {"source", "driver", "cuda_driver", "devices": [{"index", "name", "uuid",
"application_clocks_mhz", "max_clocks_mhz", "power_limit_w", "default_power_limit_w"}]},
"model": {"path", "files": {name: sha256}, "hash", "revision"}}. Packages are read from their
files (metadata, ``version.py``, PEP 610 ``direct_url.json``), never imported, so torch does
not initialise CUDA; ``--gpus``, ``--model`` and ``--packages`` say what to describe.

A sample line: {"t": epoch, "gpu": i, "name": str, "util_pct", "mem_used_mib",
"mem_total_mib", "power_w", "temp_c", "energy_mj", "processes": [{"pid", "name", "mem_mib",
"cmd"}]}: the readings are those of ``results/gpu_readings.py``, the one definition of a
sample's fields (this file cannot import it; tests/test_gpu_readings.py holds its keys to
it). A field the GPU does not support is null. ``energy_mj`` is NVML's total energy
counter (millijoules since the driver loaded; Volta and newer): a cell's energy is a delta of
it, exact where an integral of 1 s power readings is an estimate; nvidia-smi has no such
field, so its lines carry null there. Between samples the NVML source reads the counter alone
every ``--trace`` seconds (0.05 by default) and hands those reads in the next line's
``energy_trace`` ([[t, mJ], ...]), so a cell's edges are known to within a trace step and a
short cell's energy needs no more samples than a long one's. Memory "used" is NVML's v2
figure (without the driver's reservation), the number nvidia-smi prints. When the source
cannot be loaded or initialised, the agent prints one {"error": "..."} line and exits with
status 3, so the reader can tell "no telemetry here" apart from a crash. Bad arguments exit
with status 2.

With SPECBENCH_SIM_NVML set (a directory of simulated GPU state), the simulated NVML module
is loaded instead of pynvml, from the file (or directory holding ``fake_nvml.py``) named by
SPECBENCH_SIM_NVML_MODULE, else from ``../sim/fake_nvml.py`` next to this file.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import csv
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from types import ModuleType
from typing import Any

EXIT_NO_NVML = 3  # no telemetry from the asked source (the name predates nvidia-smi)
EXIT_USAGE = 2
MIB = 1024 * 1024
SMI_TIMEOUT_S = 10.0
# Seconds between reads of the energy counter alone, between samples (``energy_trace``).
TRACE_S = 0.05  # nvidia-smi hangs on a wedged GPU; a sample is not worth more

# The exact queries; tests/support/nvidia-smi replays what a real H200 printed for these.
GPU_FIELDS = (
    "index,uuid,name,utilization.gpu,memory.used,memory.total,memory.reserved,"
    "power.draw,power.limit,temperature.gpu,clocks.current.sm,pstate,driver_version"
)
APP_FIELDS = "gpu_uuid,pid,process_name,used_gpu_memory"
# The conditions NVML reads beside the sample (memory clock, clocks-event reasons), asked
# apart so a driver that lacks a field loses these only; drivers before 535 name the reasons
# ``clocks_throttle_reasons``. tests/support/nvidia-smi replays what a real H100 printed.
CONDITION_FIELDS = (
    "index,clocks.current.memory,clocks_event_reasons.active",
    "index,clocks.current.memory,clocks_throttle_reasons.active",
)
QUERY_GPU = [f"--query-gpu={GPU_FIELDS}", "--format=csv,noheader,nounits"]
QUERY_APPS = [f"--query-compute-apps={APP_FIELDS}", "--format=csv,noheader,nounits"]
QUERY_CONDITIONS = [[f"--query-gpu={f}", "--format=csv,noheader,nounits"] for f in CONDITION_FIELDS]


class SourceError(Exception):
    """The source cannot give telemetry here (no pynvml, no driver, no nvidia-smi)."""


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


# --- NVML ------------------------------------------------------------------------------------


class NvmlSource:
    name = "nvml"

    def __init__(self) -> None:
        try:
            self.nvml = load_nvml()
        except Exception as e:  # ImportError, or a broken module
            raise SourceError(f"NVML unavailable: {type(e).__name__}: {e}") from e
        try:
            self.nvml.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound / DriverNotLoaded / ...
            raise SourceError(f"NVML init failed: {e}") from e
        try:
            self.count = int(self.nvml.nvmlDeviceGetCount())
        except self.nvml.NVMLError as e:
            self.close()
            raise SourceError(f"NVML cannot count GPUs: {e}") from e
        self._handles: dict[int, Any] = {}
        self._trace: dict[int, list[list[float]]] = {}

    def trace(self, wanted: list[int]) -> None:
        """Read each GPU's energy counter alone, between samples: a cell's edges then fall
        within one trace step of a counter read, so a short cell's energy is as exact as a
        long one's (the counter is cheap to read; the full sample is not)."""
        energy_fn = getattr(self.nvml, "nvmlDeviceGetTotalEnergyConsumption", None)
        if energy_fn is None:
            return
        for i in wanted:
            handle = self._handles.get(i)
            if handle is None:
                continue
            try:
                mj = energy_fn(handle)
            except self.nvml.NVMLError:
                continue
            self._trace.setdefault(i, []).append([round(time.time(), 3), int(mj)])

    def driver(self) -> str | None:
        with contextlib.suppress(Exception):
            return text(self.nvml.nvmlSystemGetDriverVersion())
        return None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.nvml.nvmlShutdown()

    def energy_counters(self) -> int:
        """How many GPUs answer the total-energy counter (Volta and newer), so ``--check``
        can say before a campaign whether its energy comes from the counter or from the
        integral of the power readings."""
        energy_fn = getattr(self.nvml, "nvmlDeviceGetTotalEnergyConsumption", None)
        if energy_fn is None:
            return 0
        n = 0
        for i in range(self.count):
            try:
                energy_fn(self.nvml.nvmlDeviceGetHandleByIndex(i))
            except Exception:  # NotSupported, a GPU that fell off the bus: not counted
                continue
            n += 1
        return n

    def memory(self, handle: Any) -> Any:
        """v2 memory info where the library and driver have it: its ``used`` leaves out the
        driver's reservation, as nvidia-smi does (v1 counts it as used: 22234 against 21619
        MiB on an H200 under load); v1 elsewhere."""
        nvml = self.nvml
        v2 = getattr(nvml, "nvmlMemory_v2", None)
        if v2 is not None:
            try:
                return nvml.nvmlDeviceGetMemoryInfo(handle, version=v2)
            except (TypeError, nvml.NVMLError):
                pass  # an old driver or binding: v1 below
        return nvml.nvmlDeviceGetMemoryInfo(handle)

    def samples(self, wanted: list[int]) -> list[dict[str, Any]]:
        out = []
        for i in wanted:
            if i not in self._handles:
                try:
                    self._handles[i] = self.nvml.nvmlDeviceGetHandleByIndex(i)
                except self.nvml.NVMLError as e:
                    out.append({"t": round(time.time(), 3), "gpu": i, "error": str(e)})
                    continue
            line = self.sample(i, self._handles[i])
            trace = self._trace.pop(i, None)
            if trace:
                line["energy_trace"] = trace
            out.append(line)
        return out

    def sample(self, index: int, handle: Any) -> dict[str, Any]:
        """One GPU's reading; each query may fail alone (NotSupported on some boards, a GPU
        that fell off the bus), and then only that field is null."""
        nvml = self.nvml
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
        mem = get(self.memory)
        out["mem_used_mib"] = round(mem.used / MIB, 1) if mem is not None else None
        out["mem_total_mib"] = round(mem.total / MIB, 1) if mem is not None else None
        power = get(nvml.nvmlDeviceGetPowerUsage)
        out["power_w"] = round(power / 1000.0, 1) if power is not None else None
        energy_fn = getattr(nvml, "nvmlDeviceGetTotalEnergyConsumption", None)  # old bindings
        energy = get(energy_fn) if energy_fn is not None else None
        out["energy_mj"] = int(energy) if energy is not None else None
        temp = get(nvml.nvmlDeviceGetTemperature, getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
        out["temp_c"] = float(temp) if temp is not None else None
        out.update(self.conditions(get))
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

    def conditions(self, get: Any) -> dict[str, Any]:
        """Clocks, power limit and throttle reasons: the conditions a measurement depends on.
        The reasons call was renamed (ClocksThrottle -> ClocksEvent, driver 535); the older
        name is taken where the bindings lack the new one."""
        nvml = self.nvml
        clock = getattr(nvml, "nvmlDeviceGetClockInfo", None)
        sm = get(clock, getattr(nvml, "NVML_CLOCK_SM", 1)) if clock else None
        mem = get(clock, getattr(nvml, "NVML_CLOCK_MEM", 2)) if clock else None
        limit_fn = getattr(nvml, "nvmlDeviceGetEnforcedPowerLimit", None)
        limit = get(limit_fn) if limit_fn else None
        reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        reasons = get(reasons_fn) if reasons_fn else None
        return {
            "sm_clock_mhz": float(sm) if sm is not None else None,
            "mem_clock_mhz": float(mem) if mem is not None else None,
            "power_limit_w": round(limit / 1000.0, 1) if limit is not None else None,
            "throttle_reasons": int(reasons) if reasons is not None else None,
        }


# --- nvidia-smi ------------------------------------------------------------------------------


def smi_number(value: str) -> float | None:
    """A CSV field of ``--format=csv,noheader,nounits``: a number, or "[N/A]",
    "[Not Supported]", "[Insufficient Permissions]" and the like for a missing one."""
    try:
        return float(value)
    except ValueError:
        return None


def smi_rows(out: str) -> list[list[str]]:
    return [[c.strip() for c in row] for row in csv.reader(out.splitlines()) if row]


def smi_reasons(value: str) -> int | None:
    """The clocks-event reasons field: a hex mask ("0x0000000000000004"), or "[N/A]"."""
    try:
        return int(value, 16)
    except ValueError:
        return None


def parse_conditions(out: str) -> dict[int, dict[str, Any]]:
    """The conditions query's output, by GPU index."""
    found: dict[int, dict[str, Any]] = {}
    for row in smi_rows(out):
        with contextlib.suppress(ValueError, IndexError):
            found[int(row[0])] = {
                "mem_clock_mhz": smi_number(row[1]),
                "throttle_reasons": smi_reasons(row[2]),
            }
    return found


def parse_smi(
    gpu_csv: str, apps_csv: str, t: float | None = None, conditions_csv: str = ""
) -> list[dict[str, Any]]:
    """The queries' output as sample lines, one per GPU, processes attached by UUID, the
    conditions by index (none where the driver did not answer that query)."""
    t = round(time.time(), 3) if t is None else t
    conditions = parse_conditions(conditions_csv)
    gpus: list[dict[str, Any]] = []
    by_uuid: dict[str, dict[str, Any]] = {}
    for row in smi_rows(gpu_csv):
        if len(row) < 10:
            continue
        try:
            index = int(row[0])
        except ValueError:
            continue
        sample = {
            "t": t,
            "gpu": index,
            "name": row[2] or None,
            "util_pct": smi_number(row[3]),
            "mem_used_mib": smi_number(row[4]),
            "mem_total_mib": smi_number(row[5]),
            "power_w": smi_number(row[7]),
            "temp_c": smi_number(row[9]),
            "sm_clock_mhz": smi_number(row[10]),
            "mem_clock_mhz": None,
            "power_limit_w": smi_number(row[8]),
            "throttle_reasons": None,
            **conditions.get(index, {}),
            "energy_mj": None,  # nvidia-smi has no energy counter: power is integrated
            "processes": [],
        }
        gpus.append(sample)
        by_uuid[row[1]] = sample
    for row in smi_rows(apps_csv):
        if len(row) < 4 or row[0] not in by_uuid:
            continue
        try:
            pid = int(row[1])
        except ValueError:
            continue
        smi_name = os.path.basename(row[2]) if row[2] and not row[2].startswith("[") else None
        name, cmd = proc_info(pid)
        if smi_name and name != smi_name[:15]:
            # Another PID namespace (a container's pid 564 is not ours): /proc shows some
            # other process, so keep nvidia-smi's name and no command line.
            name, cmd = smi_name, None
        by_uuid[row[0]]["processes"].append(
            {"pid": pid, "name": name or smi_name, "mem_mib": smi_number(row[3]), "cmd": cmd}
        )
    return gpus


class SmiSource:
    name = "nvidia-smi"

    def __init__(self) -> None:
        self.path = shutil.which("nvidia-smi")
        if self.path is None:
            raise SourceError("nvidia-smi not found on PATH")
        self.conditions_query: list[str] | None = None
        for query in QUERY_CONDITIONS:  # the first this driver answers, asked each sample
            with contextlib.suppress(SourceError):
                self.run(query)
                self.conditions_query = query
                break
        self.gpus = self.query()
        if not self.gpus:
            raise SourceError("nvidia-smi lists no GPU")
        self.count = len(self.gpus)

    def run(self, args: list[str]) -> str:
        assert self.path is not None
        try:
            res = subprocess.run(
                [self.path, *args],
                capture_output=True,
                text=True,
                timeout=SMI_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as e:
            raise SourceError(f"nvidia-smi did not answer within {SMI_TIMEOUT_S:g}s") from e
        except OSError as e:
            raise SourceError(f"cannot run nvidia-smi: {e}") from e
        if res.returncode != 0:
            said = (res.stdout.strip() or res.stderr.strip()).splitlines()
            raise SourceError(
                f"nvidia-smi failed (status {res.returncode})" + (f": {said[0]}" if said else "")
            )
        return res.stdout

    def query(self) -> list[dict[str, Any]]:
        conditions = ""
        if self.conditions_query is not None:
            with contextlib.suppress(SourceError):  # the sample stands without them
                conditions = self.run(self.conditions_query)
        return parse_smi(self.run(QUERY_GPU), self.run(QUERY_APPS), conditions_csv=conditions)

    def driver(self) -> str | None:
        with contextlib.suppress(SourceError, IndexError):
            return smi_rows(self.run(QUERY_GPU))[0][12]
        return None

    def samples(self, wanted: list[int]) -> list[dict[str, Any]]:
        try:
            by_index = {s["gpu"]: s for s in self.query()}
        except SourceError as e:
            return [{"t": round(time.time(), 3), "gpu": i, "error": str(e)} for i in wanted]
        return [
            by_index.get(i) or {"t": round(time.time(), 3), "gpu": i, "error": "not listed"}
            for i in wanted
        ]

    def close(self) -> None:
        return None


SOURCES = {"nvml": NvmlSource, "nvidia-smi": SmiSource}


def open_source(name: str) -> Any:
    if name != "auto":
        return SOURCES[name]()
    try:
        return NvmlSource()
    except SourceError as nvml_error:
        try:
            return SmiSource()
        except SourceError as smi_error:
            raise SourceError(f"{nvml_error}; {smi_error}") from None


def probe() -> dict[str, Any]:
    """What this interpreter can read, source by source."""
    out: dict[str, Any] = {"probe": 1, "python": sys.executable or "python"}
    for key, cls in (("nvml", NvmlSource), ("smi", SmiSource)):
        try:
            src = cls()
        except SourceError as e:
            out[key] = {"ok": False, "error": str(e)}
            continue
        out[key] = {"ok": True, "gpus": src.count, "driver": src.driver()}
        if isinstance(src, NvmlSource):
            out[key]["energy_gpus"] = src.energy_counters()
        src.close()
    return out


# --- the manifest ------------------------------------------------------------------------------

#: The files of a model directory that decide what it computes (weights are too big to hash
#: on every run; a changed config, tokenizer or chat template shows in these).
MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "tokenizer.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "model.safetensors.index.json",
)
#: Names a package's version module gives its commit under.
COMMIT_NAMES = ("__commit_id__", "commit_id", "__commit__", "git_version", "__git_version__")
NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2


def _module_constants(path: str) -> dict[str, Any]:
    """The literal assignments of a Python file (``__version__ = "1.2"``), read, not run."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return {}
    out: dict[str, Any] = {}
    for node in tree.body:
        targets: list[Any] = []
        value = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        names: list[str] = []
        for t in targets:  # ``a = b = 1`` too
            names += [t.id] if isinstance(t, ast.Name) else []
        while isinstance(value, ast.NamedExpr):
            value = value.value
        try:
            literal = ast.literal_eval(value) if value is not None else None
        except (ValueError, SyntaxError, TypeError):
            continue
        for name in names:
            out[name] = literal
    return out


def _git_head(path: str) -> str | None:
    """The commit of the git checkout holding ``path`` (an editable install), if any."""
    git = shutil.which("git")
    if git is None:
        return None
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        res = subprocess.run(
            [git, "-C", path, "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            stdin=subprocess.DEVNULL,
        )
        head = res.stdout.strip()
        if res.returncode == 0 and len(head) == 40:
            return head
    return None


def package_info(name: str) -> dict[str, Any]:
    """A top-level package's distribution, version and commit, from its files."""
    from importlib import metadata

    out: dict[str, Any] = {}
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return {"error": "not installed"}
    where = list(spec.submodule_search_locations or [])
    pkg_dir = where[0] if where else os.path.dirname(spec.origin or "")
    out["path"] = pkg_dir

    def distributions() -> Any:
        yield name  # the usual case, without scanning every distribution installed
        # A CPU build installs the engine's package under another name (Python 3.10+).
        with contextlib.suppress(Exception):
            yield from metadata.packages_distributions().get(name, [])

    for dist_name in distributions():
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            continue
        out["distribution"] = dist.metadata["Name"]
        out["version"] = dist.version
        with contextlib.suppress(Exception):
            direct = json.loads(dist.read_text("direct_url.json") or "null")
            if isinstance(direct, dict):
                vcs = direct.get("vcs_info") or {}
                if vcs.get("commit_id"):
                    out["commit"] = vcs["commit_id"]
                out["source"] = direct.get("url")
                if (direct.get("dir_info") or {}).get("editable"):
                    out["editable"] = True
        break
    for mod in ("_version.py", "version.py"):
        consts = _module_constants(os.path.join(pkg_dir, mod))
        if "version" not in out and isinstance(consts.get("__version__"), str):
            out["version"] = consts["__version__"]
        for key in COMMIT_NAMES:
            if not out.get("commit") and isinstance(consts.get(key), str) and consts[key]:
                out["commit"] = consts[key]
        if name == "torch" and consts:
            out["cuda"] = consts.get("cuda")
            out["hip"] = consts.get("hip")
    source = str(out.get("source") or "")
    if not out.get("commit") and out.get("editable") and source.startswith("file://"):
        # An editable install from a checkout: the checkout's commit (a plain install inside
        # some repository, a venv in a project, must not take that project's commit).
        head = _git_head(source[len("file://") :])
        if head:
            out["commit"] = head
    return out


def os_info() -> dict[str, Any]:
    out: dict[str, Any] = {
        "system": platform.system(),
        "kernel": platform.release(),
        "kernel_version": platform.version(),
        "machine": platform.machine(),
        "hostname": socket.gethostname(),
    }
    with contextlib.suppress(OSError), open("/etc/os-release", encoding="utf-8") as f:
        for line in f:
            key, _, value = line.strip().partition("=")
            if key == "PRETTY_NAME":
                out["distribution"] = value.strip().strip('"')
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    out["cpu"] = line.split(":", 1)[1].strip()
                    break
        out["cpus"] = os.cpu_count()
    return out


def model_info(path: str) -> dict[str, Any]:
    """The model directory's config files, each hashed, and one hash over them all; the
    Hugging Face snapshot a cache path names is its revision."""
    out: dict[str, Any] = {"path": path}
    if not path:
        return out
    real = os.path.realpath(os.path.expanduser(path))
    if not os.path.isdir(real):
        out["error"] = "not a directory on this host"
        return out
    files: dict[str, str] = {}
    for name in MODEL_FILES:
        full = os.path.join(real, name)
        h = hashlib.sha256()
        try:
            with open(full, "rb") as f:
                for chunk in iter(lambda f=f: f.read(1 << 20), b""):
                    h.update(chunk)
        except OSError:
            continue
        files[name] = h.hexdigest()
    out["files"] = files
    whole = hashlib.sha256()
    for name, digest in sorted(files.items()):
        whole.update(f"{name}\0{digest}\n".encode())
    out["hash"] = whole.hexdigest() if files else None
    parts = os.path.normpath(os.path.join(os.path.expanduser(path))).split(os.sep)
    if "snapshots" in parts[:-1]:
        out["revision"] = parts[parts.index("snapshots") + 1]
    return out


def _mhz(text_value: str | None) -> float | None:
    """``1980 MHz`` / ``700.00 W`` as a number; None for N/A and the like."""
    if not text_value:
        return None
    try:
        return float(text_value.split()[0])
    except (ValueError, IndexError):
        return None


def parse_smi_xml(xml_text: str) -> dict[str, Any]:
    """``nvidia-smi -q -x``: the driver, and per GPU its name, UUID, application and maximum
    clocks and power limits (the settings a measurement depends on)."""
    root = ET.fromstring(xml_text)
    devices = []
    for i, gpu in enumerate(root.findall("gpu")):
        power = gpu.find("gpu_power_readings")
        if power is None:
            power = gpu.find("power_readings")  # older drivers

        def at(node: Any, tag: str) -> str | None:
            found = node.find(tag) if node is not None else None
            return found.text if found is not None else None

        minor = at(gpu, "minor_number") or ""
        devices.append(
            {
                "index": int(minor) if minor.isdigit() else i,
                "name": at(gpu, "product_name"),
                "uuid": at(gpu, "uuid"),
                "application_clocks_mhz": {
                    "graphics": _mhz(at(gpu, "applications_clocks/graphics_clock")),
                    "memory": _mhz(at(gpu, "applications_clocks/mem_clock")),
                },
                "max_clocks_mhz": {
                    "graphics": _mhz(at(gpu, "max_clocks/graphics_clock")),
                    "sm": _mhz(at(gpu, "max_clocks/sm_clock")),
                    "memory": _mhz(at(gpu, "max_clocks/mem_clock")),
                },
                "power_limit_w": _mhz(at(power, "current_power_limit")),
                "default_power_limit_w": _mhz(at(power, "default_power_limit")),
                "persistence_mode": at(gpu, "persistence_mode"),
            }
        )
    return {
        "driver": root.findtext("driver_version"),
        "cuda_driver": root.findtext("cuda_version"),
        "devices": devices,
    }


def nvml_gpus(wanted: list[int]) -> dict[str, Any]:
    src = NvmlSource()
    nvml = src.nvml
    try:
        out: dict[str, Any] = {"source": "nvml", "driver": src.driver(), "devices": []}
        with contextlib.suppress(Exception):
            v = int(nvml.nvmlSystemGetCudaDriverVersion())
            out["cuda_driver"] = f"{v // 1000}.{v % 1000 // 10}"
        for i in wanted or range(src.count):

            def get(fn_name: str, *args: Any, handle: Any = None) -> Any:
                fn = getattr(nvml, fn_name, None)
                if fn is None:
                    return None
                try:
                    return fn(handle, *args)
                except Exception:
                    return None

            try:
                h = nvml.nvmlDeviceGetHandleByIndex(i)
            except Exception as e:
                out["devices"].append({"index": i, "error": str(e)})
                continue
            name = get("nvmlDeviceGetName", handle=h)
            uuid = get("nvmlDeviceGetUUID", handle=h)
            limit = get("nvmlDeviceGetPowerManagementLimit", handle=h)
            default = get("nvmlDeviceGetPowerManagementDefaultLimit", handle=h)
            out["devices"].append(
                {
                    "index": i,
                    "name": text(name) if name is not None else None,
                    "uuid": text(uuid) if uuid is not None else None,
                    "application_clocks_mhz": {
                        "graphics": get(
                            "nvmlDeviceGetApplicationsClock", NVML_CLOCK_GRAPHICS, handle=h
                        ),
                        "memory": get("nvmlDeviceGetApplicationsClock", NVML_CLOCK_MEM, handle=h),
                    },
                    "max_clocks_mhz": {
                        "graphics": get("nvmlDeviceGetMaxClockInfo", NVML_CLOCK_GRAPHICS, handle=h),
                        "sm": get("nvmlDeviceGetMaxClockInfo", NVML_CLOCK_SM, handle=h),
                        "memory": get("nvmlDeviceGetMaxClockInfo", NVML_CLOCK_MEM, handle=h),
                    },
                    "power_limit_w": limit / 1000.0 if isinstance(limit, (int, float)) else None,
                    "default_power_limit_w": default / 1000.0
                    if isinstance(default, (int, float))
                    else None,
                }
            )
        return out
    finally:
        src.close()


def smi_gpus(wanted: list[int]) -> dict[str, Any]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise SourceError("nvidia-smi not found on PATH")
    try:
        res = subprocess.run(
            [smi, "-q", "-x"],
            capture_output=True,
            text=True,
            timeout=SMI_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SourceError(f"nvidia-smi -q -x: {e}") from e
    if res.returncode != 0:
        raise SourceError(f"nvidia-smi -q -x failed (status {res.returncode})")
    try:
        got = parse_smi_xml(res.stdout)
    except ET.ParseError as e:
        raise SourceError(f"nvidia-smi -q -x: unreadable XML ({e})") from e
    if wanted:
        got["devices"] = [d for d in got["devices"] if d["index"] in wanted]
    return {"source": "nvidia-smi", **got}


def gpu_info(wanted: list[int]) -> dict[str, Any]:
    errors = []
    for read in (nvml_gpus, smi_gpus):
        try:
            return read(wanted)
        except SourceError as e:
            errors.append(str(e))
        except Exception as e:  # a broken binding: say it, try the next
            errors.append(f"{type(e).__name__}: {e}")
    return {"source": "none", "error": "; ".join(errors)}


def manifest(gpus: list[int], model: str, packages: list[str]) -> dict[str, Any]:
    """What a server run through this interpreter runs on (see the module docstring)."""
    out: dict[str, Any] = {
        "manifest": 1,
        "python": {
            "executable": sys.executable,
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
        },
    }
    for key, read in (
        ("os", os_info),
        ("packages", lambda: {p: package_info(p) for p in packages}),
        ("gpus", lambda: gpu_info(gpus)),
        ("model", lambda: model_info(model)),
    ):
        try:
            out[key] = read()
        except Exception as e:  # one unreadable part costs that part
            out[key] = {"error": f"{type(e).__name__}: {e}"}
    return out


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="gpu_agent", description="GPU telemetry as JSON lines")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    ap.add_argument("--count", type=int, default=0, help="intervals to sample; 0 = forever")
    ap.add_argument(
        "--trace",
        type=float,
        default=TRACE_S,
        help="seconds between energy-counter reads within an interval (NVML; 0: none)",
    )
    ap.add_argument("--gpus", default="", help="comma-separated GPU indices (default: all)")
    ap.add_argument("--source", choices=("auto", *SOURCES), default="auto")
    ap.add_argument("--probe", action="store_true", help="say what can be read, then exit")
    ap.add_argument("--manifest", action="store_true", help="describe this host, then exit")
    ap.add_argument("--model", default="", help="with --manifest: the model directory")
    ap.add_argument("--packages", default="torch", help="with --manifest: comma-separated packages")
    args = ap.parse_args(argv)
    if args.interval <= 0 or args.count < 0 or args.trace < 0:
        ap.error("--interval must be > 0, --count and --trace >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.probe:
        emit(probe())
        return 0
    if args.manifest:
        try:
            wanted = [int(x) for x in args.gpus.split(",") if x.strip()]
        except ValueError:
            emit({"error": f"--gpus must be comma-separated integers, got {args.gpus!r}"})
            return EXIT_USAGE
        packages = [p.strip() for p in args.packages.split(",") if p.strip()]
        emit(manifest(wanted, args.model, packages))
        return 0
    try:
        source = open_source(args.source)
    except SourceError as e:
        emit({"error": str(e)})
        return EXIT_NO_NVML
    try:
        try:
            wanted = [int(x) for x in args.gpus.split(",") if x.strip()] or list(
                range(source.count)
            )
        except ValueError:
            emit({"error": f"--gpus must be comma-separated integers, got {args.gpus!r}"})
            return EXIT_USAGE
        missing = [i for i in wanted if not 0 <= i < source.count]
        if missing:
            emit({"error": f"no GPU {missing} on this host ({source.count} GPUs)"})
            return EXIT_USAGE
        n = 0
        next_t = time.monotonic()
        while True:
            for line in source.samples(wanted):
                emit(line)
            n += 1
            if args.count and n >= args.count:
                return 0
            next_t += args.interval
            tracing = args.trace > 0 and hasattr(source, "trace")
            while tracing and next_t - time.monotonic() > args.trace:
                time.sleep(args.trace)
                source.trace(wanted)
            time.sleep(max(0.0, next_t - time.monotonic()))
    except (BrokenPipeError, KeyboardInterrupt):
        # the reader went away (SSH dropped, campaign ended): leave quietly
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (no flush error at exit)
        return 0
    finally:
        source.close()


if __name__ == "__main__":
    sys.exit(main())

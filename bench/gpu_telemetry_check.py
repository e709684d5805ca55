"""GPU telemetry on a real NVIDIA GPU, both modes a campaign can choose: the agent through a
python that has pynvml (NVML) and through one that has not (nvidia-smi), each idle, under a
load this script starts (a PyTorch process holding memory and keeping the GPU busy) and after
it; the same reader, probe chain and "GPUs free" wait the campaign uses.

It prints the raw nvidia-smi output the agent parses (the exact two queries), the figures of
both modes side by side (utilization, memory, power, the load's pid), NVML's v1 and v2 memory
under load, and checks: the probe picks NVML for the pynvml python and nvidia-smi for the
other; the load's pid, its memory and a high utilization show in both modes; the wait refuses
while the load runs and returns only after it ended. Exit status 0 when every check passed.

Needs the NVIDIA driver, nvidia-smi, and a python with torch and pynvml (nvidia-ml-py), by
default this one. The python without pynvml is a venv made here from the same interpreter
(no site packages). About a minute of GPU time. From the repository root:

    python3 bench/gpu_telemetry_check.py [--gpu 0] [--hold-gib 20] [--load-s 25] [--out DIR]

``--out DIR`` also writes report.txt (all of the output), figures.json and the raw CSV of both
queries in each state (idle, load, after), named as in tests/support/nvidia-smi-h200/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from specbench_tui.hosts.gpu_agent import QUERY_APPS, QUERY_GPU
from specbench_tui.hosts.telemetry import (
    AgentProcess,
    AgentRunner,
    GpuSample,
    GpusNotFreeError,
    LocalAgentRunner,
    TelemetryMode,
    TelemetryReader,
    probe_telemetry,
    wait_gpus_free,
)

LOAD = """
import os, sys, time, torch
gib, secs = float(sys.argv[1]), float(sys.argv[2])
dev = torch.device("cuda:0")
hold = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=dev)
hold.fill_(1)
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
b = torch.randn_like(a)
torch.cuda.synchronize()
print("holding", os.getpid(), flush=True)
end = time.time() + secs
while time.time() < end:
    for _ in range(10):
        c = a @ b
    torch.cuda.synchronize()
print("load done", flush=True)
"""

NVML_MEMORY = """
import json, sys, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(int(sys.argv[1]))
v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
v2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
mib = 2**20
print(json.dumps({"v1_used_mib": round(v1.used / mib, 1), "v2_used_mib": round(v2.used / mib, 1),
                  "v2_reserved_mib": round(v2.reserved / mib, 1),
                  "total_mib": round(v2.total / mib, 1)}))
"""


class Output:
    def __init__(self, out: Path | None) -> None:
        self.out = out
        self.lines: list[str] = []
        self.failures: list[str] = []
        self.figures: dict[str, Any] = {}
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)

    def say(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)

    def check(self, ok: bool, what: str) -> None:
        self.say(f"  [{'PASS' if ok else 'FAIL'}] {what}")
        if not ok:
            self.failures.append(what)

    def save(self, name: str, text: str) -> None:
        if self.out is not None:
            (self.out / name).write_text(text)

    def close(self) -> None:
        self.save("report.txt", "\n".join(self.lines) + "\n")
        self.save("figures.json", json.dumps(self.figures, indent=1, default=str) + "\n")


class SourceRunner(AgentRunner):
    """The agent through one interpreter with the mode's ``--source``, as a host runs it."""

    def __init__(self, mode: TelemetryMode) -> None:
        assert mode.python is not None
        self.mode = mode
        self.inner = LocalAgentRunner(mode.python)

    async def start(self, args: list[str]) -> AgentProcess:
        return await self.inner.start([*args, *self.mode.agent_args()])


def smi(args: list[str]) -> str:
    res = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30)
    return res.stdout + (f"[stderr] {res.stderr}" if res.stderr.strip() else "")


def raw(o: Output, state: str, gpu: int) -> None:
    o.say(f"--- raw nvidia-smi, {state} ---")
    o.say("$ nvidia-smi")
    o.say(smi([]).rstrip())
    for name, args in (("query-gpu", QUERY_GPU), ("query-apps", QUERY_APPS)):
        text = smi(args)
        o.say(f"$ nvidia-smi {' '.join(args)}")
        o.say(text.rstrip() or "(empty)")
        o.save(f"{state}.{name}.csv", text)


def describe(s: GpuSample | None) -> str:
    if s is None:
        return "no sample"
    procs = ", ".join(p.describe() for p in s.processes) or "no processes"
    return (
        f"util {s.util_pct}%, mem {s.mem_used_mib}/{s.mem_total_mib} MiB, power {s.power_w} W, "
        f"temp {s.temp_c} C; {procs}"
    )


def as_dict(s: GpuSample | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "util_pct": s.util_pct,
        "mem_used_mib": s.mem_used_mib,
        "mem_total_mib": s.mem_total_mib,
        "power_w": s.power_w,
        "temp_c": s.temp_c,
        "processes": [{"pid": p.pid, "name": p.name, "mem_mib": p.mem_mib} for p in s.processes],
    }


async def fresh(reader: TelemetryReader, gpu: int, after: float, timeout_s: float = 15) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        s = reader.latest().get(gpu)
        if s is not None and s.received > after:
            return s
        await asyncio.sleep(0.1)
    return None


def python_without_pynvml(base: str, where: Path) -> str:
    """A venv of ``base`` without site packages: like a GPU host's system python3."""
    try:
        subprocess.run(
            [base, "-m", "venv", "--without-pip", str(where)], check=True, capture_output=True
        )
        python = str(where / "bin" / "python")
    except (subprocess.CalledProcessError, OSError):
        python = str(where / "python3")  # no venv module: the interpreter without site
        where.mkdir(parents=True, exist_ok=True)
        Path(python).write_text(f'#!/bin/sh\nexec {base} -S "$@"\n')
        os.chmod(python, 0o755)
    return python


async def main(args: argparse.Namespace) -> int:
    o = Output(args.out)
    gpu = args.gpu
    try:
        return await run(o, gpu, args)
    finally:
        o.close()


async def run(o: Output, gpu: int, args: argparse.Namespace) -> int:
    if shutil.which("nvidia-smi") is None:
        o.say("nvidia-smi not found: this needs a machine with an NVIDIA GPU")
        return 2
    nvml_python = args.nvml_python
    scratch = Path(tempfile.mkdtemp(prefix="specbench-gpu-check-"))
    plain_python = python_without_pynvml(nvml_python, scratch / "venv")
    o.say(f"python with pynvml: {nvml_python}")
    o.say(f"python without pynvml: {plain_python}")
    has = subprocess.run([plain_python, "-c", "import pynvml"], capture_output=True, text=True)
    o.check(has.returncode != 0, "the second python cannot import pynvml")
    o.say(smi(["--version"]).rstrip())

    o.say("\n=== probe: the chain a campaign walks ===")
    modes: dict[str, TelemetryMode] = {}
    for want, pythons in (("nvml", [nvml_python]), ("nvidia-smi", [plain_python])):
        mode = await probe_telemetry(LocalAgentRunner, pythons)
        modes[want] = mode
        o.say(f"  {pythons} -> {mode.describe()}" + (f" [{mode.detail}]" if mode.detail else ""))
        o.check(mode.source == want, f"chain picks {want} for {pythons[0]}")
    chain = await probe_telemetry(LocalAgentRunner, [plain_python, nvml_python])
    o.say(f"  [{plain_python}, {nvml_python}] -> {chain.describe()}")
    o.check(chain.source == "nvml", "NVML through the second interpreter beats nvidia-smi")
    o.figures["modes"] = {k: m.describe() for k, m in modes.items()}
    if any(m.source not in ("nvml", "nvidia-smi") for m in modes.values()):
        return 1

    readers = {
        name: TelemetryReader(f"gpu-{name}", SourceRunner(mode), interval_s=0.5, gpus=[gpu])
        for name, mode in modes.items()
    }
    for r in readers.values():
        r.start()
    load: subprocess.Popen[str] | None = None
    try:
        o.say("\n=== idle ===")
        raw(o, "idle", gpu)
        t = time.monotonic()
        for name, r in readers.items():
            try:
                ok = await wait_gpus_free(r.latest, [gpu], 60)
            except GpusNotFreeError as e:
                o.say(f"  {name}: {e.reason}")
                ok = False
            s = r.latest().get(gpu)
            o.say(f"  {name:10} {describe(s)}")
            o.figures[f"idle.{name}"] = as_dict(s)
            o.check(ok, f"{name}: idle GPU {gpu} reported free")

        o.say(f"\n=== load: {args.hold_gib:g} GiB held, matmuls for {args.load_s:g} s ===")
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu)}
        load = subprocess.Popen(
            [nvml_python, "-c", LOAD, str(args.hold_gib), str(args.load_s)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert load.stdout is not None
        first = load.stdout.readline().split()
        if first[:1] != ["holding"]:
            o.check(False, f"the load started (got {first!r})")
            return 1
        pid = int(first[1])
        o.say(f"  load pid {pid}")
        await asyncio.sleep(3.0)  # utilization is an average over the last sample period
        t = time.monotonic()
        for name, r in readers.items():
            s = await fresh(r, gpu, t)
            o.say(f"  {name:10} {describe(s)}")
            o.figures[f"load.{name}"] = as_dict(s)
            pids = [p.pid for p in s.processes] if s else []
            o.check(pid in pids, f"{name}: the load's pid {pid} is listed")
            used = s.mem_used_mib if s and s.mem_used_mib is not None else 0
            o.check(used >= args.hold_gib * 1024 * 0.95, f"{name}: memory used {used} MiB")
            util = s.util_pct if s and s.util_pct is not None else 0
            o.check(util >= 50, f"{name}: utilization {util}%")
            power = s.power_w if s and s.power_w is not None else 0
            o.check(power > 0, f"{name}: power {power} W")
        mem = subprocess.run(
            [nvml_python, "-c", NVML_MEMORY, str(gpu)], capture_output=True, text=True
        )
        o.say(f"  NVML memory v1/v2: {mem.stdout.strip() or mem.stderr.strip()}")
        o.figures["load.nvml_memory"] = mem.stdout.strip()
        raw(o, "load", gpu)
        for name, r in readers.items():
            try:
                await wait_gpus_free(r.latest, [gpu], 2.0, host="this machine")
                o.check(False, f"{name}: the wait refused a GPU under load")
            except GpusNotFreeError as e:
                o.say(f"  {name}: {e.reason}")
                o.check(str(pid) in e.reason, f"{name}: the wait refuses, naming pid {pid}")

        o.say("\n=== the wait, started under load, returns only after the load ends ===")
        began = time.monotonic()
        waits = {
            name: asyncio.create_task(wait_gpus_free(r.latest, [gpu], 300))
            for name, r in readers.items()
        }
        ended: float | None = None
        while ended is None:
            if load.poll() is not None:
                ended = time.monotonic()
            await asyncio.sleep(0.05)
        code = load.returncode
        o.say(f"  load ended {ended - began:.1f} s after the waits began (status {code})")
        for name, task in waits.items():
            done_at = None
            while done_at is None:
                if task.done():
                    done_at = time.monotonic()
                await asyncio.sleep(0.05)
            try:
                ok = task.result() and done_at >= ended
            except GpusNotFreeError as e:
                o.say(f"  {name}: {e.reason}")
                ok = False
            o.say(f"  {name:10} wait returned {done_at - ended:+.2f} s after the load ended")
            o.figures[f"wait.{name}.after_end_s"] = round(done_at - ended, 2)
            o.check(ok, f"{name}: the wait returned only after the load ended")

        o.say("\n=== after ===")
        t = time.monotonic()
        for name, r in readers.items():
            s = await fresh(r, gpu, t)
            o.say(f"  {name:10} {describe(s)}")
            o.figures[f"after.{name}"] = as_dict(s)
        raw(o, "after", gpu)
        for name, r in readers.items():
            o.say(
                f"  reader {name}: {r.skipped_lines} unparsed lines, {r.restarts} agent restarts,"
                f" last error {r.last_error!r}"
            )
    finally:
        if load is not None and load.poll() is None:
            load.kill()
        for r in readers.values():
            await r.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    o.say("\n" + ("ALL CHECKS PASSED" if not o.failures else f"FAILED: {o.failures}"))
    return 0 if not o.failures else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--gpu", type=int, default=0, help="physical GPU index (nvidia-smi's)")
    ap.add_argument("--hold-gib", type=float, default=20.0, help="GPU memory the load holds")
    ap.add_argument("--load-s", type=float, default=25.0, help="seconds the load keeps it busy")
    ap.add_argument("--nvml-python", default=sys.executable, help="a python with pynvml and torch")
    ap.add_argument("--out", type=Path, help="write report.txt, figures.json and the raw CSV here")
    raise SystemExit(asyncio.run(main(ap.parse_args())))

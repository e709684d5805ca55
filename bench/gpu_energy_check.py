"""GPU board energy on a real NVIDIA GPU, both ways a campaign computes it: the rise of
NVML's energy counter over a window, and the trapezoidal integral of the 1 s power samples
over the same window, side by side, for a process that keeps the GPU busy (a torch bf16
matmul loop) and for the idle GPU before it.

The samples come from the telemetry agent through the reader, exactly as a campaign reads a
host; the figures from ``bench/energy.py`` through the engine's energy watch (the same
events a campaign publishes: group started, ready, cell started, a cell's request spans),
once with the counter and once with it taken out of the samples, which is what an
nvidia-smi host gives. As a check on both, NVML's counter is also read directly, in this
process, at the load's own start and end.

It prints, per window (the whole load, and a 20 s stretch of it): the energy by each method,
their ratio (target: within 5%), the mean power, the samples in the window and whether the
energy is valid; and the idle floor. Exit status 0 when the whole window's two figures are
within 5% of each other and both are valid.

Needs the NVIDIA driver and a python with torch and pynvml (nvidia-ml-py), by default this
one. About 80 s of GPU time. From the repository root:

    python3 bench/gpu_energy_check.py [--gpu 0] [--load-s 60] [--idle-s 10] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout


def _telemetry_without_the_ssh_backend() -> None:
    """Where ``specbench_tui.hosts`` cannot be imported whole (its SSH backend needs
    asyncssh, which a GPU box's torch python seldom has), its telemetry modules are reached
    without the package's ``__init__``: they need only the standard library and httpx."""
    try:
        import specbench_tui.hosts  # noqa: F401
    except ImportError:
        import types

        pkg = types.ModuleType("specbench_tui.hosts")
        pkg.__path__ = [str(ROOT / "specbench_tui" / "hosts")]
        sys.modules["specbench_tui.hosts"] = pkg


_telemetry_without_the_ssh_backend()

from specbench_tui.engine.energy_watch import EnergyWatch  # noqa: E402
from specbench_tui.hosts.telemetry import (  # noqa: E402
    GpuSample,
    LocalAgentRunner,
    TelemetryReader,
)
from specbench_tui.results.events import (  # noqa: E402
    CellEnergy,
    CellStarted,
    Event,
    GroupStarted,
    ServiceReady,
)
from specbench_tui.results.records import RequestRecord  # noqa: E402

LOAD = """
import json, os, sys, time, torch, pynvml
secs = float(sys.argv[1])
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(int(sys.argv[2]))
dev = torch.device("cuda:0")
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
b = torch.randn_like(a)
for _ in range(20):
    c = a @ b
torch.cuda.synchronize()
print("ready", flush=True)  # a server that is up: its context held, the GPU idle
sys.stdin.readline()  # "go": the cell starts
e0, t0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h), time.time()
n = 0
while time.time() < t0 + secs:
    for _ in range(10):
        c = a @ b
    torch.cuda.synchronize()
    n += 10
t1, e1 = time.time(), pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
print(json.dumps({"pid": os.getpid(), "t0": t0, "t1": t1, "e0_mj": e0, "e1_mj": e1,
                  "matmuls": n}), flush=True)
"""


class Run:
    """The samples of one GPU as they arrive, fed to two energy watches: one as read, one
    with the counter taken out (what an nvidia-smi host gives)."""

    def __init__(self, gpu: int) -> None:
        self.gpu = gpu
        self.samples: list[GpuSample] = []
        self.events: dict[str, list[Event]] = {"nvml_counter": [], "power_integral": []}
        self.watches = {
            "nvml_counter": EnergyWatch(self.events["nvml_counter"].append),
            "power_integral": EnergyWatch(self.events["power_integral"].append),
        }

    def sample(self, s: GpuSample) -> None:
        self.samples.append(s)
        self.watches["nvml_counter"].sample(s)
        self.watches["power_integral"].sample(dataclasses.replace(s, energy_mj=None))

    def tap(self, ev: Event) -> None:
        for w in self.watches.values():
            w.on_event(ev)


def energy_line(name: str, f: dict[str, Any]) -> str:
    j = f.get("gpu_energy_j")
    return (
        f"  {name:15s} {j if j is None else round(j, 1)} J, "
        f"{f.get('avg_power_w')} W mean, {f.get('energy_samples')} samples, "
        f"valid {f.get('energy_valid')}"
        + (f" ({f['energy_note']})" if f.get("energy_note") else "")
    )


async def main(args: argparse.Namespace) -> int:
    out: list[str] = []
    figures: dict[str, Any] = {}

    def say(text: str = "") -> None:
        print(text, flush=True)
        out.append(text)

    run = Run(args.gpu)
    reader = TelemetryReader(
        "gpu-host",
        LocalAgentRunner(args.nvml_python),
        interval_s=1.0,
        gpus=[args.gpu],
        on_sample=run.sample,
        on_problem=lambda t: say(f"telemetry: {t}"),
    )
    reader.start()
    try:
        deadline = time.monotonic() + 20
        while not run.samples and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        if not run.samples:
            say("no sample from the agent: no NVML here?")
            return 2
        first = run.samples[-1]
        say(f"agent: GPU {args.gpu} {first.name}, energy counter {first.energy_mj} mJ")
        # The load plays the server, and the events are those a campaign publishes for it:
        # started, ready (its context up, the GPU idle for the idle floor), a cell.
        run.tap(GroupStarted(group="g", host="gpu-host", gpu_ids=[args.gpu]))
        proc = await asyncio.create_subprocess_exec(
            args.nvml_python,
            "-c",
            LOAD,
            str(args.load_s),
            str(args.gpu),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert proc.stdin is not None and proc.stdout is not None
        if (await proc.stdout.readline()).strip() != b"ready":
            say("the load did not start")
            return 2
        run.tap(ServiceReady(group="g"))
        await asyncio.sleep(args.idle_s)
        run.tap(CellStarted(cell_id="load", group="g", cell="load", attempt=1))
        run.tap(CellStarted(cell_id="part", group="g", cell="part", attempt=1))
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
        raw, _ = await proc.communicate()
        load = json.loads(raw.decode().strip().splitlines()[-1])
        t0, t1 = load["t0"], load["t1"]
        say(f"load: pid {load['pid']}, {load['matmuls']} bf16 8192^3 matmuls in {t1 - t0:.1f} s")
        direct_j = (load["e1_mj"] - load["e0_mj"]) / 1000.0
        tokens = load["matmuls"]  # a matmul stands for a token in the figures per unit
        mid = (t0 + t1) / 2
        windows = {"load": (t0, t1), "part": (mid - 10.0, mid + 10.0)}
        for w in run.watches.values():
            for cid, (a, b) in windows.items():
                # The loop runs at a steady rate: a stretch of it did its share of the matmuls.
                n = round(tokens * (b - a) / (t1 - t0))
                rec = RequestRecord(cell_id=cid, started_at=a, e2e_s=b - a, output_tokens=n)
                w.cell_finished(cid, [rec], concurrent=True)
        deadline = time.monotonic() + 15
        while any(w.pending() for w in run.watches.values()) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
    finally:
        await reader.stop()
    got: dict[str, dict[str, dict[str, Any]]] = {}
    for method, evs in run.events.items():
        for ev in evs:
            assert isinstance(ev, CellEnergy)
            got.setdefault(ev.cell_id, {})[method] = ev.figures
    idle = got.get("load", {}).get("nvml_counter", {}).get("idle_power_w")
    say(f"idle floor: {idle} W (the load's context up, from ready to the cell's start)")
    say(f"NVML counter read directly at the load's start and end: {direct_j:.1f} J")
    ok = True
    for cid, (a, b) in windows.items():
        c = got.get(cid, {}).get("nvml_counter", {})
        i = got.get(cid, {}).get("power_integral", {})
        say(f"window {cid}: {b - a:.1f} s")
        say(energy_line("nvml_counter", c))
        say(energy_line("power_integral", i))
        ratio = None
        if c.get("gpu_energy_j") and i.get("gpu_energy_j"):
            ratio = i["gpu_energy_j"] / c["gpu_energy_j"]
            say(f"  integral / counter = {ratio:.4f} ({100 * (ratio - 1):+.2f}%)")
        for name, f in (("nvml_counter", c), ("power_integral", i)):
            say(
                f"  {name:15s} {f.get('j_per_output_token')} J per matmul, "
                f"{f.get('j_per_output_token_above_idle')} above idle"
            )
        figures[cid] = {"window_s": b - a, "nvml_counter": c, "power_integral": i, "ratio": ratio}
        if cid == "load":
            ok = (
                ratio is not None
                and abs(ratio - 1) <= 0.05
                and bool(c["energy_valid"])
                and bool(i["energy_valid"])
            )
            if c.get("gpu_energy_j") and direct_j > 0:
                say(f"  counter over the window / direct read = {c['gpu_energy_j'] / direct_j:.4f}")
    figures["direct_j"] = direct_j
    figures["load"].update(matmuls=load["matmuls"], t0=t0, t1=t1)
    figures["samples"] = [
        {"t": s.t, "power_w": s.power_w, "energy_mj": s.energy_mj} for s in run.samples
    ]
    say("PASS: both methods within 5%" if ok else "FAIL: the methods differ by more than 5%")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "energy.txt").write_text("\n".join(out) + "\n")
        (args.out / "energy.json").write_text(json.dumps(figures, indent=1) + "\n")
    return 0 if ok else 1


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--gpu", type=int, default=0, help="physical GPU index (NVML's)")
    ap.add_argument("--load-s", type=float, default=60.0, help="seconds the load keeps it busy")
    ap.add_argument("--idle-s", type=float, default=10.0, help="idle seconds before the load")
    ap.add_argument("--nvml-python", default=sys.executable, help="a python with pynvml and torch")
    ap.add_argument("--out", type=Path, help="write energy.txt and energy.json here")
    return ap.parse_args()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))

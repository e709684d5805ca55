"""A short cell's GPU board energy on a real NVIDIA GPU: what the agent's reads of the energy
counter between samples (``energy_trace``) change.

The agent (specbench_tui/hosts/gpu_agent.py, NVML) samples once a second and reads the
energy counter alone every ``--trace`` seconds between samples. This script runs it, starts
a PyTorch matrix-product load for a few seconds (a "cell" whose edges fall between samples),
and computes the cell's energy as bench/energy.py does, twice: from the one-second samples
alone, and with the trace. It prints both, whether each is valid, how often the counter
itself moved (the step between two distinct values: the driver's own update period, which
bounds what any read can resolve), and the power integral beside them.

Needs the NVIDIA driver, torch and pynvml (nvidia-ml-py) in this python; nothing else of
this package beyond bench/energy.py (standard library). From the repository root:

    python3 bench/short_cell_energy.py [--gpu 0] [--cell-s 2.5] [--trace 0.05] [--json OUT]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from specbench_tui.bench.energy import PowerSample, cell_energy  # noqa: E402

AGENT = HERE / "specbench_tui" / "hosts" / "gpu_agent.py"
LOAD = """
import sys, time, torch
gpu, seconds = int(sys.argv[1]), float(sys.argv[2])
a = torch.randn(8192, 8192, device=f"cuda:{gpu}", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device=f"cuda:{gpu}", dtype=torch.bfloat16)
torch.cuda.synchronize()
input()  # go
start = time.time()
end = start + seconds
while time.time() < end:
    for _ in range(10):
        c = a @ b
    torch.cuda.synchronize()
print(f"{start} {time.time()}", flush=True)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--cell-s", type=float, default=2.5)
    ap.add_argument("--trace", type=float, default=0.05)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    count = int(args.cell_s) + 8
    reading = ["--interval", "1", "--count", str(count), "--trace", str(args.trace)]
    agent = subprocess.Popen(
        [sys.executable, str(AGENT), "--source", "nvml", "--gpus", str(args.gpu), *reading],
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: list[dict[str, Any]] = []
    reader = threading.Thread(
        target=lambda: lines.extend(json.loads(x) for x in agent.stdout or () if x.strip())
    )
    reader.start()
    load = subprocess.Popen(
        [sys.executable, "-c", LOAD, str(args.gpu), str(args.cell_s)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(3.37)  # the cell starts between two samples
    assert load.stdin is not None and load.stdout is not None
    load.stdin.write("\n")
    load.stdin.flush()
    start, end = (float(x) for x in load.stdout.readline().split())
    load.wait(timeout=60)
    agent.wait(timeout=count + 30)
    reader.join()

    samples = [PowerSample(float(x["t"]), args.gpu, x["power_w"], x["energy_mj"]) for x in lines]
    traced = samples + [
        PowerSample(float(t), args.gpu, None, float(mj))
        for x in lines
        for t, mj in x.get("energy_trace") or ()
    ]
    window = [(start, end)]
    alone = cell_energy(samples, window, [args.gpu], 1)
    with_trace = cell_energy(traced, window, [args.gpu], 1)
    power_only = cell_energy(
        [PowerSample(s.t, s.gpu, s.power_w, None) for s in samples], window, [args.gpu], 1
    )
    reads = sorted((float(t), float(mj)) for x in lines for t, mj in x.get("energy_trace") or ())
    moves = [t for (_, prev), (t, mj) in itertools.pairwise(reads) if mj != prev]
    steps = [b - a for a, b in itertools.pairwise(moves)]
    out = {
        "cell_s": round(end - start, 3),
        "samples_in_window": alone.energy_samples,
        "trace_reads": len(reads),
        "counter_update_step_s_median": round(statistics.median(steps), 4) if steps else None,
        "samples_alone": {
            "energy_j": alone.gpu_energy_j,
            "valid": alone.energy_valid,
            "note": alone.energy_note,
        },
        "with_trace": {
            "energy_j": with_trace.gpu_energy_j,
            "valid": with_trace.energy_valid,
            "note": with_trace.energy_note,
            "avg_power_w": with_trace.avg_power_w,
        },
        "power_integral": {"energy_j": power_only.gpu_energy_j},
    }
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"result": out, "agent_lines": lines}, indent=1))
    return 0 if with_trace.energy_valid else 1


if __name__ == "__main__":
    sys.exit(main())

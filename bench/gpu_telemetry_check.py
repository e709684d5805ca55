"""GPU telemetry on a real NVIDIA GPU: the same agent, reader and "GPUs free" wait that a
campaign uses, against NVML instead of the simulator's fake.

It samples the idle GPU, then starts a process that holds GPU memory (PyTorch) and checks
that the wait refuses with a message naming the process, then that the GPU is reported free
again once the process exits. Needs a machine with an NVIDIA driver, pynvml and torch.

Run: python bench/gpu_telemetry_check.py [--gpu 0]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time

from specbench_tui.hosts.telemetry import (
    GpuSample,
    GpusNotFreeError,
    LocalAgentRunner,
    TelemetryReader,
    wait_gpus_free,
)

HOLD = (
    "import torch, time; x = torch.empty(20 * 2**30, dtype=torch.uint8, device='cuda:{gpu}'); "
    "x.fill_(1); torch.cuda.synchronize(); print('holding', flush=True); time.sleep({s})"
)


def describe(s: GpuSample) -> str:
    procs = ", ".join(p.describe() for p in s.processes) or "no processes"
    return (
        f"GPU {s.gpu} {s.name}: {s.util_pct}% util, {s.mem_used_mib:.0f}/{s.mem_total_mib:.0f} "
        f"MiB, {s.power_w:.1f} W, {s.temp_c:.0f} C; {procs}"
    )


async def main(gpu: int) -> int:
    reader = TelemetryReader("device", LocalAgentRunner(sys.executable), interval_s=0.5, gpus=[gpu])
    reader.start()
    try:
        t0 = time.monotonic()
        await wait_gpus_free(reader.latest, [gpu], 30)
        print(f"idle GPU reported free after {time.monotonic() - t0:.2f} s")
        print("  " + describe(reader.latest()[gpu]))

        hold = subprocess.Popen(
            [sys.executable, "-c", HOLD.format(gpu=gpu, s=8)], stdout=subprocess.PIPE, text=True
        )
        assert hold.stdout is not None and hold.stdout.readline().strip() == "holding"
        try:
            await wait_gpus_free(reader.latest, [gpu], 3)
            print("FAIL: a GPU holding 20 GiB was reported free")
            return 1
        except GpusNotFreeError as exc:
            print(f"held GPU refused as expected: {exc.reason}")
        print("  " + describe(reader.latest()[gpu]))
        hold.wait(30)
        t1 = time.monotonic()
        await wait_gpus_free(reader.latest, [gpu], 60)
        print(f"GPU free again {time.monotonic() - t1:.2f} s after the holder exited")
        print(
            f"reader: {reader.skipped_lines} unparsed lines, {reader.restarts} agent restarts, "
            f"last error {reader.last_error!r}"
        )
    finally:
        await reader.stop()
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpu", type=int, default=0)
    raise SystemExit(asyncio.run(main(ap.parse_args().gpu)))

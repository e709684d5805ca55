"""How far the client's TTFT and chunk gaps are from the truth, side by side with AIPerf.

The server is AIPerf's mock server (TTFT and inter-token delay configurable); the truth is the
loopback wire, captured by tcpdump: a request's TTFT on the wire runs from the kernel's stamp on
the last segment of the request to the stamp on the first response segment carrying an SSE
content event, and each chunk gap on the wire runs between two such segments. Kernel stamps
are taken when the sender hands a segment to the interface, so neither client nor server code
is in them. Each client's error is its own figure minus the wire's, request by request
(requests are matched to the wire by their prompt text).

Targets (issue 12): TTFT error median <= 1 ms and p99 <= 3 ms at 8 streams; chunk-gap error
(median) within 0.05 ms. Each repeat runs this project's client and then AIPerf against one
server under one capture; the summary gives the minimum and the median over repeats.

Run (as root, or with CAP_NET_RAW for tcpdump):
  python bench/timing_fidelity.py --mock-python M --tokenizer T --aiperf A [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import aiperf_rig as rig
from specbench_tui.bench.client import BenchClient, Completion
from specbench_tui.bench.client_health import ClientHealth, ClientWatch
from specbench_tui.bench.metrics import percentile
from specbench_tui.bench.prompting import CHAT

TARGET_TTFT_P50_S = 0.001
TARGET_TTFT_P99_S = 0.003
TARGET_GAP_S = 0.00005


@dataclass
class Errors:
    client: str
    requests: int
    ttft: list[float]
    gaps: list[float]

    def row(self) -> dict[str, float]:
        t = sorted(self.ttft)
        g = sorted(self.gaps)
        return {
            "ttft_p50": percentile(t, 50),
            "ttft_p99": percentile(t, 99),
            "gap_p50": percentile(g, 50),
            "gap_abs_p50": statistics.median(abs(x) for x in g),
        }


async def our_client(
    url: str, prompts: list[str], streams: int
) -> tuple[dict[str, Completion], ClientHealth | None]:
    out: dict[str, Completion] = {}
    queue = list(prompts)
    async with BenchClient(url, "openai", prompting=CHAT, concurrency=streams) as client:
        await client.generate("warm up the connection pool", max_tokens=8)

        async def worker() -> None:
            while queue:
                prompt = queue.pop(0)
                out[prompt] = await client.generate(prompt, max_tokens=100_000)

        async with ClientWatch() as watch:
            await asyncio.gather(*(worker() for _ in range(streams)))
    return out, watch.health


def needle(prompt: str) -> bytes:
    return json.dumps(prompt)[1:-1][:80].encode()


def match(wire: list[rig.WireRequest], prompt: str) -> rig.WireRequest | None:
    key = needle(prompt)
    hits = [w for w in wire if key in w.request]
    return hits[0] if len(hits) == 1 else None


def gap_errors(client_gaps: list[float], wire: rig.WireRequest) -> list[float]:
    wg = wire.gaps
    if len(wg) != len(client_gaps):
        return []
    return [c - w for c, w in zip(client_gaps, wg, strict=True)]


def one_repeat(args: argparse.Namespace, work: Path, n: int) -> tuple[Errors, Errors, str]:
    prompts = rig.token_prompts(args.tokenizer, args.tokens, args.requests, args.mock_python)
    pcap = work / f"r{n}.pcap"
    with rig.mock_server(args.mock_python, args.tokenizer, args.ttft_ms, args.itl_ms, work) as (
        url,
        _,
    ):
        port = int(url.rsplit(":", 1)[1])
        with rig.capture(port, pcap):
            ours, health = asyncio.run(our_client(url, prompts, args.streams))
            theirs = rig.run_aiperf(
                args.aiperf,
                url,
                args.tokenizer,
                concurrency=args.streams,
                requests=args.requests,
                isl=args.tokens,
                osl=args.tokens,
                artifacts=work / f"aiperf-r{n}",
                warmup=args.streams,
            )
    wire = rig.wire_requests(rig.read_pcap(pcap), port)
    mine = Errors("specbench-tui", 0, [], [])
    for prompt, done in ours.items():
        w = match(wire, prompt)
        if done.error is not None or w is None or w.ttft is None or done.ttft_s is None:
            continue
        mine.requests += 1
        mine.ttft.append(done.ttft_s - w.ttft)
        mine.gaps += gap_errors(done.itl_s, w)
    other = Errors("AIPerf", 0, [], [])
    for rec in theirs.records:
        w = match(wire, theirs.inputs.get(rec["metadata"]["conversation_id"], ""))
        metrics = rec["metrics"]
        if w is None or w.ttft is None or "time_to_first_token" not in metrics:
            continue
        other.requests += 1
        other.ttft.append(metrics["time_to_first_token"]["value"] / 1e3 - w.ttft)
        gaps = [g / 1e3 for g in metrics.get("inter_chunk_latency", {}).get("value", [])]
        other.gaps += gap_errors(gaps, w)
    lag = (
        f"client loop lag p99 {health.lag_p99_s * 1e3:.2f} ms, CPU {health.cpu_share:.0%}"
        if health
        else ""
    )
    return mine, other, lag


def ms(v: float) -> str:
    return f"{v * 1e3:7.3f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    rig.add_tool_args(ap)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--requests", type=int, default=80, help="per client and repeat")
    ap.add_argument("--tokens", type=int, default=64, help="prompt and output tokens")
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rig.check_tools(args)
    print(
        f"timing fidelity: AIPerf mock server (TTFT {args.ttft_ms:g} ms, inter-token "
        f"{args.itl_ms:g} ms, {args.tokens} tokens a request), {args.streams} streams, "
        f"{args.requests} requests per client per repeat; truth: tcpdump on lo"
    )
    rows: dict[str, list[dict[str, float]]] = {"specbench-tui": [], "AIPerf": []}
    with tempfile.TemporaryDirectory(prefix="timing-") as tmp:
        for n in range(args.repeats):
            before = rig.load()
            mine, other, lag = one_repeat(args, Path(tmp), n)
            print(f"\nrepeat {n + 1} ({before}; {lag})")
            print(
                f"  {'client':<14} {'matched':>7}  {'TTFT err p50':>12} {'TTFT err p99':>12}"
                f"  {'gap err p50':>11} {'|gap err| p50':>13}"
            )
            for e in (mine, other):
                if not e.ttft:
                    print(f"  {e.client:<14} {e.requests:>7}  (no request matched the wire)")
                    continue
                r = e.row()
                rows[e.client].append(r)
                print(
                    f"  {e.client:<14} {e.requests:>7}  {ms(r['ttft_p50']):>12} "
                    f"{ms(r['ttft_p99']):>12}  {ms(r['gap_p50']):>11} {ms(r['gap_abs_p50']):>13}"
                )
    print(f"\nover {args.repeats} repeats, min / median of each repeat's figure ({rig.load()}):")
    for client, rs in rows.items():
        if not rs:
            continue
        parts = []
        for key in ("ttft_p50", "ttft_p99", "gap_p50"):
            vals = [r[key] for r in rs]
            parts.append(f"{key} {min(vals) * 1e3:.3f} / {statistics.median(vals) * 1e3:.3f} ms")
        print(f"  {client:<14} " + ", ".join(parts))
    mine_rows = rows["specbench-tui"]
    if not mine_rows:
        print("\nno figures for this project's client: targets not met")
        return
    med = {k: statistics.median(r[k] for r in mine_rows) for k in mine_rows[0]}
    print("\ntargets (this project's client, median over repeats):")
    for label, value, limit in (
        ("TTFT error median <= 1 ms", abs(med["ttft_p50"]), TARGET_TTFT_P50_S),
        ("TTFT error p99 <= 3 ms", abs(med["ttft_p99"]), TARGET_TTFT_P99_S),
        ("chunk-gap error median <= 0.05 ms", abs(med["gap_p50"]), TARGET_GAP_S),
    ):
        print(f"  {label}: {'met' if value <= limit else 'NOT MET'} ({value * 1e3:.3f} ms)")


if __name__ == "__main__":
    main()

"""How much load the client carries, and at what CPU cost, side by side with AIPerf.

One server program, AIPerf's mock server with no delay (TTFT and inter-token latency 0.001 ms:
it streams as fast as it can, one token per SSE event), on this machine's cores with the
clients. At each concurrency level, each repeat runs:
- AIPerf against a fresh server, 256-token prompts and outputs;
- the whole tool: ``specbench-tui --headless`` on a plan whose one service group is that same
  server started by the tool on a local host (engine, store, telemetry, control socket), a
  concurrency cell with the same prompts and outputs, and a console attached to it through the
  control socket (``specbench-tui --attach`` in a tmux pane);
- this project's client on its own (``BenchClient``), for reference.

Output tok/s is tokens received (content events; one token each from this server) over the
window from the first request's start to the last one's end, for every client alike. CPU per
token is the CPU the client's processes spent inside that window (sampled from /proc): AIPerf's
whole process tree; the tool's headless process (the server it started is not counted); the
attached console is shown apart.

Targets (issue 12): >= 1.5x AIPerf's output tok/s at <= 0.5x its CPU per token, at 64 and 256
streams, with the whole tool running.

Run: python bench/client_capacity.py --mock-python M --tokenizer T --aiperf A [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import aiperf_rig as rig
from specbench_tui.bench.client import BenchClient
from specbench_tui.bench.prompting import CHAT

ROOT = Path(__file__).resolve().parent.parent

TOKENS = 256
TARGET_TOK_S_RATIO = 1.5
TARGET_CPU_RATIO = 0.5


@dataclass
class Figures:
    client: str
    tokens: int
    window_s: float
    cpu_s: float
    note: str = ""

    @property
    def tok_s(self) -> float:
        return self.tokens / self.window_s

    @property
    def cpu_us_per_token(self) -> float:
        return self.cpu_s / self.tokens * 1e6


PLAN = """\
[campaign]
name = "capacity"
title = "Client capacity against AIPerf's mock server"

[hosts.here]
local = true
gpus = 1

[server]
api = "openai"
model = "default"
python = {python}
port = {port}
launch = {launch}
ready_timeout = "120s"

[configs.mock]
label = "AIPerf mock server, no delay"

[matrix]
configs = ["mock"]
tp = [1]

[workloads.load]
kind = "concurrency"
levels = [{level}]
requests = {requests}
prompts = ["capacity"]
max_tokens = {tokens}
"""


def write_plan(work: Path, args: argparse.Namespace, level: int, prompts: list[str]) -> Path:
    plan_dir = work / f"plan-c{level}"
    (plan_dir / "prompts").mkdir(parents=True, exist_ok=True)
    rows = [json.dumps({"id": f"p{i}", "prompt": p}) for i, p in enumerate(prompts)]
    (plan_dir / "prompts" / "capacity.jsonl").write_text("\n".join(rows) + "\n")
    launch = rig.mock_command("{python}", "{port}", 0.001, 0.001)
    text = PLAN.format(
        python=json.dumps(args.mock_python),
        port=rig.free_port(),
        launch=json.dumps(launch),
        level=level,
        requests=args.requests,
        tokens=TOKENS,
    )
    (plan_dir / "plan.toml").write_text(text)
    return plan_dir / "plan.toml"


def tmux_pane_pid(session: str) -> int | None:
    res = subprocess.run(
        ["tmux", "display-message", "-p", "-t", session, "#{pane_pid}"],
        capture_output=True,
        text=True,
    )
    return int(res.stdout.strip()) if res.returncode == 0 and res.stdout.strip() else None


def run_tool(
    args: argparse.Namespace, work: Path, level: int, prompts: list[str], n: int
) -> tuple[Figures, Figures | None]:
    plan = write_plan(work, args, level, prompts)
    results = work / f"res-c{level}-r{n}"
    cwd = rig.server_dir(args.tokenizer, work / "server")
    log = (work / f"tool-c{level}-r{n}.log").open("w")
    # No GPU here: the local host's telemetry agent reads the simulated NVML instead (the same
    # agent, one sample a second into the same store); a real GPU host reads pynvml.
    nvml = work / "nvml"
    nvml.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "SPECBENCH_SIM_NVML": str(nvml),
        "SPECBENCH_SIM_NVML_MODULE": str(ROOT / "specbench_tui" / "sim" / "fake_nvml.py"),
        "SPECBENCH_SIM_GPUS": "1",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results", str(results)],
        cwd=cwd,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    root = results / "capacity"
    session = f"specbench-capacity-{os.getpid()}-{level}-{n}"
    console_pids: list[int] = []
    have_tmux = shutil.which("tmux") is not None
    with (
        rig.CpuSampler(lambda: [proc.pid]) as tool_cpu,
        rig.CpuSampler(lambda: rig.tree(console_pids[0]) if console_pids else []) as console_cpu,
    ):
        deadline = time.monotonic() + 60
        while have_tmux and not (root / "control.sock").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if have_tmux and (root / "control.sock").exists():
            attach = f"{sys.executable} -m specbench_tui --attach {root}"
            subprocess.run(
                ["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40", attach],
                check=True,
                cwd=cwd,
            )
            pid = tmux_pane_pid(session)
            if pid:
                console_pids.append(pid)
        code = proc.wait()
        time.sleep(0.2)
    if console_pids:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    log.close()
    if code != 0:
        raise SystemExit(f"the tool exited with {code}; see {log.name}")
    req = pl.read_parquet(root / "requests.parquet").filter(pl.col("error").is_null())
    start = float(req["started_at"].min())  # type: ignore[arg-type]
    end = float((req["started_at"] + req["e2e_s"]).max())  # type: ignore[arg-type]
    cells = pl.read_parquet(root / "cells.parquet").row(0, named=True)
    note = (
        f"cell throughput {cells['throughput_tok_s'] or 0:.0f} tok/s by the server's count, "
        f"loop lag p99 {cells['client_lag_p99_s'] * 1e3:.1f} ms, "
        f"lagged={cells['client_lagged']}, CPU share {cells['client_cpu_share']:.0%}"
    )
    tool = Figures(
        "specbench-tui (whole tool)",
        int(req["chunks"].sum()),
        end - start,
        tool_cpu.between(start, end),
        note,
    )
    console = None
    if console_pids:
        console = Figures(
            "  attached console", tool.tokens, end - start, console_cpu.between(start, end)
        )
    return tool, console


async def bare_client(url: str, prompts: list[str], level: int, requests: int) -> Figures:
    queue = [prompts[i % len(prompts)] for i in range(requests)]
    tokens = 0
    async with BenchClient(url, "openai", prompting=CHAT, concurrency=level) as client:
        await client.generate(prompts[0], max_tokens=TOKENS)
        t0, c0 = time.time(), time.process_time()

        async def worker() -> None:
            nonlocal tokens
            while queue:
                done = await client.generate(queue.pop(), max_tokens=TOKENS)
                tokens += done.chunks

        await asyncio.gather(*(worker() for _ in range(level)))
        t1, c1 = time.time(), time.process_time()
    return Figures("specbench-tui client alone", tokens, t1 - t0, c1 - c0)


def show(f: Figures, ref: Figures | None) -> str:
    ratio = ""
    if ref is not None and f is not ref:
        ratio = (
            f"  {f.tok_s / ref.tok_s:5.2f}x tok/s, "
            f"{f.cpu_us_per_token / ref.cpu_us_per_token:5.2f}x CPU/token"
        )
    return (
        f"  {f.client:<28} {f.tok_s:>9,.0f} tok/s {f.cpu_us_per_token:>7.1f} us CPU/token"
        f"{ratio}{('  [' + f.note + ']') if f.note else ''}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    rig.add_tool_args(ap)
    ap.add_argument("--levels", default="64,256")
    ap.add_argument("--requests", type=int, default=1024, help="per client, level and repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-bare", action="store_true", help="skip the client-alone reference")
    args = ap.parse_args()
    rig.check_tools(args)
    levels = [int(x) for x in args.levels.split(",")]
    print(
        f"client capacity: AIPerf mock server with no delay, {TOKENS}-token prompts and outputs,"
        f" {args.requests} requests per client and level, {args.repeats} repeat(s)"
    )
    ratios: dict[int, list[tuple[float, float]]] = {lv: [] for lv in levels}
    with tempfile.TemporaryDirectory(prefix="capacity-") as tmp:
        work = Path(tmp)
        prompts = rig.token_prompts(args.tokenizer, TOKENS, 64, args.mock_python)
        for n in range(args.repeats):
            for level in levels:
                print(f"\n{level} streams, repeat {n + 1} ({rig.load()})")
                with rig.mock_server(args.mock_python, args.tokenizer, 0.001, 0.001, work) as (
                    url,
                    _,
                ):
                    a = rig.run_aiperf(
                        args.aiperf,
                        url,
                        args.tokenizer,
                        concurrency=level,
                        requests=args.requests,
                        isl=TOKENS,
                        osl=TOKENS,
                        artifacts=work / f"aiperf-c{level}-r{n}",
                        warmup=level,
                    )
                    theirs = Figures("AIPerf", a.tokens, a.window[1] - a.window[0], a.cpu_s)
                    if a.reported_tok_s:
                        theirs.note = f"AIPerf reports {a.reported_tok_s:,.0f} tok/s"
                    bare = None
                    if not args.no_bare:
                        bare = asyncio.run(bare_client(url, prompts, level, args.requests))
                tool, console = run_tool(args, work, level, prompts, n)
                print(show(theirs, None))
                print(show(tool, theirs))
                if console is not None:
                    print(
                        f"  {'attached console':<28} {'':>15} "
                        f"{console.cpu_us_per_token:>7.1f} us CPU/token (its own process)"
                    )
                if bare is not None:
                    print(show(bare, theirs))
                ratios[level].append(
                    (tool.tok_s / theirs.tok_s, tool.cpu_us_per_token / theirs.cpu_us_per_token)
                )
    print(f"\ntargets, whole tool against AIPerf, min / median over repeats ({rig.load()}):")
    for level, rs in ratios.items():
        tok = [r[0] for r in rs]
        cpu = [r[1] for r in rs]
        met_tok = statistics.median(tok) >= TARGET_TOK_S_RATIO
        met_cpu = statistics.median(cpu) <= TARGET_CPU_RATIO
        print(
            f"  {level} streams: output tok/s >= 1.5x AIPerf: {'met' if met_tok else 'NOT MET'} "
            f"({min(tok):.2f}x / {statistics.median(tok):.2f}x); CPU per token <= 0.5x AIPerf: "
            f"{'met' if met_cpu else 'NOT MET'} (max {max(cpu):.2f}x / median "
            f"{statistics.median(cpu):.2f}x)"
        )


if __name__ == "__main__":
    main()

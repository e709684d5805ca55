"""The GPU conditions a cell records (bench/conditions.py), read on a real NVIDIA GPU by the
agent that a campaign pipes to its hosts (hosts/gpu_agent.py, NVML): SM and memory clocks,
enforced power limit and clocks-event (throttle) reasons, idle and under a load this script
starts (a PyTorch matrix-product loop) in several runs, and what nvidia-smi says of the same
(``clocks_event_reasons.active``) beside it, and the agent's lines through nvidia-smi
(``--source nvidia-smi``: the conditions query of hosts without pynvml).

It prints, per state and run, the median SM and memory clocks, the power limit, the throttle
reasons seen (named as the report names them) and how far the median SM clock of the load runs
spread (the noise the comparability audit's ``CLOCK_GAP`` must stay above). With ``--out DIR``
it writes the agent's lines of every state (``STATE.jsonl``, ``STATE.smi.jsonl``) and the
exact bytes nvidia-smi printed for the agent's conditions queries (``STATE.query-conditions.csv``
for the current field names, ``STATE.query-conditions-old.txt`` for the pre-535 ones, with
the exit status): what tests/support/nvidia-smi replays.

Needs the NVIDIA driver, nvidia-smi, torch and pynvml (nvidia-ml-py) in this python; nothing
else of this package (the agent is standard library only). From the repository root:

    python3 bench/gpu_conditions_check.py [--gpu 0] [--runs 3] [--load-s 8] [--out DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
AGENT = HERE / "specbench_tui" / "hosts" / "gpu_agent.py"
# The report's names of the slowing reasons (bench/conditions.py THROTTLE_BITS), by bit.
SLOWING = {
    0x4: "power cap",
    0x8: "hardware slowdown",
    0x20: "thermal (software)",
    0x40: "thermal (hardware)",
    0x80: "power brake",
}
SMI = "index,clocks.current.sm,clocks.current.memory,power.limit,clocks_event_reasons.active"

LOAD = """
import sys, time, torch
gpu, seconds = int(sys.argv[1]), float(sys.argv[2])
a = torch.randn(8192, 8192, device=f"cuda:{gpu}", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device=f"cuda:{gpu}", dtype=torch.bfloat16)
print("ready", flush=True)
end = time.time() + seconds
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
"""


def _agent_constants() -> dict[str, Any]:
    """The agent's own query lists (it is standard library only: loaded from its file)."""
    spec = importlib.util.spec_from_file_location("gpu_agent", AGENT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {"conditions": module.QUERY_CONDITIONS}


def raw(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["nvidia-smi", *args], capture_output=True, timeout=30)


def agent(gpu: int, seconds: float, interval: float, source: str = "nvml") -> list[dict[str, Any]]:
    count = max(1, int(seconds / interval))
    out = subprocess.run(
        [
            sys.executable,
            str(AGENT),
            "--source",
            source,
            "--gpus",
            str(gpu),
            "--interval",
            str(interval),
            "--count",
            str(count),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 60,
    ).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def smi(gpu: int) -> str:
    res = subprocess.run(
        ["nvidia-smi", f"--query-gpu={SMI}", "--format=csv", "-i", str(gpu)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return res.stdout.strip() or res.stderr.strip()


def summary(lines: list[dict[str, Any]]) -> dict[str, Any]:
    def vals(key: str) -> list[float]:
        return [float(x[key]) for x in lines if x.get(key) is not None]

    mask = 0
    for x in lines:
        mask |= int(x.get("throttle_reasons") or 0)
    return {
        "samples": len(lines),
        "sm_clock_mhz": statistics.median(vals("sm_clock_mhz")) if vals("sm_clock_mhz") else None,
        "mem_clock_mhz": statistics.median(vals("mem_clock_mhz"))
        if vals("mem_clock_mhz")
        else None,
        "power_limit_w": min(vals("power_limit_w")) if vals("power_limit_w") else None,
        "power_w_median": statistics.median(vals("power_w")) if vals("power_w") else None,
        "temp_max_c": max(vals("temp_c")) if vals("temp_c") else None,
        "reasons_mask": hex(mask),
        "slowing": [name for bit, name in SLOWING.items() if mask & bit],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--load-s", type=float, default=8.0)
    ap.add_argument("--interval", type=float, default=0.25)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}

    queries = _agent_constants()["conditions"]

    def record(state: str, lines: list[dict[str, Any]], said: str) -> None:
        # Read while the state holds (the load still runs): nvidia-smi's own answers first.
        new, old = raw(queries[0]), raw(queries[1])
        by_smi = agent(args.gpu, 1.0, 0.5, "nvidia-smi")
        results[state] = {
            **summary(lines),
            "nvidia_smi": said,
            "agent_via_nvidia_smi": summary(by_smi),
        }
        print(f"{state:8} {json.dumps(results[state])}", flush=True)
        if args.out:
            with (args.out / f"{state}.jsonl").open("w") as f:
                f.writelines(json.dumps(x) + "\n" for x in lines)
            with (args.out / f"{state}.smi.jsonl").open("w") as f:
                f.writelines(json.dumps(x) + "\n" for x in by_smi)
            (args.out / f"{state}.query-conditions.csv").write_bytes(new.stdout)
            (args.out / f"{state}.query-conditions-old.txt").write_bytes(
                f"exit {old.returncode}\n".encode() + old.stdout + old.stderr
            )

    record("idle", agent(args.gpu, 2.0, args.interval), smi(args.gpu))
    for run in range(1, args.runs + 1):
        load = subprocess.Popen(
            [sys.executable, "-c", LOAD, str(args.gpu), str(args.load_s + 10)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert load.stdout is not None
        load.stdout.readline()  # its tensors are on the GPU
        time.sleep(2.0)  # past the clocks' ramp
        lines = agent(args.gpu, args.load_s, args.interval)
        record(f"load{run}", lines, smi(args.gpu))  # while the load still runs
        load.wait(timeout=60)
        time.sleep(3.0)
    record("after", agent(args.gpu, 2.0, args.interval), smi(args.gpu))
    clocks = [results[f"load{r}"]["sm_clock_mhz"] for r in range(1, args.runs + 1)]
    clocks = [c for c in clocks if c]
    if clocks:
        spread = (max(clocks) - min(clocks)) / statistics.median(clocks)
        results["load_sm_clock_spread"] = spread
        print(f"median SM clock of the load runs: {clocks} MHz, spread {spread:.2%}")
    if args.out:
        (args.out / "figures.json").write_text(json.dumps(results, indent=1))
    ok = all(
        results[s]["sm_clock_mhz"] and results[s]["power_limit_w"]
        for s in results
        if isinstance(results[s], dict)
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

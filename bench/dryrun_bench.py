"""Dry-run of a 10,000-cell plan: how long plan review takes (target: under 2 s).

Run: python bench/dryrun_bench.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLAN = """\
[campaign]
name = "big"
baseline = "ar"

[hosts.gpu]
ssh = "root@gpu-host"
gpus = 8

[server]
model = "/dev/shm/model"

[configs.ar]

[configs.tree]
params = {{ budget = [{budgets}] }}
args = ["--speculative-algorithm", "DDTREE", "--speculative-ddtree-budget", "{{budget}}"]

[matrix]
configs = ["ar", "tree"]
tp = [1, 2, 4, 8]

[workloads.single]
kind = "single"
prompts = ["code", "math", "chat", "summarize", "translate"]
max_tokens = [{max_tokens}]
samples = 2
"""


def main() -> None:
    budgets = ", ".join(str(8 * i) for i in range(1, 20))  # 19 + ar = 20 configs
    max_tokens = ", ".join(str(64 * i) for i in range(1, 26))  # 25 x 5 sets = 125 cells/group
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "big.toml"
        path.write_text(PLAN.format(budgets=budgets, max_tokens=max_tokens))
        for extra in ([], ["--json"]):
            best = float("inf")
            for _ in range(3):
                t0 = time.perf_counter()
                proc = subprocess.run(
                    [sys.executable, "-m", "specbench_tui", str(path), "--dry-run", *extra],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                best = min(best, time.perf_counter() - t0)
            tail = proc.stdout.strip().splitlines()
            cells = next((ln for ln in tail if "cells" in ln and "service groups" in ln), "")
            print(
                f"dry-run {' '.join(extra) or '(text)':8} best of 3: {best:.2f} s  "
                f"{cells or str(len(proc.stdout)) + ' bytes of JSON'}"
            )


if __name__ == "__main__":
    main()

"""Dry-run of a 10,000-cell plan: how long plan review takes (target: under 2 s); and of a
54,001-group plan (one config with 270 x 200 params), where the JSON must cost at most twice
the text (its per-group cell count once made it quadratic).

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


WIDE = PLAN.replace(
    "params = {{ budget = [{budgets}] }}", "params = {{ budget = [{budgets}], b = [{more}] }}"
).replace("tp = [1, 2, 4, 8]", "tp = [1]")


def _time(path: Path, extra: list[str], runs: int) -> tuple[float, str]:
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "specbench_tui", str(path), "--dry-run", *extra],
            capture_output=True,
            text=True,
            check=True,
        )
        best = min(best, time.perf_counter() - t0)
    return best, proc.stdout


def wide() -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "wide.toml"
        path.write_text(
            WIDE.format(
                budgets=", ".join(map(str, range(270))),
                more=", ".join(map(str, range(200))),
                max_tokens="64",
            ).replace('"code", "math", "chat", "summarize", "translate"', '"code"')
        )
        text_s, out = _time(path, [], 1)
        json_s, _ = _time(path, ["--json"], 1)
        counts = next((ln for ln in out.splitlines() if "service groups," in ln), "")
        print(f"wide plan: {counts}")
        print(f"dry-run (text) {text_s:.1f} s, --json {json_s:.1f} s: {json_s / text_s:.2f}x")


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
    wide()

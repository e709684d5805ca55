"""The ETA's range and the dry-run estimate against the truth, over three rehearsals on the
simulated host (issue 42): the demo, a packed two-host plan (the demo with ``pack = true`` on
two hosts) and a plan with a failing group (the demo with DFlash's server crashing at start,
``--sim-fault crash-at-start``).

Each plan runs twice, headless with ``--sim``: first with the estimate's assumed constants (a
fresh results root, no earlier results), then in a second root with ``--estimate-from`` the
first run's directory. For each run it prints:
- the dry-run estimate (``--dry-run --json``, with the same results and constants) against the
  wall time the run took (its ``campaign_finished``), and the error (target: within 25 % once
  the constants are measured);
- the ETA coverage: of the done lines after the first 10 % of cells, the share whose range
  contains the real finish (target: at least 80 %); the ETA is read from the lines as printed
  (whole seconds, so a range holds the finish within half a second of its ends), the time of
  each line and of the finish from the event log, exact;
- the range's median half-width, and its jumps: readings whose predicted finish windows do
  not overlap the previous reading's, and how many of those follow a failure or a rerun
  printed between them (a reason the range can name).

    python bench/eta_coverage.py [--results DIR] [--only demo,packed,failing] [--busy N]

``--busy N`` keeps N CPU burners running through all the runs (two busy cores: ``--busy 2``).

Prints figures, asserts nothing; says the machine's load before and after each run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specbench_tui.results.events import CampaignFinished, CellFinished  # noqa: E402
from specbench_tui.results.files import read_events  # noqa: E402

DONE = re.compile(
    r" done +\S+ \[(?P<id>\w+)\].* ETA (?P<eta>[\d:]+)(?: \((?P<lo>[\d:]+)[-–](?P<hi>[\d:]+)\))?$"
)
REASON = re.compile(r" (FAILED|queued) ")


def _demo() -> str:
    return (ROOT / "plans" / "demo.toml").read_text()


def _packed() -> str:
    text = re.sub(r"(?m)^(name\s*=.*)$", r"\1\npack = true", _demo(), count=1)
    host = re.search(r"(?ms)^\[hosts\.sim\]\n.*?\n\n", text)
    assert host is not None, "plans/demo.toml changed: update the packed variant"
    second = host[0].replace("[hosts.sim]", "[hosts.sim2]")
    return text.replace(host[0], host[0] + second, 1)


def _failing() -> str:
    text = _demo()
    args = '"--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "16"'
    assert args in text, "plans/demo.toml changed: update the failing variant"
    return text.replace(args, args + ', "--sim-fault", "crash-at-start"', 1)


PLANS = {"demo": _demo, "packed": _packed, "failing": _failing}


def _clock(text: str) -> float:
    s = 0.0
    for part in text.split(":"):
        s = s * 60 + int(part)
    return s


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f} on {os.cpu_count()} cores"


def _cli(plan: Path, results: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "specbench_tui", str(plan), "--sim", "--results", str(results)]
    return subprocess.run([*cmd, *extra], capture_output=True, text=True, cwd=ROOT)


@dataclass
class Reading:
    ts: float
    eta: float
    low: float
    high: float
    after: str  # the lines printed since the previous reading


def _readings(out: str, events_ts: dict[str, float]) -> list[Reading]:
    got: list[Reading] = []
    since: list[str] = []
    for line in out.splitlines():
        m = DONE.search(line)
        if m is None or m["id"] not in events_ts:
            since.append(line)
            continue
        eta = _clock(m["eta"])
        lo, hi = (_clock(m["lo"]), _clock(m["hi"])) if m["lo"] else (eta, eta)
        got.append(Reading(events_ts[m["id"]], eta, lo, hi, "\n".join(since)))
        since = []
    return got


def _report(name: str, run: Path, proc: subprocess.CompletedProcess[str], est_s: float) -> None:
    [root] = [p for p in run.iterdir() if (p / "events.jsonl").is_file()]
    events = read_events(root / "events.jsonl")
    ends = [e for e in events if isinstance(e, CampaignFinished)]
    if not ends:
        print(f"  {name}: no campaign_finished (exit {proc.returncode}): {proc.stderr[-300:]}")
        return
    finish, wall = ends[-1].ts, ends[-1].wall_s
    done_ts = {e.cell_id: e.ts for e in events if isinstance(e, CellFinished)}
    cells = int(m[1]) if (m := re.search(r" (\d+) cells,", proc.stdout)) else len(done_ts)
    readings = _readings(proc.stdout, done_ts)
    later = readings[cells // 10 :]
    hit = sum(1 for r in later if r.low - 0.5 <= finish - r.ts <= r.high + 0.5)
    widths = sorted((r.high - r.low) / 2 / r.eta for r in later if r.eta > 0)
    jumps = named = 0
    for a, b in itertools.pairwise(readings):
        if a.ts + a.high + 0.5 < b.ts + b.low or b.ts + b.high + 0.5 < a.ts + a.low:
            jumps += 1
            named += bool(REASON.search(b.after))
    err = est_s / wall - 1 if wall else float("nan")
    share = f"{hit / len(later):.0%}" if later else "-"
    print(
        f"  {name}: wall {wall:.1f} s, dry run {est_s:.1f} s ({err:+.0%}); "
        f"ETA coverage {hit}/{len(later)} ({share}) after the first {cells // 10} of {cells} "
        f"cells; median half-width {widths[len(widths) // 2] if widths else 0:.0%}; "
        f"jumps {jumps} ({named} after a failure or rerun); exit {proc.returncode}"
    )


def _run(name: str, plan: Path, results: Path, source: Path | None) -> Path:
    extra = ["--estimate-from", str(source)] if source is not None else []
    dry = _cli(plan, results, "--dry-run", "--json", *extra)
    if dry.returncode != 0:
        raise SystemExit(f"{name}: dry run failed: {dry.stderr[-500:]}")
    est_s = float(json.loads(dry.stdout)["estimate_s"])
    before = _load()
    proc = _cli(plan, results, "--headless", *extra)
    print(f"  ({before} before, {_load()} after)")
    _report(name, results, proc, est_s)
    return next(p for p in results.iterdir() if (p / "events.jsonl").is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, help="where the runs go (default: a temporary dir)")
    ap.add_argument("--only", default=",".join(PLANS), help="comma-separated: " + ", ".join(PLANS))
    ap.add_argument("--busy", type=int, default=0, help="CPU burners running meanwhile")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # each line as it comes
    base = args.results or Path(tempfile.mkdtemp(prefix="eta-coverage-"))
    burn = [sys.executable, "-c", "while True: pass"]
    burners = [subprocess.Popen(burn) for _ in range(args.busy)]
    try:
        for name in args.only.split(","):
            where = base / name
            shutil.rmtree(where, ignore_errors=True)
            where.mkdir(parents=True)
            plan = where / f"{name}.toml"
            plan.write_text(PLANS[name]())
            print(f"{name} ({plan}){f', {args.busy} CPU burners' if burners else ''}:")
            first = _run("assumed constants", plan, where / "first", None)
            _run(f"measured from {first}", plan, where / "second", first)
    finally:
        for b in burners:
            b.kill()
            b.wait()
        if args.results is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

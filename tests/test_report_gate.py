"""The regression gate, ``--report OLD NEW --fail-on-regression PCT [--json]``: exit 1 where
NEW's speed-up, accept length or decode tok/s is below OLD's beyond noise (``--report A B``'s
test) and by more than PCT percent, exit 0 otherwise; rows in one campaign only are listed,
rows the comparability audit marks not comparable are not gated, and bad usage is exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from support.results_builder import ResultsBuilder

from specbench_tui.report.gate import gate_dirs

PLAN_TOML = '[campaign]\nname = "syn"\nbaseline = "ar"\n'

# Three runs a config (a fresh server each), three repeats a run: the runs 1% apart.
OLD = {
    "ar": [[100.0, 100.1, 99.9], [101.0, 101.1, 100.9], [99.0, 99.1, 98.9]],
    "dflash": [[300.0, 300.2, 299.8], [303.0, 303.2, 302.8], [297.0, 297.2, 296.8]],
}
ACCEPT = {"dflash": 3.0}


def _scaled(per_run: dict[str, list[list[float]]], config: str, by: float) -> dict[str, Any]:
    return {
        c: [[v * (by if c == config else 1) for v in r] for r in runs]
        for c, runs in per_run.items()
    }


def _campaign(
    root: Path,
    per_run: dict[str, list[list[float]]],
    *,
    runs: int = 3,
    accept: dict[str, float] = ACCEPT,
) -> Path:
    """Single-stream cells: ``per_run[config][run]`` is the decode rate of each repeat of that
    run (65 tokens, TTFT 50 ms); a speculative config's requests carry ``accept[config]``."""
    b = ResultsBuilder(root)
    for cfg, run_rates in per_run.items():
        acc = accept.get(cfg)
        for r, rates in enumerate(run_rates[:runs], start=1):
            cid = f"{cfg}-r{r}"
            b.cell(cid, cfg, 1, "single", "single", repeats=len(rates), run=r)
            b.finished(
                cid,
                [
                    dict(
                        prompt_id="p",
                        repeat=k,
                        ttft_s=0.05,
                        e2e_s=0.05 + 64 / v,
                        output_tokens=65,
                        accept_length=acc,
                        spec_verify_ct=round(65 / acc) if acc else None,
                    )
                    for k, v in enumerate(rates)
                ],
            )
    return b.write(plan=PLAN_TOML)


def _cli(*args: object) -> subprocess.CompletedProcess[str]:
    """``python -m specbench_tui ...`` as a CI step runs it (no TeX on PATH: no PDF to wait for)."""
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    return subprocess.run(
        [sys.executable, "-m", "specbench_tui", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )


def test_a_planted_regression_fails_the_gate_and_names_the_config(tmp_path: Path) -> None:
    old = _campaign(tmp_path / "old", OLD)
    new = _campaign(tmp_path / "new", _scaled(OLD, "dflash", 0.8))
    got = _cli("--report", old, new, "--fail-on-regression", 5)
    assert got.returncode == 1, got.stderr
    lines = got.stdout.splitlines()
    assert str(old / "comparison.md") in lines  # the comparison is rendered as with --report A B
    (decode,) = [x for x in lines if x.startswith("regressed:") and "decode tok/s" in x]
    assert "dflash on sim, TP 1, single" in decode and "(-20.0%)" in decode
    assert "beyond noise between runs" in decode
    (speedup,) = [x for x in lines if x.startswith("regressed:") and "speed-up" in x]
    assert "3.00x -> 2.40x" in speedup
    assert not any("accept length" in x for x in lines if x.startswith("regressed:"))
    assert lines[-1].startswith("REGRESSION: 2 figures lower beyond noise and by more than 5%")


def test_a_campaign_against_itself_or_its_rerun_passes(tmp_path: Path) -> None:
    old = _campaign(tmp_path / "old", OLD)
    same = _cli("--report", old, old, "--fail-on-regression", 0)
    assert same.returncode == 0, same.stdout + same.stderr
    assert same.stdout.splitlines()[-1] == (
        "no regression beyond noise and 0% (4 figures of 2 rows compared)"
    )
    # A rerun: the runs come in another order, each 0.5% slower: within run-to-run noise.
    rerun = {c: [[v * 0.995 for v in r] for r in runs[::-1]] for c, runs in OLD.items()}
    verdict = gate_dirs(old, _campaign(tmp_path / "rerun", rerun), 0)
    assert not verdict.regressed
    assert {r.test for r in verdict.rows if r.figure == "decode tok/s"} == {"within noise"}
    assert verdict.lines()[-1].startswith("no regression beyond noise and 0%")


def test_a_regression_smaller_than_pct_passes(tmp_path: Path) -> None:
    old = _campaign(tmp_path / "old", OLD)
    new = _campaign(tmp_path / "new", _scaled(OLD, "dflash", 0.8))
    assert gate_dirs(old, new, 19.9).regressed
    verdict = gate_dirs(old, new, 25)
    assert not verdict.regressed
    assert verdict.lines()[-1].startswith("no regression beyond noise and 25%")
    decode = next(r for r in verdict.rows if r.figure == "decode tok/s" and r.config == "dflash")
    assert decode.beyond_noise and decode.verdict == "ok"


def test_one_run_a_side_still_gates_and_says_within_run_noise_only(tmp_path: Path) -> None:
    old = _campaign(tmp_path / "old", OLD, runs=1)
    verdict = gate_dirs(old, _campaign(tmp_path / "new", _scaled(OLD, "dflash", 0.8), runs=1), 5)
    assert verdict.regressed
    text = "\n".join(verdict.lines())
    assert "decode tok/s 300.0 -> 240.0 (-20.0%), beyond noise (within-run noise only)" in text


def test_a_row_in_one_campaign_only_is_listed_not_failed(tmp_path: Path) -> None:
    old = _campaign(tmp_path / "old", OLD)
    new = _campaign(
        tmp_path / "new", {"ar": OLD["ar"], "eagle": OLD["dflash"]}, accept={"eagle": 3.0}
    )
    verdict = gate_dirs(old, new, 5)
    assert not verdict.regressed
    assert [r["config"] for r in verdict.only_old] == ["dflash"]
    assert [r["config"] for r in verdict.only_new] == ["eagle"]
    lines = verdict.lines()
    assert "not gated: only in OLD: dflash on sim, TP 1, single" in lines
    assert "not gated: only in NEW: eagle on sim, TP 1, single" in lines
    assert lines[-1] == "no regression beyond noise and 5% (1 figure of 1 row compared)"


def test_a_row_not_comparable_is_not_gated(tmp_path: Path) -> None:
    """NEW's dflash is 20% slower, but its speed-up (2.4x) is above its accept length (1.2):
    the audit calls it implausible, so it is no evidence either way."""
    old = _campaign(tmp_path / "old", OLD)
    new = _campaign(tmp_path / "new", _scaled(OLD, "dflash", 0.8), accept={"dflash": 1.2})
    verdict = gate_dirs(old, new, 5)
    assert not verdict.regressed
    rows = [r for r in verdict.rows if r.config == "dflash"]
    assert {r.verdict for r in rows} == {"not comparable"}
    (line,) = [x for x in verdict.lines() if x.startswith("not gated: not comparable")]
    assert "NEW: decode speed-up 2.40x above the accept length" in line
    assert line.endswith(": dflash on sim, TP 1, single")
    assert verdict.to_json()["compared"] == 1  # ar's decode tok/s


def test_json_is_the_same_verdict(tmp_path: Path) -> None:
    old = _campaign(tmp_path / "old", OLD)
    new = _campaign(tmp_path / "new", _scaled(OLD, "dflash", 0.8))
    got = _cli("--report", old, new, "--fail-on-regression", 5, "--json")
    assert got.returncode == 1
    doc = json.loads(got.stdout)  # stdout is the object alone; the files' paths went to stderr
    assert str(old / "comparison.md") in got.stderr
    assert doc["regressed"] is True and doc["threshold_pct"] == 5
    assert doc["only_old"] == doc["only_new"] == []
    bad = {(r["config"], r["figure"]) for r in doc["rows"] if r["verdict"] == "regressed"}
    said = {
        (x.split(": ")[1].split(" on ")[0], x.split(", single: ")[1].split(" ")[0])
        for x in gate_dirs(old, new, 5).lines()
        if x.startswith("regressed:")
    }
    assert bad == {("dflash", "decode tok/s"), ("dflash", "speed-up")}
    assert {(c, f.split(" ")[0]) for c, f in bad} == said
    decode = next(
        r for r in doc["rows"] if (r["config"], r["figure"]) == ("dflash", "decode tok/s")
    )
    assert decode["change_pct"] == pytest.approx(-20.0, abs=0.01)
    assert decode["beyond_noise"] is True and decode["noise"] == "between-run"
    assert set(decode) == {
        "config", "host", "tp", "kind", "workload", "level", "figure", "old", "new",
        "change_pct", "beyond_noise", "noise", "test", "verdict", "why",
    }  # fmt: skip
    assert len(doc["rows"]) == doc["compared"] == 4
    ok = gate_dirs(old, old, 5).to_json()
    assert ok["regressed"] is False and {r["verdict"] for r in ok["rows"]} == {"ok"}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--report", "{a}", "--fail-on-regression", "5"], "goes with --report OLD NEW"),
        (["--report", "{a}", "{a}", "{a}", "--fail-on-regression", "5"], "OLD NEW"),
        (["--fail-on-regression", "5"], "goes with --report OLD NEW"),
        (["--report", "{a}", "{a}", "--fail-on-regression", "-1"], "0 or more"),
        (["--report", "{a}", "{a}", "--json"], "--json goes with --dry-run or"),
    ],
    ids=["one-dir", "three-dirs", "no-report", "negative", "json-alone"],
)
def test_bad_usage_is_one_line_and_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    got = _cli(*(a.format(a=tmp_path) for a in args))
    assert got.returncode == 2
    assert got.stdout == ""
    assert got.stderr.count("\n") == 1 and says in got.stderr

"""A whole campaign against a server that bursts 4 tokens per SSE event and records what it
sent and when (the simulator with ``--sim-burst 4 --sim-record FILE``, a real HTTP server
process per group): the cells' figures are held to the server's own record.

- a cell's ``decode_tok_s_total`` is its rows' token-weighted rate, sum(n - 1) / sum(decode
  window), and the headless line says it;
- a concurrency cell's throughput is its tokens over the request span the server saw (first
  request in, last chunk out) within 1%: the garbage collection after the cell, row building
  and writes are outside the measured window;
- ITL per token divides each 4-token event's gap by its 4 tokens;
- the server's own log lines, exact over their stretches, raise no disagreement.
"""

from __future__ import annotations

import itertools
import json
import statistics
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import ROOT, free_port

pytestmark = pytest.mark.system

PLAN = """\
[campaign]
name = "burst"
baseline = "ar"

[hosts.sim]
sim = true
gpus = 2
speed = 4

[server]
port = {port}

[configs.ar]
args = ["--sim-burst", "4", "--sim-record", "{ar}"]

[configs.dflash]
args = ["--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "8",
        "--sim-record", "{dflash}"]

[matrix]
configs = ["ar", "dflash"]
tp = [1]

[workloads.single]
kind = "single"
prompts = ["chat"]
samples = 2
repeats = 2
max_tokens = [48]

[workloads.load]
kind = "concurrency"
levels = [4]
requests = 8
prompts = ["chat"]
max_tokens = 48
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, Path]]:
    tmp = tmp_path_factory.mktemp("burst")
    records = {c: tmp / f"{c}.jsonl" for c in ("ar", "dflash")}
    plan = tmp / "plan.toml"
    plan.write_text(PLAN.format(port=free_port(), ar=records["ar"], dflash=records["dflash"]))
    proc = subprocess.run(
        [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results",
         str(tmp / "res")],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return tmp / "res" / "burst", proc.stdout, records


def cells_and_rows(root: Path) -> tuple[list[dict], pl.DataFrame]:
    cells = pl.read_parquet(root / "cells.parquet").filter(pl.col("status") == "done")
    return cells.to_dicts(), pl.read_parquet(root / "requests.parquet")


def test_the_server_bursts_and_a_cells_decode_rate_is_token_weighted(run) -> None:
    root, stdout, _ = run
    cells, rows = cells_and_rows(root)
    assert len(cells) == 4
    ar = rows.filter(pl.col("config") == "ar")
    per_chunk = [k for ks in ar["chunk_tokens"].to_list() for k in ks[1:-1]]
    assert per_chunk and set(per_chunk) == {4}  # every event in the middle carried 4 tokens
    for c in cells:
        mine = rows.filter(pl.col("cell_id") == c["cell_id"]).to_dicts()
        counted = [r for r in mine if r["decode_s"]]
        want = sum(r["output_tokens"] - 1 for r in counted) / sum(r["decode_s"] for r in counted)
        assert c["decode_tok_s_total"] == pytest.approx(want, rel=1e-9), c["name"]
        assert c["decode_requests"] + c["decode_zero_window"] + c["decode_one_token"] == len(
            [r for r in mine if r["error"] is None]
        )
        line = next(
            ln for ln in stdout.splitlines() if f"[{c['cell_id']}]" in ln and " done " in ln
        )
        assert f"decode {c['decode_tok_s_total']:.1f} tok/s" in line, line


def test_concurrency_throughput_is_tokens_over_the_request_span(run) -> None:
    root, _, records = run
    cells, rows = cells_and_rows(root)
    for cfg in ("ar", "dflash"):
        (c,) = [x for x in cells if x["config"] == cfg and x["kind"] == "concurrency"]
        mine = rows.filter(pl.col("cell_id") == c["cell_id"])
        first = mine["started_at"].min()
        last = (mine["started_at"] + mine["e2e_s"]).max()
        sent = [json.loads(x) for x in records[cfg].read_text().splitlines()]
        # The cell's requests as the server saw them (its warm-up came before the first).
        seen = [r for r in sent if first - 0.005 <= r["received_unix"] <= last]
        assert len(seen) == 8, (len(seen), cfg)
        span = max(r["received_perf"] + r["last_chunk_s"] for r in seen) - min(
            r["received_perf"] for r in seen
        )
        tokens = sum(r["completion_tokens"] for r in seen)
        assert tokens == mine["output_tokens"].sum()
        # The client's window also holds the first request's way there and the last byte's
        # way back, which reached 1% at load 10 on two cores; the figures this definition
        # excludes (per-request rates summed or averaged, the cell's wall) are far further off.
        assert c["throughput_tok_s"] == pytest.approx(tokens / span, rel=0.03), cfg
        assert c["throughput_tok_s"] <= tokens / span * 1.0001  # never shorter than the server's


def test_itl_per_token_divides_each_events_gap_by_its_tokens(run) -> None:
    root, _, records = run
    cells, _ = cells_and_rows(root)
    (c,) = [x for x in cells if x["config"] == "ar" and x["kind"] == "concurrency"]
    sent = [json.loads(x) for x in records["ar"].read_text().splitlines()]
    gaps = [b - a for r in sent for a, b in itertools.pairwise(r["chunk_offsets_s"])]
    event_gap = statistics.median(gaps)
    assert c["chunk_gap_s_p50"] == pytest.approx(event_gap, rel=0.3)
    assert c["itl_token_s_p50"] == pytest.approx(event_gap / 4, rel=0.3)


def test_an_exact_servers_log_raises_no_disagreement(run) -> None:
    root, _, _ = run
    md = (root / "report.md").read_text()
    start = md.index("## Server view beside the client view")
    sec = md[start : md.index("\n## ", start + 1)]
    assert "No disagreement beyond tolerance." in sec, sec
    assert "disagree" not in sec.replace("No disagreement", "")
    logged = [ln for ln in sec.splitlines() if ln.startswith("| ") and "(" in ln.split("|")[3]]
    assert any("(0)" not in ln.split("|")[3] for ln in logged), sec  # some cells had lines

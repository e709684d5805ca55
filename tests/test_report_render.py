"""The report from a synthetic results directory whose every figure is known: the comparison
frame the console shares, intervals over repeats, best marked only where it is told apart,
failed checks, hosts apart, the server view, telemetry busy apart from idle, every planned cell
accounted for; Markdown and LaTeX with the same tables; the PDF built with the real TeX.

Decode tok/s per request is (output tokens - 1) / (e2e - TTFT); the rows set e2e so that each
repeat's requests decode at exactly the rate in ``RATES``.
"""

from __future__ import annotations

import re
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import need_program
from support.report_pdf import check_pdf
from support.results_builder import ResultsBuilder

from specbench_tui.errors import InputError
from specbench_tui.report import render
from specbench_tui.report.build import build_report
from specbench_tui.report.frames import (
    ACCEPT_COLUMNS,
    COMPARISON_COLUMNS,
    accept_frame,
    comparison,
    requests,
)
from specbench_tui.report.inputs import load_inputs
from specbench_tui.report.render import md_escape, render_report, tex_escape
from specbench_tui.report.sections.server_view import view_frame

NASTY_LABEL = r"DFlash_{x} & 50% #1 $~^\ok"
TTFT = 0.05
TOKENS = 65

PLAN = f"""\
[campaign]
name = "syn"
title = "Synthetic campaign"
baseline = "ar"

[hosts.sim]
sim = true
gpus = 8

[hosts.h2]
sim = true
gpus = 8

[configs.ar]
label = "Autoregressive"

[configs.dflash]
label = '''{NASTY_LABEL}'''

[configs.eagle]
label = "EAGLE-3"

[matrix]
configs = ["ar", "dflash", "eagle"]
tp = [1, 4]

[workloads.single]
kind = "single"
prompts = ["chat"]
max_tokens = [64]
repeats = 3

[workloads.agentic]
kind = "agentic"
turns = 3

[workloads.concurrency]
kind = "concurrency"
levels = [1, 4]
requests = 4

[checks]
greedy_equivalence = true
"""

# Decode tok/s of each repeat (both prompts of a repeat decode at the same rate).
RATES = {
    ("sim", "ar", 1): [100.0, 102.0, 98.0],
    ("sim", "dflash", 1): [200.0, 204.0, 196.0],  # best at TP 1: eagle is faster but lossy
    ("sim", "eagle", 1): [250.0, 255.0, 245.0],
    ("sim", "ar", 4): [200.0, 204.0, 196.0],
    ("sim", "dflash", 4): [300.0, 310.0, 290.0],  # tied with eagle at TP 4
    ("sim", "eagle", 4): [305.0, 315.0, 295.0],
    ("h2", "ar", 1): [50.0, 51.0, 49.0],  # another host: never pooled with sim
    ("h2", "dflash", 1): [150.0, 153.0, 147.0],
}
VERIFY = {"chat-00": 20, "chat-01": 30}  # verify steps of each prompt (speculative configs)


def _e2e(rate: float) -> float:
    return TTFT + (TOKENS - 1) / rate


def write_results(root: Path) -> ResultsBuilder:
    """3 configs x TP 1 and 4 on host sim (and 2 on h2), all three workload kinds, a failed and
    a skipped cell, a rerun cell, a failed check and a divergent greedy output."""
    b = ResultsBuilder(root, title="Synthetic campaign")
    labels = {"ar": "Autoregressive", "dflash": NASTY_LABEL, "eagle": "EAGLE-3"}
    for host, cfg, tp in RATES:
        b.group(cfg, tp, host=host, label=labels[cfg])
    for (host, cfg, tp), rates in RATES.items():
        cid = f"s-{host}-{cfg}-{tp}"
        b.cell(cid, cfg, tp, "single", "single", host=host, repeats=3)
        rows = []
        for rep, rate in enumerate(rates):
            for pid, steps in VERIFY.items():
                sha = f"sha-{pid}-{rep}"
                if (cfg, tp, pid, rep) == ("eagle", 4, "chat-01", 2):
                    sha = "sha-something-else"
                rows.append(
                    dict(
                        prompt_id=pid,
                        repeat=rep,
                        ttft_s=TTFT,
                        e2e_s=_e2e(rate),
                        output_tokens=TOKENS,
                        output_tok_s=TOKENS / _e2e(rate),
                        output_sha256=sha,
                        spec_verify_ct=None if cfg == "ar" else steps,
                        accept_length=None if cfg == "ar" else TOKENS / steps,
                    )
                )
        gid = f"{host}.{cfg}.tp{tp}"
        if (host, cfg, tp) == ("sim", "dflash", 1):  # a first, broken attempt: slow and wrong
            broken = [dict(r, e2e_s=10.0, output_sha256="sha-broken") for r in rows]
            b.failed(cid, "server crashed", rows=broken)
            b.queued(cid, 2)
            b.ready(gid)
            b.finished(cid, rows, attempt=2)
        else:
            b.ready(gid)
            b.finished(cid, rows)
        if (host, cfg, tp) != ("sim", "ar", 1):
            b.group_done(gid)
    b.verdict(
        "eagle",
        1,
        "fail",
        "diverged from the baseline at token 3",
        detail={
            "compared": 6,
            "diverged": 1,
            "noise_floor": None,
            "divergent": [
                {
                    "kind": "single",
                    "prompt": "chat/chat-01",
                    "context": "",
                    "token": 3,
                    "word": 3,
                    "char": 14,
                    "ours": "a b c X",
                    "theirs": "a b c d",
                }
            ],
        },
    )
    b.verdict("dflash", 1, "pass", "outputs equal", detail={"compared": 6, "diverged": 0})
    for host, cfg, tp in (("sim", "dflash", 4), ("sim", "eagle", 4)):
        b.verdict(cfg, tp, "pass", "outputs equal", host, detail={"compared": 6, "diverged": 0})
    # h2's dflash has no verdict: unchecked (the log has none and there are no texts).
    for cfg in ("ar", "dflash"):
        cid = f"a-{cfg}"
        b.cell(cid, cfg, 1, "agentic", "agentic", prompts=("code",), max_tokens=256)
        b.finished(
            cid,
            [
                dict(
                    prompt_set="code",
                    prompt_id="code-01",
                    session=s,
                    turn=turn,
                    ttft_s=0.1 * (turn + 1),
                    e2e_s=0.1 * (turn + 1) + 64 / (80.0 if cfg == "ar" else 160.0),
                    prompt_tokens=1000 * (turn + 1),
                    cached_tokens=900 * turn,
                )
                for s in range(2)
                for turn in range(3)
            ],
        )
    for cfg, per_token in (("ar", True), ("dflash", False)):
        for level in (1, 4):
            cid = f"c-{cfg}-{level}"
            b.cell(cid, cfg, 1, "concurrency", "concurrency", concurrency=level, prompt_set="chat")
            figures: dict[str, Any] = {
                "throughput_tok_s": (100.0 if cfg == "ar" else 250.0) * level,
                "itl_s_p50": 0.01,
                "itl_s_p99": 0.03,
            }
            if per_token:
                figures.update(itl_token_s_p50=0.004, itl_token_s_p99=0.012)
            b.finished(
                cid,
                [
                    dict(prompt_id=f"chat-{i:02d}", e2e_s=1.0 + i, ttft_s=0.1 * (i + 1))
                    for i in range(4)
                ],
                figures=figures,
            )
    b.group_done("sim.ar.tp1")
    b.cell("c-eagle-4", "eagle", 4, "concurrency", "concurrency", concurrency=4)
    b.failed("c-eagle-4", "CUDA_ERROR: out of memory & 100% #oops")
    b.cell("skip-1", "eagle", 1, "agentic", "agentic")
    b.skipped("skip-1", "skipped by operator")
    return b


def finish(b: ResultsBuilder, **kw: Any) -> Path:
    return b.write(plan=PLAN, torn_tail=True, wall_s=600.0, **kw)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    return finish(write_results(tmp_path / "results" / "syn"))


@pytest.fixture
def no_tex(monkeypatch: pytest.MonkeyPatch) -> None:
    """Most tests check the text, not the PDF: keep them fast on machines that have TeX."""
    monkeypatch.setattr(render, "tex_engine", lambda: None)


def _rows(root: Path, kind: str = "single") -> dict[tuple[str, str, int], dict[str, Any]]:
    cmp = comparison(load_inputs(root)).filter(pl.col("kind") == kind)
    return {(r["host"], r["config"], r["tp"]): r for r in cmp.to_dicts()}


def test_comparison_frame_means_intervals_and_speedups(results: Path) -> None:
    cmp = comparison(load_inputs(results))
    assert tuple(cmp.columns) == COMPARISON_COLUMNS
    rows = _rows(results)
    ar = rows[("sim", "ar", 1)]
    assert ar["n"] == 3 and ar["requests"] == 6
    assert ar["decode_tok_s"] == pytest.approx(100.0)
    half = 4.3027 * 2.0 / 3**0.5  # t(0.975, 2) * sd / sqrt(n)
    assert ar["decode_tok_s_lo"] == pytest.approx(100.0 - half, abs=1e-2)
    assert ar["decode_tok_s_hi"] == pytest.approx(100.0 + half, abs=1e-2)
    assert ar["baseline"] and ar["speedup"] == pytest.approx(1.0)
    dflash = rows[("sim", "dflash", 1)]
    assert dflash["speedup"] == pytest.approx(2.0)
    assert dflash["speedup_lo"] < 2.0 < dflash["speedup_hi"]
    # The broken first attempt (e2e 10 s) is not counted: 6 requests, not 12.
    assert dflash["requests"] == 6
    # Accept length: request mean of 65/20 and 65/30; token-weighted 130 / 50.
    assert dflash["accept_len_mean"] == pytest.approx((65 / 20 + 65 / 30) / 2)
    assert dflash["accept_len_weighted"] == pytest.approx(130 / 50)
    assert ar["accept_len_mean"] is None and ar["accept_len_weighted"] is None


def test_best_only_where_told_apart_and_never_a_failed_check(results: Path) -> None:
    rows = _rows(results)
    tp1 = {c: rows[("sim", c, 1)] for c in ("ar", "dflash", "eagle")}
    assert tp1["eagle"]["failed_check"] and not tp1["eagle"]["best"]
    assert "diverged" in tp1["eagle"]["check_reason"]
    assert tp1["dflash"]["best"] and not tp1["ar"]["best"]
    tp4 = {c: rows[("sim", c, 4)] for c in ("ar", "dflash", "eagle")}
    assert not any(r["best"] for r in tp4.values())
    assert tp4["eagle"]["top_tie"] and tp4["dflash"]["top_tie"] and not tp4["ar"]["top_tie"]


def test_a_config_no_verdict_covers_is_unchecked_and_never_best(results: Path) -> None:
    h2 = _rows(results)[("sim", "dflash", 1)], _rows(results)[("h2", "dflash", 1)]
    checked, open_ = h2
    assert not checked["unchecked"]
    # 3x faster than h2's ar, with an interval that would clear it: still never best.
    assert open_["unchecked"] and not open_["failed_check"]
    assert not open_["best"] and not open_["top_tie"]
    why = "dflash: unchecked: no outputs of its cells were stored; not ranked"
    assert open_["check_reason"] == why


def test_hosts_are_never_pooled(results: Path) -> None:
    rows = _rows(results)
    assert rows[("h2", "ar", 1)]["decode_tok_s"] == pytest.approx(50.0)
    assert rows[("sim", "ar", 1)]["decode_tok_s"] == pytest.approx(100.0)
    assert rows[("h2", "dflash", 1)]["speedup"] == pytest.approx(3.0)  # against h2's own ar


def test_agentic_and_concurrency_figures(results: Path) -> None:
    ag = _rows(results, "agentic")
    assert ag[("sim", "ar", 1)]["n"] == 2  # sessions
    assert ag[("sim", "ar", 1)]["decode_tok_s"] == pytest.approx(80.0 * 63 / 64)
    assert ag[("sim", "dflash", 1)]["speedup"] == pytest.approx(2.0)
    conc = comparison(load_inputs(results)).filter(pl.col("kind") == "concurrency")
    thr = {(r["config"], r["concurrency"]): r["cell_throughput_tok_s"] for r in conc.to_dicts()}
    assert thr[("dflash", 4)] == pytest.approx(1000.0)
    assert set(conc["n"].to_list()) == {1}  # one cell, one unit: no interval
    assert conc["decode_tok_s_lo"].null_count() == conc.height


def test_markdown_report_sections_tables_and_marks(results: Path, no_tex: None) -> None:
    written = render_report(results)
    assert [p.name for p in written] == ["report.md", "report.tex"]
    md = (results / "report.md").read_text()
    assert md.startswith("# Synthetic campaign")
    assert "SIMULATED RESULTS" in md
    for title in (
        "Summary",
        "Methodology",
        "Single-stream decoding",
        "Accept length",
        "Agentic sessions",
        "Concurrency",
        "Server view beside the client view",
        "Correctness checks",
        "Every planned cell",
        "Environment",
    ):
        assert title in md, title
    # One table per host and TP for single-stream decoding, none pooled.
    for where in ("TP 1 on sim", "TP 4 on sim", "TP 1 on h2"):
        assert f"Single-stream decode speed, single, {where}" in md
    # The best row is bold and marked, the failed check marked, the tie marked.
    assert re.search(r"\| \*\*DFlash\\_\{x\} & 50% #1 \$~\^\\\\ok\*\* \|.*\| best \|", md)
    assert "| failed check |" in md
    assert md.count("| tied |") >= 2
    # Concurrency: ITL per token where every cell has it, else only the chunk gap.
    # Concurrency: the chunk gap, named as such, where some cell lacks ITL per token.
    assert "Chunk gap p50 ms" in md and "ITL p50 ms" not in md
    assert "Only the chunk gap per SSE event was recorded" in md
    assert "CUDA\\_ERROR: out of memory & 100% #oops" in md
    assert "skipped by operator" in md
    # Every planned cell accounted for.
    assert "Planned cells by status and workload kind" in md
    assert re.search(r"\| \*\*all\*\* \| \*\*\d+\*\* \|", md)


def test_same_tables_in_markdown_and_latex(results: Path, no_tex: None) -> None:
    render_report(results)
    md = (results / "report.md").read_text()
    tex = (results / "report.tex").read_text()
    report = build_report(results)
    n = len(report.tables())
    assert n >= 15
    assert len(re.findall(r"^\*\*Table \d+: ", md, re.M)) == n
    assert tex.count(r"\caption{") == n
    assert tex.count(r"\captionof{figure}") == len([c for c in report.charts() if c.has_points])


def test_only_the_workloads_the_plan_has(tmp_path: Path, no_tex: None) -> None:
    b = ResultsBuilder(tmp_path / "one")
    b.cell("s1", "ar", 1, "single", "single")
    b.finished("s1", [dict(prompt_id="p", repeat=0)])
    root = b.write(plan=PLAN)
    render_report(root)
    md = (root / "report.md").read_text()
    assert "Single-stream decoding" in md
    assert "## Agentic sessions" not in md and "## Concurrency" not in md
    assert "No agentic results" not in md


def test_status_is_exact_and_never_run_cells_are_listed(tmp_path: Path, no_tex: None) -> None:
    b = ResultsBuilder(tmp_path / "ab")
    for i in range(4):
        b.cell(f"s{i}", "ar", 1, "single", "single", prompt_set=f"set{i}")
    b.finished("s0", [dict(prompt_id="p", repeat=0)])
    b.aborted("by operator: wrong model")
    root = b.write(plan=PLAN)
    render_report(root)
    md = (root / "report.md").read_text()
    assert "aborted (by operator: wrong model)" in md
    assert "4 planned: 1 done, 3 never run" in md
    never = [x for x in md.splitlines() if x.startswith("| `") and "| never run |" in x]
    assert len(never) == 3
    # No end in the log and no process behind it: interrupted, said so.
    b2 = ResultsBuilder(tmp_path / "int")
    b2.cell("s0", "ar", 1, "single", "single")
    root2 = b2.write(plan=PLAN, finished=False)
    render_report(root2)
    assert "interrupted" in (root2 / "report.md").read_text()


def _log_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _longer_cells(root: Path, cells: dict[str, float]) -> None:
    """Make each of ``cells`` end that many seconds after its start (its cell_finished moved)."""
    import json

    path = root / "events.jsonl"
    started: dict[str, datetime] = {}
    out = []
    for raw in path.read_text().split("\n"):
        try:
            ev = json.loads(raw)
        except ValueError:  # the torn tail (or the end): kept as it is
            out.append(raw)
            continue
        if ev.get("cell_id") in cells:
            when = datetime.fromisoformat(ev["ts"].replace("Z", "+00:00"))
            if ev["event"] == "cell_started":
                started[ev["cell_id"]] = when
            elif ev["event"] == "cell_finished":
                end = started[ev["cell_id"]].timestamp() + cells[ev["cell_id"]]
                ev["ts"] = datetime.fromtimestamp(end, UTC).isoformat().replace("+00:00", "Z")
            raw = json.dumps(ev, separators=(",", ":"))
        out.append(raw)
    path.write_text("\n".join(out))


def test_server_view_beside_the_client_view(tmp_path: Path, no_tex: None) -> None:
    b = write_results(tmp_path / "sv")
    root = finish(b)
    # Cells of 30 s: the lines' stretch (12 s) is long enough for stamps to the second.
    _longer_cells(root, {"s-sim-dflash-1": 30.0, "s-h2-dflash-1": 30.0})
    inp = load_inputs(root)
    cell = inp.state.cells["s-sim-dflash-1"]
    agree = inp.state.cells["s-h2-dflash-1"]
    assert cell.started_at is not None and agree.started_at is not None
    logs = root / "logs"
    logs.mkdir()
    line = (
        "[{t} TP0] Decode batch, #running-req: 1, #token: 741, token usage: 0.00, "
        "accept len: {a}, accept rate: 0.3, cuda graph: True, gen throughput (token/s): {g}, "
        "#queue-req: 0, \n"
    )
    header = "----- {iso} starting sim.dflash.tp1: python -m sglang.launch_server\n"
    # The server's clock runs 2 h ahead of UTC: the header puts its lines in place.
    for gid, c, accept in (
        ("sim.dflash.tp1", cell, 4.0),  # accept far from the client's 2.6
        ("h2.dflash.tp1", agree, 2.6),
    ):
        ahead = 7200.0
        part_rows = pl.concat(
            [pl.read_parquet(p) for p in (root / "parts").glob(f"{c.id}.a*.parquet")]
        )
        gen = float(part_rows["output_tokens"].sum()) / 12.0  # the client's over the stretch
        text = header.format(iso=datetime.fromtimestamp(c.started_at - 5, UTC).isoformat())
        text += f"[{_log_time(c.started_at - 4 + ahead)} TP0] Load weight begin.\n"
        for dt in (2.0, 14.0):
            text += line.format(t=_log_time(c.started_at + dt + ahead), a=accept, g=gen)
        (logs / f"{gid}.log").write_text(text)
        # The cell's requests decode inside the lines' stretch (2 s to 14 s into the cell).
        for part in (root / "parts").glob(f"{c.id}.a*.parquet"):
            rows = pl.read_parquet(part)
            sent = [c.started_at + 3.0 + 0.1 * i for i in range(rows.height)]
            rows.with_columns(
                pl.Series("started_at", sent),
                pl.lit(0.0).alias("ttft_s"),
                pl.lit(0.5).alias("e2e_s"),
            ).write_parquet(part)
    render_report(root)
    md = (root / "report.md").read_text()
    assert "Server and client figures, TP 1 on sim" in md
    assert "log accept length 4.00 vs client 2.60" in md
    row = next(
        x for x in md.splitlines() if x.startswith("| DFlash") and "| single |" in x and "4.00" in x
    )
    assert "disagree" in row
    h2 = [x for x in md.splitlines() if "| single |" in x and "2.60 | 2.60" in x]
    assert h2 and "disagree" not in h2[0]


def test_server_view_pools_like_every_other_table(tmp_path: Path, no_tex: None) -> None:
    """A long cell and a short one: the view's client accept length, counter accept length
    and cell throughput are ratios of sums over both (as ``accept_frame`` and the per-TP
    tables pool), never the mean of the two cells' ratios."""
    b = ResultsBuilder(tmp_path / "pool")
    b.group("dflash", 1)
    sizes = {"long": (1000, 100, 100.0), "short": (100, 50, 1000.0)}  # tokens, steps, tok/s
    for kind in ("single", "concurrency"):
        for name, (tokens, steps, tok_s) in sizes.items():
            cid = f"{kind}-{name}"
            b.cell(
                cid,
                "dflash",
                1,
                f"{kind}-{name}",
                kind,
                concurrency=2 if kind != "single" else None,
            )
            row = dict(
                prompt_id="p",
                repeat=0,
                output_tokens=tokens,
                accept_length=tokens / steps,
                spec_verify_ct=steps,
                e2e_s=tokens / tok_s,
            )
            figures = {
                "throughput_tok_s": tok_s,
                "counter_generation_tokens": tokens,
                "counter_verify_steps": steps,
                "accept_length_counters": tokens / steps,
            }
            b.finished(cid, [row], figures=figures)
    root = b.write()
    inp = load_inputs(root)
    view = {r["kind"]: r for r in view_frame(inp).to_dicts()}
    pooled = accept_frame(
        requests(inp).select("group", "kind", "cell_id", *ACCEPT_COLUMNS), ["group", "kind"]
    )
    for kind in ("single", "concurrency"):
        r = view[kind]
        want = pooled.filter(pl.col("kind") == kind)["accept_len_weighted"].item()
        assert want == pytest.approx(1100 / 150)  # not (10 + 2) / 2
        assert r["accept_len_weighted"] == pytest.approx(want)
        assert r["accept_len_countered"] == pytest.approx(want)
        assert r["counter_accept_len"] == pytest.approx(1100 / 150)
        assert r["client_speed"] == pytest.approx(1100 / (10.0 + 0.1))  # not (100 + 1000) / 2
        assert r["cells"] == 2
    render_report(root)
    md = (root / "report.md").read_text()
    view_md = md[md.index("Server and client figures, TP 1 on sim") :]
    rows = [x for x in view_md.splitlines() if x.startswith("| DFlash") or x.startswith("| dflash")]
    assert len(rows) == 2
    for row in rows:
        cols = [x.strip() for x in row.split("|")]
        # Cells, request mean (the plain mean of 10 and 2), client accept, log, counters, tok/s.
        assert cols[3:8] == ["2 (0)", "6.00", "7.33", "—", "7.33"], row
        assert cols[8] == "108.9", row
    assert "No disagreement beyond tolerance." in view_md


def test_telemetry_busy_apart_from_idle(tmp_path: Path, no_tex: None) -> None:
    b = write_results(tmp_path / "tel")
    root = finish(b)
    st = load_inputs(root).state
    g = st.groups["sim.eagle.tp4"]
    c = st.cells["s-sim-eagle-4"]
    (up_start, up_end) = g.windows[0]
    assert up_end is not None and c.started_at is not None and c.ended_at is not None
    busy = [c.started_at + 1, c.started_at + 2]
    idle = [up_start + 0.5, up_end - 0.5]
    times = busy + idle
    n = len(times) * 4
    b.telemetry(
        {
            "time": [t for t in times for _ in range(4)],
            "host": ["sim"] * n,
            "gpu": [gpu for _ in times for gpu in (4, 5, 6, 7)],
            "util_pct": [90.0] * 8 + [10.0] * 8,
            "mem_used_mib": [1000.0] * n,
            "mem_total_mib": [98304.0] * n,
            "power_w": [400.0] * 8 + [100.0] * 8,
            "temp_c": [50.0] * n,
        }
    )
    render_report(root)
    md = (root / "report.md").read_text()
    row = next(x for x in md.splitlines() if x.startswith("| `sim.eagle.tp4`"))
    cells = [x.strip() for x in row.split("|")]
    assert cells[5:9] == ["90.0", "10.0", "400", "100"]  # busy and idle never averaged
    assert "| `sim` | sim | 4 | not recorded | 96 GiB |" in md


def test_estimate_and_environment(tmp_path: Path, no_tex: None) -> None:
    # The plan as run must load for the estimate: no braces in a label there.
    results = write_results(tmp_path / "est").write(plan=PLAN.replace(NASTY_LABEL, "DFlash"))
    render_report(results)
    md = (results / "report.md").read_text()
    assert "The dry-run estimate for the cells done and servers started was" in md
    assert "Dry-run estimate against the time taken, by workload kind" in md
    # The measured [estimate] table that seeds the next plan: the baseline's rates per TP.
    assert "`tok_s = { 1 = 75.0, 4 = 200.0 }`" in md  # sim 100 and h2 50 at TP 1, in real time
    assert "`spec_speedup = " in md and '`startup = "5s"`' in md
    assert "Server command line of every service group" in md
    assert "`python -m sglang.launch_server --tp-size 4`" in md
    assert "specbench-tui 0.1.0" in md
    assert "`abc123`" in md  # the plan hash


def test_greedy_divergence_is_listed(results: Path, no_tex: None) -> None:
    render_report(results)
    md = (results / "report.md").read_text()
    assert "Outputs that differ from the baseline" in md
    assert "| EAGLE-3 | 1 | single | `chat/chat-01` | — | token 3 (char 14): `a b c X`" in md
    assert "| sim | DFlash" in md and "| 1 | 6 | 0 | never |" in md


def test_results_with_no_rows_render_with_a_message(tmp_path: Path, no_tex: None) -> None:
    root = ResultsBuilder(tmp_path / "syn", simulated=False).write(finished=False, plan=PLAN)
    (root / "requests.parquet").unlink()
    written = render_report(root)
    md = (root / "report.md").read_text()
    tex = (root / "report.tex").read_text()
    assert "requests.parquet is missing" in md
    assert "requests.parquet is missing" in tex
    assert "No measured results yet." in md
    assert "SIMULATED" not in md
    assert "interrupted" in md
    assert written == [root / "report.md", root / "report.tex"]


def test_a_directory_without_a_campaign_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no campaign here"):
        render_report(tmp_path)
    assert not (tmp_path / "report.md").exists()


def test_labels_come_from_the_log(tmp_path: Path) -> None:
    b = ResultsBuilder(tmp_path)
    b.group("ar", 1, label="AR")
    b.group("dflash-8", 1, label="DFlash (block 8)")
    b.group("dflash-16", 1, label="DFlash (block 16)")
    labels = load_inputs(b.write()).labels
    assert labels["dflash-16"] == "DFlash (block 16)"
    assert list(labels) == ["ar", "dflash-8", "dflash-16"]


def test_latex_special_characters_are_escaped(results: Path, no_tex: None) -> None:
    assert tex_escape(NASTY_LABEL) == (
        r"DFlash\_\{x\} \& 50\% \#1 \$\textasciitilde{}\textasciicircum{}\textbackslash{}ok"
    )
    assert tex_escape("ddtree-16 — ×") == r"ddtree-{}16 --- $\times$"
    assert tex_escape("café ✓") == "cafe ?"
    render_report(results)
    tex = (results / "report.tex").read_text()
    assert tex_escape(NASTY_LABEL) in tex
    assert NASTY_LABEL not in tex
    assert r"CUDA\_ERROR: out of memory \& 100\% \#oops" in tex
    assert r"\usepackage{pgfplots}" in tex


def test_markdown_cells_cannot_break_tables() -> None:
    assert md_escape("a|b *c* d_e\nf") == r"a\|b \*c\* d\_e f"


def test_tex_failure_costs_only_the_pdf(
    results: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "broken-tex"
    broken.write_text("#!/bin/sh\necho '! Undefined control sequence.'\nexit 1\n")
    broken.chmod(0o755)
    monkeypatch.setattr(render, "tex_engine", lambda: str(broken))
    (results / "report.pdf").write_bytes(b"%PDF stale")
    written = render_report(results)
    assert [p.name for p in written] == ["report.md", "report.tex"]
    assert not (results / "report.pdf").exists()
    log = (results / "report.tex.log").read_text()
    assert "exited with status 1" in log and "Undefined control sequence" in log


@pytest.mark.system
def test_pdflatex_builds_the_pdf(
    results: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pdflatex = need_program("pdflatex")
    monkeypatch.setattr(render, "tex_engine", lambda: pdflatex)
    written = render_report(results)
    pdf = results / "report.pdf"
    assert pdf in written, (
        (results / "report.tex.log").read_text()
        if (results / "report.tex.log").exists()
        else "no log"
    )
    assert not (results / "report.tex.log").exists()
    assert not list(results.glob("*.aux"))  # built elsewhere, nothing left behind
    text = check_pdf(results, min_pages=6)
    assert "SIMULATED RESULTS" in text
    # The same engine on a campaign with nothing in it: the empty report compiles too.
    empty = ResultsBuilder(tmp_path / "empty").write()
    assert empty / "report.pdf" in render_report(empty)


def test_several_campaigns_side_by_side(tmp_path: Path, no_tex: None) -> None:
    a = finish(write_results(tmp_path / "a"))
    b = write_results(tmp_path / "b")
    # Campaign B: the same configs, dflash 10% faster at TP 1, the rest the same.
    for row in b.rows:
        if row["config"] == "dflash" and row["tp"] == 1 and row["host"] == "sim":
            row["e2e_s"] = TTFT + (row["e2e_s"] - TTFT) / 1.1
    for part in (b.layout.parts).glob("s-sim-dflash-1.a2.parquet"):
        df = pl.read_parquet(part)
        df = df.with_columns(((pl.col("e2e_s") - TTFT) / 1.1 + TTFT).alias("e2e_s"))
        df.write_parquet(part)
    bb = finish(b)
    written = render.render_comparison([a, bb])
    assert [p.name for p in written] == ["comparison.md", "comparison.tex"]
    md = (a / "comparison.md").read_text()
    dflash = next(
        x for x in md.splitlines() if x.startswith("| sim | DFlash") and "| 1 | single |" in x
    )
    # Each campaign is one run: its repeats say nothing of what changes between runs.
    assert "1.10x" in dflash and "within-run only (differs within a run)" in dflash
    ar = next(x for x in md.splitlines() if x.startswith("| sim | Autoregressive | 1 | single |"))
    assert "1.00x" in ar and "within-run only |" in ar


def test_a_directory_copied_without_its_parts_reads_requests_parquet(results: Path) -> None:
    before = comparison(load_inputs(results)).sort("host", "tp", "kind", "config", "concurrency")
    shutil.rmtree(results / "parts")
    after = comparison(load_inputs(results)).sort("host", "tp", "kind", "config", "concurrency")
    assert after.select("config", "tp", "decode_tok_s").equals(
        before.select("config", "tp", "decode_tok_s")
    )


def test_a_speculative_config_without_accept_length_says_why(tmp_path: Path, no_tex: None) -> None:
    """A config whose server gave no per-request accept length (SGLang's OpenAI route) is
    named with the reason, not dropped from the section as if it had not run."""
    from dataclasses import replace

    b = ResultsBuilder(tmp_path / "acc")
    b.cell("a1", "eagle", 1, "single", "single")
    b.cell("o1", "eagle-openai", 1, "single", "single")
    g = b.groups["sim.eagle-openai.tp1"]
    b.groups[g.id] = replace(g, api="openai")
    b.finished("a1", [dict(prompt_id="p", repeat=0, accept_length=2.5, spec_verify_ct=20)])
    b.finished("o1", [dict(prompt_id="p", repeat=0)])
    root = b.write(plan=PLAN)
    render_report(root)
    md = (root / "report.md").read_text()
    section = md.split("## Accept length", 1)[1].split("\n## ", 1)[0]
    assert "eagle-openai (TP 1 on sim): no per-request accept length" in section
    assert "OpenAI-compatible stream carries no meta\\_info" in section  # Markdown-escaped
    assert "eagle (TP 1 on sim): no per-request" not in section


def test_server_view_compares_the_log_with_the_same_stretches(tmp_path: Path, no_tex: None) -> None:
    """The log's lines describe the cell's second half only, where the server accepted more and
    ran faster: the client's figure beside them is taken over the requests inside those
    stretches, its warm-ups included (the log counts them), not over the whole cell (one 10 s
    window beside a whole cell gave a false disagreement on the real vLLM plan: accept length
    2.35 against 1.99). Stamps to the second place each line within its second."""
    b = ResultsBuilder(tmp_path / "st")
    b.group("dflash", 1)
    b.cell("c", "dflash", 1, "single", "single")
    start = b.now() + 10.0  # the cell's CellStarted stamp; it ends 40 s later
    rows, warmups = [], []
    for i in range(36):  # one request a second from start + 2 to start + 37
        sent = start + 2.0 + i
        late = sent >= start + 20.0
        tokens, accept = (100, 4.0) if late else (50, 2.0)
        if late and i % 2:  # a warm-up: sent, not measured, counted by the server's log
            warmups.append([sent, 1.0, tokens, int(tokens / accept), int(tokens - tokens / accept)])
            continue
        rows.append(
            dict(
                prompt_id=f"p{i}",
                repeat=0,
                started_at=sent,
                ttft_s=0.0,
                e2e_s=1.0,
                output_tokens=tokens,
                spec_verify_ct=int(tokens / accept),
                accept_length=accept,
            )
        )
    measured = sum(r["output_tokens"] for r in rows)
    figures = {"throughput_tok_s": measured / 36.0, "warmup_requests": warmups}
    b.finished("c", rows, figures=figures, window_s=40.0)
    root = b.write()
    logs = root / "logs"
    logs.mkdir()
    line = (
        "[{t} TP0] Decode batch, #running-req: 1, #token: 741, token usage: 0.00, "
        "accept len: 4.00, accept rate: 0.75, cuda graph: True, gen throughput (token/s): "
        "100.00, #queue-req: 0, \n"
    )
    text = f"----- {datetime.fromtimestamp(start - 5, UTC).isoformat()} starting sim.dflash.tp1\n"
    text += f"[{_log_time(start - 4)} TP0] Load weight begin.\n"
    # Stamped at whole seconds: 20 (the first in the cell, its stretch from before it), then
    # 24, 28 .. 36, whose stretches make one from 20.5 to 36.5 in the cell's clock.
    for dt in (-1.0, 20.0, 24.0, 28.0, 32.0, 36.0):
        text += line.format(t=_log_time(start + dt))
    (logs / "sim.dflash.tp1.log").write_text(text)
    inp = load_inputs(root)
    r = view_frame(inp).to_dicts()[0]
    assert r["log_accept_len"] == pytest.approx(4.0)
    assert r["accept_len_weighted"] < 3.0  # the whole cell's measured requests
    assert r["accept_len_logged"] == pytest.approx(4.0)  # the requests from start + 20.5 on
    assert r["client_speed"] == pytest.approx(measured / 36.0)
    # 100-token requests over (20.5, 36.5), every other one a warm-up: the log counted
    # them, and so does this.
    assert r["client_speed_logged"] == pytest.approx(1600 / 16.0)
    render_report(root)
    view_md = (root / "report.md").read_text().split("Server and client figures, TP 1")[1]
    assert "No disagreement beyond tolerance." in view_md
    assert "4.00 (4.00)" in view_md and "100.0 (100.0)" in view_md


def test_a_vllm_window_that_accepted_nothing_is_pooled() -> None:
    """vLLM's line for a 10 s window that accepted no draft says a mean of 1.00: its steps
    come from its drafted tokens over the draft length, so it pulls the log's accept length
    down as the counters would instead of dropping out."""
    from specbench_tui.engines.vllm import log_window, parse_stats_line

    none = parse_stats_line(
        "INFO 12-01 08:05:24 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: "
        "1.00, Accepted throughput: 0.00 tokens/s, Drafted throughput: 9.00 tokens/s, "
        "Accepted: 0 tokens, Drafted: 90 tokens, Per-position acceptance rate: 0.000, "
        "0.000, 0.000, Avg Draft acceptance rate: 0.0%"
    )
    assert none is not None
    counts = log_window(none, 10.0)
    assert counts is not None and counts.steps == pytest.approx(30.0)
    assert counts.tokens == pytest.approx(30.0)


def test_a_charts_caption_says_what_its_error_bars_are(results: Path, no_tex: None) -> None:
    """A chart with intervals says their kind and over how many units each bar stands."""
    render_report(results)
    md = (results / "report.md").read_text()
    figures = [x for x in md.splitlines() if x.startswith("- _Figure (in report.pdf): Speed-up")]
    assert figures
    for line in figures:
        assert "error bars: Fieller's 95% interval of the ratio of means, over" in line, line
        assert re.search(r"over \d+(-\d+)? units? a bar", line), line


def test_the_reports_definitions_are_the_figures_own(results: Path, no_tex: None) -> None:
    """Each figure is defined once (bench/figures.py DEFINITIONS): the report's table of
    figures and the sections' prose print that text, so none can drift from the numbers."""
    from specbench_tui.bench.figures import DEFINITIONS

    render_report(results)
    md = " ".join((results / "report.md").read_text().split())
    for key, definition in DEFINITIONS.items():
        said = " ".join(md_escape(definition.split("{")[0]).split())
        assert said in md, key
    decode = " ".join(md_escape(DEFINITIONS["decode_tok_s_total"]).split())
    assert md.count(decode) >= 3  # the table of figures, single-stream and concurrency

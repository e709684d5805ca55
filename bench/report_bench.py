"""The report of a campaign with a million request rows (target: under 10 s and under 1 GB).

Writes a results directory the way the engine does (events through the contract's own types,
one part file per finished cell, chunk-gap lists included since they are the biggest column
a real directory has), then renders its report in a fresh process and prints that process's
wall time and peak RSS: reading, every section, Markdown and LaTeX. The PDF build is timed
apart (its cost depends on the number of configs and charts, not on the rows).

Run: python bench/report_bench.py [--rows 1000000] [--pdf]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from specbench_tui.results.cells import Cell, ServiceGroup
from specbench_tui.results.events import (
    CampaignFinished,
    CampaignStarted,
    CellFinished,
    CellStarted,
    GroupFinished,
    GroupStarted,
    ServiceReady,
)
from specbench_tui.results.files import event_line
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.schema import REQUEST_SCHEMA

CONFIGS = ["ar", "dflash", *(f"ddtree-{b}" for b in (8, 16, 32, 64, 128, 256))]
TPS = [1, 4, 8]
SETS = ["code", "math", "chat", "summarize", "translate"]
LENGTHS = [256, 1024, 2048]
GAPS = 32  # chunk gaps kept per request


def _part(cell: Cell, rows: int, repeats: int, seed: int) -> pl.DataFrame:
    i = pl.int_range(0, rows, eager=False)
    noise = ((i * 2654435761 + seed) % 1000).cast(pl.Float64) / 1000.0  # deterministic jitter
    spec = cell.config != "ar"
    base = 40.0 * cell.tp**0.5 * (2.5 if spec else 1.0)
    df = pl.DataFrame({"_": [0]}).lazy().select(i.alias("i")).with_columns(noise.alias("u"))
    df = df.select(
        pl.lit("bench").alias("campaign"),
        pl.lit(cell.id).alias("cell_id"),
        pl.lit(1).alias("attempt"),
        pl.lit(cell.group).alias("group"),
        pl.lit(cell.host).alias("host"),
        pl.lit(cell.config).alias("config"),
        pl.lit(cell.tp).alias("tp"),
        pl.lit(cell.workload).alias("workload"),
        pl.lit(cell.kind).alias("kind"),
        pl.lit(cell.prompt_set).alias("prompt_set"),
        ("p-" + (pl.col("i") // repeats).cast(pl.String)).alias("prompt_id"),
        pl.lit(cell.max_tokens).alias("max_tokens"),
        pl.lit(None, dtype=pl.Int64).alias("concurrency"),
        pl.lit(None, dtype=pl.Int64).alias("session"),
        pl.lit(None, dtype=pl.Int64).alias("turn"),
        (pl.col("i") % repeats).alias("repeat"),
        (1.767e9 + pl.col("i").cast(pl.Float64)).alias("started_at"),
        (0.05 + 0.01 * pl.col("u")).alias("ttft_s"),
        (0.05 + cell.max_tokens / (base * (0.9 + 0.2 * pl.col("u")))).alias("e2e_s"),
        pl.lit(1.0 / base).alias("tpot_s"),
        pl.concat_list([pl.lit(1.0 / base) + pl.col("u") * 1e-4] * GAPS).alias("itl_s"),
        pl.lit(cell.max_tokens).alias("output_tokens"),
        (200 + (pl.col("u") * 300).cast(pl.Int64)).alias("prompt_tokens"),
        pl.lit(0).alias("cached_tokens"),
        pl.lit(cell.max_tokens // 4).alias("chunks"),
        pl.lit(base).alias("output_tok_s"),
        (pl.lit(cell.max_tokens // 4) if spec else pl.lit(None, dtype=pl.Int64)).alias(
            "spec_verify_ct"
        ),
        (pl.lit(4.0) + pl.col("u") if spec else pl.lit(None, dtype=pl.Float64)).alias(
            "accept_length"
        ),
        pl.lit("length").alias("finish_reason"),
        pl.concat_str(  # 64 hex digits, like a real SHA-256
            [
                (pl.col("i") // repeats + k).hash(seed).cast(pl.String).str.zfill(20)
                for k in (1, 2, 3)
            ]
        )
        .str.slice(0, 64)
        .alias("output_sha256"),
        pl.lit(None, dtype=pl.String).alias("error"),
    )
    out = df.collect()
    # Columns the request row gained after this bench was written stay null, as in old files.
    out = out.with_columns(
        pl.lit(None, dtype=t).alias(c) for c, t in REQUEST_SCHEMA.items() if c not in out.columns
    )
    return out.select(list(REQUEST_SCHEMA)).cast(REQUEST_SCHEMA)  # type: ignore[arg-type]


SEED_PLAN = Path(__file__).resolve().parent.parent / "plans" / "ddtree-qwen36-ct200.toml"


def write_campaign(root: Path, rows: int) -> int:
    """The seed campaign's single-stream shape (8 configs x 3 TP sizes x 5 prompt sets x 3
    lengths, 3 repeats) on one host, ``rows`` request rows in all; returns the rows written."""
    layout = ResultsLayout(root)
    layout.parts.mkdir(parents=True)
    layout.logs.mkdir()
    layout.plan.write_text(SEED_PLAN.read_text().replace("ct200", "gpu1"))
    groups, cells = [], []
    for tp in TPS:
        for cfg in CONFIGS:
            gid = f"gpu1.{cfg}.tp{tp}"
            groups.append(
                ServiceGroup(
                    id=gid,
                    host="gpu1",
                    host_kind="ssh",
                    config=cfg,
                    label=cfg,
                    tp=tp,
                    gpu_ids=tuple(range(tp)),
                    port=30000,
                    command=("python", "-m", "sglang.launch_server", "--tp-size", str(tp)),
                    env=(),
                    api="sglang",
                    ready_timeout_s=900.0,
                    speculative=cfg != "ar",
                )
            )
            for ps in SETS:
                for mt in LENGTHS:
                    cells.append(
                        Cell(
                            id=f"{gid}-{ps}-{mt}",
                            name=f"{gid}/single/{ps}/{mt}",
                            group=gid,
                            host="gpu1",
                            config=cfg,
                            tp=tp,
                            workload="single",
                            kind="single",
                            prompt_set=ps,
                            max_tokens=mt,
                            concurrency=None,
                            prompts=(ps,),
                            repeats=3,
                            params=(("budget", int(cfg.split("-")[1])),) if "-" in cfg else (),
                        )
                    )
    per_cell = max(3, rows // len(cells))
    t = 1.767e9
    events: list = [
        CampaignStarted(
            campaign="bench",
            title="Report benchmark",
            plan_hash="bench",
            hosts=["gpu1"],
            groups=groups,
            cells=cells,
            selected=[c.id for c in cells],
            ts=t,
        )
    ]
    by_group: dict[str, list[Cell]] = {}
    for c in cells:
        by_group.setdefault(c.group, []).append(c)
    total = 0
    for g in groups:
        t += 1
        events.append(GroupStarted(group=g.id, host=g.host, config=g.config, tp=g.tp, ts=t))
        t += 60
        events.append(ServiceReady(group=g.id, startup_s=60.0, ts=t))
        for n, c in enumerate(by_group[g.id]):
            part = _part(c, per_cell, 3, n)
            part.write_parquet(layout.part_path(c.id, 1))
            total += part.height
            events.append(CellStarted(cell_id=c.id, group=g.id, cell=c.name, ts=t + 1))
            t += 100
            events.append(
                CellFinished(
                    cell_id=c.id,
                    group=g.id,
                    cell=c.name,
                    requests=part.height,
                    wall_s=99.0,
                    figures={"throughput_tok_s": 100.0},
                    ts=t,
                )
            )
        t += 1
        events.append(GroupFinished(group=g.id, ts=t))
    events.append(CampaignFinished(campaign="bench", wall_s=t - 1.767e9, ts=t + 1))
    layout.events.write_text("".join(event_line(e) for e in events))
    return total


CHILD = """
import json, resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
from specbench_tui.report.build import build_report
from specbench_tui.report.render import render_texts
root = Path(sys.argv[1])
report = build_report(root)
md, tex = render_texts(report)
(root / "report.md").write_text(md)
(root / "report.tex").write_text(tex)
wall = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"wall_s": wall, "rss_mib": rss, "tables": len(report.tables()),
                  "charts": len(report.charts())}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--pdf", action="store_true", help="also time the PDF build")
    ap.add_argument("--keep", type=Path, help="write the campaign here and keep it")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp) / "bench"
        t0 = time.perf_counter()
        if (root / "events.jsonl").exists():  # a kept campaign: render it again
            n = sum(
                pl.scan_parquet(p).select(pl.len()).collect().item()
                for p in (root / "parts").iterdir()
            )
        else:
            n = write_campaign(root, args.rows)
        size = sum(p.stat().st_size for p in (root / "parts").iterdir()) / 2**20
        print(
            f"wrote {n:,} request rows in {len(list((root / 'parts').iterdir()))} parts "
            f"({size:.0f} MiB) in {time.perf_counter() - t0:.1f} s"
        )
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(root)], capture_output=True, text=True, check=True
        ).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(
            f"report of {n:,} rows: {r['wall_s']:.2f} s wall, peak RSS {r['rss_mib']:.0f} MiB "
            f"({r['tables']} tables, {r['charts']} charts; targets: < 10 s, < 1024 MiB)"
        )
        if args.pdf:
            from specbench_tui.report.render import compile_pdf

            t1 = time.perf_counter()
            ok = compile_pdf(root / "report.tex", root / "report.pdf", root / "report.tex.log")
            print(f"PDF build: {'ok' if ok else 'failed'} in {time.perf_counter() - t1:.1f} s")


if __name__ == "__main__":
    main()

"""The first page: what the campaign is and where it stands, and the answer to its question:
the fastest config per host, TP and workload with its speed-up and interval (or that it cannot
be told apart), the configs that failed a check, the cells that failed, and how far the dry-run
estimate was off."""

from __future__ import annotations

from typing import Any

import polars as pl

from specbench_tui.bench.figures import STALL_FACTOR, STALL_GAP_S, stall_said
from specbench_tui.engines.registry import SIMULATED_ENGINE, adapter
from specbench_tui.report import format as f
from specbench_tui.report.blocks import (
    Bullets,
    Cell,
    Column,
    Facts,
    Para,
    Section,
    Table,
    bold,
    code,
    text,
)
from specbench_tui.report.estimate_check import EstimateCheck, seed_estimate
from specbench_tui.report.frames import (
    UNTIMED_MARK,
    baseline,
    cell_energy,
    check_marks,
    label,
    marked,
    request_errors,
    requests,
)
from specbench_tui.report.inputs import Inputs
from specbench_tui.report.sections import columns as C
from specbench_tui.report.sections import deploy
from specbench_tui.report.sections.accounting import problems, status_counts
from specbench_tui.report.sections.common import compared, names
from specbench_tui.report.sections.concurrency import level_frame
from specbench_tui.results.events import iso_utc

STATUS_WORDS = {
    "finished": "finished: every planned cell ran",
    "partial": "partial: the campaign ended with planned cells never run",
    "aborted": "aborted",
    "interrupted": "interrupted: the log has no end and no process holds the directory",
    "running": "running (a campaign process holds the directory)",
    "paused": "paused",
    "aborting": "aborting",
    "not started": "not started",
}


def status_text(inp: Inputs) -> str:
    st = inp.state
    status = st.run_status(live=inp.live)
    out = STATUS_WORDS.get(status, status)
    n = st.counts
    if status == "finished" and n.done < n.total:  # failed or skipped cells did not all run
        ended = ", ".join(
            f"{k} {w}" for k, w in ((n.failed, "failed"), (n.skipped, "skipped")) if k
        )
        out = (
            f"finished: {n.done} of {n.total} planned cells done ({ended}: see Every planned cell)"
        )
    if status == "aborted" and st.abort_reason:
        out += f" ({st.abort_reason})"
    return out


def cells_text(inp: Inputs) -> str:
    n = status_counts(inp)
    parts = [f"{n['done']} done"]
    for s in ("failed", "skipped", "never run", "pending", "running"):
        if n.get(s):
            parts.append(f"{n[s]} {s}")
    return f"{n['planned']} planned: " + ", ".join(parts)


#: The answer table's columns: the fastest config of a scope by decode tok/s. The baseline's
#: own row says ``1.00x (baseline)``; ``marks`` holds the verdict.
ANSWER_COLUMNS = (
    C.HOST,
    C.TP,
    C.WORKLOAD,
    C.Col("fastest", "Fastest", lambda r: Cell(r["label"], bold=bool(r.get("best"))), "l"),
    C.DECODE_CI,
    C.SPEEDUP_CI,
)
#: The answer under load: the fastest config at the highest concurrency level by cell
#: throughput (one cell a level: no interval).
LOAD_COLUMNS = (
    C.HOST,
    C.TP,
    C.WORKLOAD,
    C.CLIENTS,
    C.Col("fastest", "Fastest", lambda r: Cell(r["label"]), "l"),
    C.THROUGHPUT,
    C.LOAD_SPEEDUP,
)


def _answer_rows(inp: Inputs) -> list[dict[str, Any]]:
    """Per host, TP and single-stream or agentic workload, the fastest comparable config that
    passed its checks (its compared row, ``marks`` the verdict)."""
    cmp = compared(inp).filter(pl.col("kind").is_in(["single", "agentic"]))
    rows: list[dict[str, Any]] = []
    scopes: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in cmp.to_dicts():
        scopes.setdefault((r["host"], r["tp"], r["kind"], r["workload"]), []).append(r)
    kinds = {"single": 0, "agentic": 1}
    for (host, tp, _kind, workload), items in sorted(
        scopes.items(), key=lambda kv: (kv[0][0], kv[0][1], kinds.get(kv[0][2], 2), kv[0][3])
    ):
        eligible = [
            r
            for r in items
            if not (r["failed_check"] or r["unchecked"] or r["untimed"] or r["why"])
        ]
        if not eligible:
            untimed = [r["label"] for r in items if r["untimed"]]
            if untimed:  # the workload ran; say why it has no answer rather than drop it
                rows.append(
                    {
                        "host": host,
                        "tp": tp,
                        "workload": workload,
                        "label": f.MISSING,
                        "untimed": True,
                        "marks": f"{UNTIMED_MARK}: {names(untimed)}",
                    }
                )
            continue
        top = max(eligible, key=lambda r: r["decode_tok_s"])
        unlike = [
            marked(inp, r["config"], host, [tp])
            for r in items
            if r["why"] and r["decode_tok_s"] is not None
        ]
        also = f"; {names(unlike)} not comparable (Comparability)" if unlike else ""
        if top["best"]:
            runner = sorted(eligible, key=lambda r: -r["decode_tok_s"])[1]
            verdict = f"best: told apart from {runner['label']} (n={top['n']})"
        elif len(eligible) < 2:
            verdict = "only comparable config" if unlike else "only config"
        else:
            tied = [r["label"] for r in eligible if r["top_tie"] and r is not top]
            verdict = (
                f"cannot be told apart from {names(tied)} at n={top['n']}"
                if tied
                else f"no interval at n={top['n']}"
            )
        rows.append({**top, "marks": verdict + also})
    return rows


def _load_rows(inp: Inputs) -> list[dict[str, Any]]:
    """Per host, TP and concurrency workload, the config with the highest cell throughput at
    the highest level, among those that passed their checks and compare like with like."""
    levels = level_frame(inp).to_dicts()
    joules = cell_energy(inp)
    marks = check_marks(inp)
    doubted = [r for r in compared(inp).to_dicts() if r["why"]]
    rows: list[dict[str, Any]] = []
    for r0 in sorted({(r["host"], r["tp"], r["workload"]) for r in levels}):
        part = [r for r in levels if (r["host"], r["tp"], r["workload"]) == r0]
        top_level = max(r["concurrency"] for r in part)
        at = [r for r in part if r["concurrency"] == top_level and r["throughput_tok_s"]]
        bad = {c for (h, c, t) in marks if h == r0[0] and t == r0[1]}
        # Never the fastest where its comparison with the baseline does not hold.
        unlike = {
            r["config"]: marked(inp, r["config"], r0[0], [r0[1]])
            for r in doubted
            if (r["host"], r["tp"], r["workload"]) == r0 and r["concurrency"] == top_level
        }
        at = [r for r in at if r["config"] not in bad | set(unlike)]
        if not at:
            continue
        top = max(at, key=lambda r: r["throughput_tok_s"])
        energy = joules.get((*r0[:2], "concurrency", r0[2], top_level, top["config"]), {})
        also = f"; {names(list(unlike.values()))} not comparable (Comparability)" if unlike else ""
        rows.append(
            {
                **top,
                **{k: energy.get(k) for k in ("j_per_token", "j_per_token_above_idle")},
                "label": label(inp, top["config"]),
                "marks": "one cell per level: no interval" + also,
            }
        )
    return rows


def _answer_tables(inp: Inputs) -> list[Table]:
    """The fastest config per scope: single-stream and agentic by decode tok/s, concurrency by
    cell throughput at its highest level; the host said once in the caption where there is
    one (a long name fits)."""
    out = []
    for rows, cols, caption in (
        (
            _answer_rows(inp),
            ANSWER_COLUMNS,
            "The fastest config per host, TP and workload by decode tok/s",
        ),
        (
            _load_rows(inp),
            LOAD_COLUMNS,
            "The fastest config under load per host, TP and workload: cell throughput at the "
            "highest concurrency level",
        ),
    ):
        if not rows:
            continue
        hosts = sorted({r["host"] for r in rows})
        where, lead = ("", cols) if len(hosts) > 1 else (f", on {hosts[0]}", cols[1:])
        full = [*lead, *C.with_energy(rows, *C.ENERGY), C.blank(0.26)]
        out.append(C.table(caption + where, full, rows, small=True))
    return out


def build(inp: Inputs, est: EstimateCheck | None) -> Section:
    st = inp.state
    sec = Section("Summary")
    if st.simulated:
        sec.add(
            Para(
                text(
                    "SIMULATED RESULTS: not measured on real hardware. These numbers come from "
                    f"the embedded simulated {adapter(SIMULATED_ENGINE).label} server; they "
                    "show how the report looks, not "
                    "how any config performs."
                ),
                "banner",
            )
        )
    base = baseline(inp)
    started = iso_utc(st.first_started_at) if st.first_started_at else "—"
    finished = iso_utc(st.finished_at) if st.finished_at else "—"
    n_req = requests(inp).height
    sec.add(
        Facts(
            [
                ("Campaign", text(code(st.campaign or inp.root.name))),
                ("Status", text(bold(status_text(inp)))),
                ("Cells", text(cells_text(inp))),
                ("Started / finished", text(f"{started} / {finished}")),
                (
                    "Requests counted",
                    text(f"{n_req:,} ({request_errors(inp):,} failed requests left out)"),
                ),
                (
                    "Baseline",
                    text(f"{label(inp, base)} (", code(base), ")") if base else text("none"),
                ),
                ("Plan hash", text(code(st.plan_hash or "—"))),
            ]
        )
    )
    lagged = [
        c.name for c in st.cells.values() if c.status == "done" and c.figures.get("client_lagged")
    ]
    if lagged:
        # Each name its own code span: the spaces between them stretch (a typewriter font's
        # do not), so a justified line of names can always be broken to fit.
        names: list[Any] = []
        for i, name in enumerate(lagged[:10]):
            names += [", "] if i else []
            names.append(code(name))
        sec.add(
            Para(
                text(
                    f"{len(lagged)} {'cell was' if len(lagged) == 1 else 'cells were'} measured "
                    "while the client's event loop lagged "
                    "past its threshold; their timings include the client's own delay: ",
                    *names,
                    " ..." if len(lagged) > 10 else "",
                ),
                "warning",
            )
        )
    stalled = [
        (c.name, stall_said({**c.figures}))
        for c in st.cells.values()
        if c.status == "done" and c.figures.get("stalled_requests")
    ]
    if stalled:
        sec.add(
            Para(
                text(
                    f"{len(stalled)} {'cell has' if len(stalled) == 1 else 'cells have'} "
                    f"requests far outside the rest (over {STALL_FACTOR:.0f}x the cell's median "
                    f"e2e, or a gap over {STALL_GAP_S:.0f} s in the stream: a server frozen or "
                    "paused?); they are counted, and each line gives the cell's decode rate "
                    "without them:"
                ),
                "warning",
            )
        )
        sec.add(
            Bullets(
                [text(code(name), ": ", said) for name, said in stalled[:10]]
                + ([text(f"... and {len(stalled) - 10} more")] if len(stalled) > 10 else [])
            )
        )
    deploy_table = deploy.table(inp)  # a concurrency sweep's answer comes first: Table 1
    if deploy_table is not None:
        sec.add(deploy_table)
    answers: list[Table | Para] = [*_answer_tables(inp)]
    if not answers:
        answers = [Para(text("No measured results yet."))]
    sec.add(*answers)
    failed = sorted(st.failed_checks(), key=lambda v: (v.host, v.tp, v.config))
    if failed:
        sec.add(
            Para(text(bold("Configs that failed a correctness check"), " (never ranked best):"))
        )
        sec.add(
            Bullets(
                [
                    text(f"{label(inp, v.config)}, TP {v.tp} on {v.host}: {v.check}: {v.text}")
                    for v in failed
                ]
            )
        )
    else:
        sec.add(Para(text("No config failed a correctness check.")))
    open_checks = sorted(inp.state.unchecked(), key=lambda v: (v.host, v.tp, v.config))
    if open_checks:
        sec.add(
            Para(
                text(
                    bold("Configs no correctness check covers"),
                    " (unchecked: never ranked best, their speed-ups not known to be of the "
                    "same answers):",
                )
            )
        )
        sec.add(
            Bullets(
                [
                    text(f"{label(inp, v.config)}, TP {v.tp} on {v.host}: {v.text}")
                    for v in open_checks
                ]
            )
        )
    probs = [p for p in problems(inp) if p["status"] == "failed"]
    if probs:
        sec.add(Para(text(bold(f"{len(probs)} cells failed"), " (all in 'Every planned cell'):")))
        sec.add(
            Bullets([text(code(p["name"]), f": {p['reason'] or 'no reason'}") for p in probs[:8]])
        )
        if len(probs) > 8:
            sec.add(Para(text(f"... and {len(probs) - 8} more.")))
    else:
        sec.add(Para(text("No cell failed.")))
    if est is not None and est.ratio is not None:
        off = est.ratio - 1.0
        line = (
            f"The dry-run estimate for the cells done and servers started was "
            f"{f.duration(est.done_estimated_s)}; they took {f.duration(est.done_actual_s)} "
            f"({est.ratio:.2f}x: the estimate was {abs(off):.0%} "
            f"{'low' if off > 0 else 'high'})."
        )
        if est.wall_s is not None:
            line += (
                f" The whole plan was estimated at {f.duration(est.planned_s)}; the campaign's "
                f"wall time was {f.duration(est.wall_s)}."
            )
        sec.add(Para(text(bold("Estimate. "), line)))
        if est.kinds:
            sec.add(
                Table(
                    "Dry-run estimate against the time taken, by workload kind",
                    [
                        Column("Kind", "l"),
                        Column("Cells done"),
                        Column("Estimated"),
                        Column("Took"),
                        Column("Took / estimated"),
                    ],
                    [
                        [
                            Cell(k.kind),
                            Cell(str(k.cells)),
                            Cell(f.duration(k.estimated_s)),
                            Cell(f.duration(k.actual_s)),
                            Cell(f.fnum(k.ratio, 2, "x")),
                        ]
                        for k in est.kinds
                    ]
                    + [
                        [
                            Cell("server start-up (mean)"),
                            Cell("—"),
                            Cell(f.duration(est.startup_estimated_s)),
                            Cell(f.duration(est.startup_actual_s)),
                            Cell(
                                f.fnum(
                                    (est.startup_actual_s / est.startup_estimated_s)
                                    if est.startup_actual_s and est.startup_estimated_s
                                    else None,
                                    2,
                                    "x",
                                )
                            ),
                        ]
                    ],
                    small=True,
                )
            )
    seed = seed_estimate(inp)
    if seed:
        sec.add(
            Para(
                text(
                    "To seed the next dry run's estimate with what this campaign measured (in "
                    "real time), put this in the plan's ",
                    code("[estimate]"),
                    " table:",
                )
            )
        )
        sec.add(Facts([(k, text(code(f"{k} = {v}"))) for k, v in seed.items()]))
    if inp.notes:
        sec.add(Para(text(bold("Missing or partial data:"))))
        sec.add(Bullets([text(n) for n in inp.notes]))
    return sec

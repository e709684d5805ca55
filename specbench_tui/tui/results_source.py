"""Where the console's results table comes from: the report's own comparison frame
(``report.frames.comparison``), through this one adapter, so the live table and the report
can never disagree.

``comparison(root)`` is the only call into ``specbench_tui.report``. It returns one row per
(host, TP, workload kind, workload, concurrency level, config) with the columns in
``COLUMNS``: the report's figures under the names the pane shows. ``tok_s`` is decode tok/s
(TTFT excluded, token-weighted within each repeat), the mean over repeats with its 95%
interval; ``speedup`` is its ratio to the baseline's at the same point, with Fieller's
interval (``speedup_too_few``: too few repeats to bound it); ``accept`` is the accept length as
the engine defines it, what its own counters give; ``best`` is the report's (fastest, and
told apart from the runner-up). No textual import: it runs in a worker thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from specbench_tui.report.frames import comparison as report_comparison
from specbench_tui.report.inputs import load_inputs
from specbench_tui.report.stats import TOO_FEW

__all__ = ["COLUMNS", "TOO_FEW", "comparison", "empty"]

COLUMNS: dict[str, pl.DataType | type[pl.DataType]] = {
    "host": pl.String,
    "tp": pl.Int64,
    "workload": pl.String,
    "prompt_set": pl.String,
    "max_tokens": pl.Int64,
    "config": pl.String,
    "label": pl.String,
    "baseline": pl.Boolean,
    "repeats": pl.Int64,  # units behind the interval: repeats, or runs where ``runs``
    "runs": pl.Boolean,  # the units are the plan's runs (a fresh server each), not repeats
    "requests": pl.Int64,
    "tok_s": pl.Float64,  # decode tok/s (token-weighted per repeat), mean over repeats
    "tok_s_lo": pl.Float64,
    "tok_s_hi": pl.Float64,
    "speedup": pl.Float64,
    "speedup_lo": pl.Float64,
    "speedup_hi": pl.Float64,
    "speedup_too_few": pl.Boolean,  # too few repeats to bound the speed-up
    "accept": pl.Float64,  # accept length as the engine defines it (its counters' figure)
    "accept_mean": pl.Float64,  # the plain mean of the requests' accept lengths
    "failed_check": pl.String,  # why the config failed a correctness check, null if it did not
    "unchecked": pl.String,  # why no verdict covers its outputs (never best), null if one does
    "best": pl.Boolean,  # fastest at its point, and distinguishable from the runner-up
}


def empty() -> pl.DataFrame:
    return pl.DataFrame(schema=COLUMNS)


def comparison(root: Path) -> pl.DataFrame:
    """The comparison table of the results directory ``root`` (see the module docstring)."""
    frame = report_comparison(load_inputs(root))
    if frame.height == 0:
        return empty()
    rows: list[dict[str, Any]] = []
    for r in frame.to_dicts():
        level = r.get("concurrency") or 0
        rows.append(
            {
                "host": r["host"],
                "tp": r["tp"],
                "workload": r["workload"],
                "prompt_set": f"c{level}" if r["kind"] == "concurrency" else r["kind"],
                "max_tokens": None,
                "config": r["config"],
                "label": r["label"],
                "baseline": r["baseline"],
                "repeats": r["n"],
                "runs": bool(r["between_runs"]),
                "requests": r["requests"],
                "tok_s": r["decode_tok_s"],
                "tok_s_lo": r["decode_tok_s_lo"],
                "tok_s_hi": r["decode_tok_s_hi"],
                "speedup": r["speedup"],
                "speedup_lo": r["speedup_lo"],
                "speedup_hi": r["speedup_hi"],
                "speedup_too_few": bool(r["speedup_too_few"]),
                "accept": r["accept_len_weighted"],
                "accept_mean": r["accept_len_mean"],
                "failed_check": (r["check_reason"] or "failed a check")
                if r["failed_check"]
                else None,
                "unchecked": (r["check_reason"] or "unchecked") if r["unchecked"] else None,
                "best": bool(r["best"]),
            }
        )
    return pl.DataFrame(rows, schema=COLUMNS)

"""The table a user deploys from: per host, TP size, concurrency workload and level, the
config to run there, "cannot tell", or "speculation off" where none beats the baseline. It
is the report's Table 1 when the plan sweeps concurrency levels.

Each level is its own question (speculation that pays at one client can cost at 32): the
answer is the per-level argmax over every config of the plan, every draft length and
budget of a parametrized one included, by the figure the report ranks with an interval
(decode tok/s, ``frames.rank_decode``), among the configs that passed their
correctness checks and compare like with like with the baseline. It names a config where
that config's speed-up interval lies above 1 (saying whether it is told apart from the
runner-up, or which configs it cannot be told apart from); "cannot tell" where the fastest
config's interval reaches 1, too few units give none, or every config is left out;
"speculation off" where no config decoded faster than the baseline.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from specbench_tui.report.blocks import Cell, Table
from specbench_tui.report.frames import marked
from specbench_tui.report.sections import columns as C
from specbench_tui.report.sections.common import compared, names

#: The answer where no speculative config decoded faster than the baseline.
OFF = "speculation off"
#: The answer where one did, but not beyond its interval (or with too few units for one).
CANNOT_TELL = "cannot tell"


#: The deploy table's columns after the host (said in the caption where there is one).
COLUMNS = (
    C.TP,
    C.WORKLOAD,
    C.CLIENTS,
    C.Col("deploy", "Deploy", lambda r: Cell(r["said"], bold=r["best"]), "l"),
    C.DECODE_CI,
    C.SPEEDUP_CI,
)


#: The deploy table's CSV: the answer by config name, its figures unformatted.
CSV_FIELDS = ("host", "tp", "workload", "level", "deploy", "decode_tok_s", "speedup")
CSV_FIELDS += ("speedup_lo", "speedup_hi", "why")


def _answer(items: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, str, str]:
    """What to deploy at one level: the row (None: none), what the Deploy column says, and
    why, in words."""
    ok = [
        r
        for r in items
        if not (r["failed_check"] or r["unchecked"] or r["untimed"] or r["why"])
        and r["decode_tok_s"] is not None
    ]
    left_out = [r["label"] for r in items if r not in ok and not r["baseline"]]
    also = f"; {names(left_out)} left out (check or comparability)" if left_out else ""
    if not any(not r["baseline"] for r in ok):
        return None, CANNOT_TELL, f"no config to compare with the baseline{also}"
    ahead = [r for r in ok if not r["baseline"] and (r["speedup"] or 0.0) > 1.0]
    if not ahead:
        return None, OFF, f"no config decoded faster than the baseline{also}"
    top = max(ahead, key=lambda r: r["decode_tok_s"])
    n = top["n"]
    if top["speedup_lo"] is None:
        return top, CANNOT_TELL, f"{top['label']} ahead, but n={n} gives no interval{also}"
    if top["speedup_lo"] <= 1.0:
        return top, CANNOT_TELL, f"{top['label']} not told apart from the baseline (n={n}){also}"
    if top["best"]:
        return top, top["label"], f"told apart from the runner-up (n={n}){also}"
    tied = [r["label"] for r in ok if r["top_tie"] and r is not top and not r["baseline"]]
    if tied:
        return top, top["label"], f"cannot be told apart from {names(tied)} (n={n}){also}"
    return top, top["label"], f"the only config above the baseline (n={n}){also}"


def swept(inp: Any) -> bool:
    """Whether the campaign ran a concurrency workload at several levels."""
    cmp = compared(inp).filter(pl.col("kind") == "concurrency")
    if cmp.height == 0:
        return False
    levels = cmp.group_by("host", "tp", "workload").agg(pl.col("concurrency").n_unique())
    return bool((levels["concurrency"] > 1).any())


def table(inp: Any) -> Table | None:
    """The deploy table (module docstring), or None without a concurrency sweep."""
    if not swept(inp):
        return None
    cmp = compared(inp).filter(pl.col("kind") == "concurrency")
    scopes: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in cmp.to_dicts():
        r["label"] = marked(inp, r["config"], r["host"], [r["tp"]])  # its check mark with it
        scopes.setdefault((r["host"], r["tp"], r["workload"], r["concurrency"]), []).append(r)
    hosts = {k[0] for k in scopes}
    rows: list[dict[str, Any]] = []
    for (host, tp, workload, level), items in sorted(scopes.items()):
        top, said, why = _answer(items)
        named = said not in (OFF, CANNOT_TELL) and top is not None
        rows.append(
            {
                **(top or {}),
                "host": host,
                "tp": tp,
                "workload": workload,
                "concurrency": level,
                "said": said,
                "level": level,
                "deploy": top["config"] if named and top else said,
                "why": why,
                "best": named and bool(top and top["best"]),
                "speedup_too_few": False,
                "marks": why,
            }
        )
    where = f", on {next(iter(hosts))}" if len(hosts) == 1 else ""
    cols = [*([C.HOST] if len(hosts) > 1 else []), *COLUMNS, C.blank(0.3)]
    return C.table(
        "What to deploy per TP size and concurrency level: the fastest config by decode tok/s "
        "where its speed-up's interval lies above 1; speculation off where none "
        "decoded faster than the baseline "
        f"(every draft length and budget of the plan compared at each level){where}",
        cols,
        rows,
        small=True,
        csv_fields=CSV_FIELDS,
    )

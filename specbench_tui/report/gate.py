"""The regression gate (``--report OLD NEW --fail-on-regression PCT``): campaign NEW against
campaign OLD as pass or fail, for a pull request's CI.

The rows are ``--report A B``'s (report/compare.py ``matched``: the same TP, workload kind,
workload, level and config, and host where the campaigns share host names), and so is the
noise test (compare.py ``noise_verdict``: Welch on the units of the two campaigns, Fieller's
interval on the ratio). Each row present in both campaigns is judged on three figures:

- **decode tok/s**: its mean over units, tested as ``--report A B`` tests it;
- **accept length**: the figure the report shows (``accept_len_weighted``), tested on the mean
  of the units' accept lengths (the same test, over the same units);
- **speed-up**: over the baseline in the same scope; beyond noise where the config's decode
  tok/s fell, or its baseline's rose, beyond noise (the test of each, above).

A figure **regressed** where NEW's value is below OLD's beyond noise and by more than PCT
percent; then the gate fails (exit 1). Where either campaign had a single run, noise is known
only within a run (the repeats of one server start): the gate still gates, and says "within-run
noise only" on the row. A row with too few units (a concurrency level of one run is one cell)
has no noise test and never fails. A row that the comparability audit (report/comparability.py)
marks not comparable in either campaign is not gated, with the audit's reasons; a row in one
campaign only is listed, not gated.

``Gate.to_json()``, the verdict as one object (``--json``):

- ``regressed`` (bool): some figure regressed (exit 1); ``threshold_pct``: PCT;
- ``compared``: figures gated (rows x figures, not comparable ones left out);
- ``rows``: one per figure of each row in both campaigns: ``config``, ``host`` (``a/b`` where
  the campaigns ran on different hosts), ``tp``, ``kind``, ``workload``, ``level`` (clients of
  a concurrency row, else 0), ``figure`` ("speed-up" | "accept length" | "decode tok/s"),
  ``old``, ``new``, ``change_pct`` (NEW over OLD, minus 1, in percent), ``beyond_noise``
  (bool), ``noise`` ("between-run" | "within-run"), ``test`` (the noise test's words, as
  ``--report A B`` prints them), ``verdict`` ("regressed" | "ok" | "not comparable"), ``why``
  (the audit's reasons where not comparable, else null);
- ``only_old``, ``only_new``: the rows in one campaign only: ``config``, ``host``, ``tp``,
  ``kind``, ``workload``, ``level``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from specbench_tui.report import format as f
from specbench_tui.report.compare import match_keys, matched, noise_verdict
from specbench_tui.report.frames import SCOPE, requests, unit_moments
from specbench_tui.report.inputs import Inputs, load_inputs
from specbench_tui.report.sections.common import compared
from specbench_tui.report.stats import Mean, from_moments

SPEEDUP, ACCEPT, DECODE = "speed-up", "accept length", "decode tok/s"
_SHOW = {SPEEDUP: f.speedup, ACCEPT: f.accept, DECODE: f.toks}


@dataclass(frozen=True)
class GateRow:
    """One figure of one row present in both campaigns."""

    config: str
    host: str
    tp: int
    kind: str
    workload: str
    level: int
    figure: str
    old: float
    new: float
    change_pct: float | None
    beyond_noise: bool
    noise: str  # "between-run" | "within-run"
    test: str
    verdict: str  # "regressed" | "ok" | "not comparable"
    why: str | None = None

    def where(self) -> str:
        return _where(vars(self))

    def line(self) -> str:
        show = _SHOW[self.figure]
        change = "" if self.change_pct is None else f" ({self.change_pct:+.1f}%)"
        if _untested(self.test):
            noise = f"no noise test ({self.test or 'no interval'})"
        else:
            noise = ("beyond noise" if self.beyond_noise else "within noise") + (
                " between runs" if self.noise == "between-run" else " (within-run noise only)"
            )
        return (
            f"{self.where()}: {self.figure} {show(self.old)} -> {show(self.new)}{change}, {noise}"
        )


@dataclass(frozen=True)
class Gate:
    """The gate's verdict on NEW against OLD."""

    threshold_pct: float
    rows: list[GateRow]
    only_old: list[dict[str, Any]] = field(default_factory=list)
    only_new: list[dict[str, Any]] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        return any(r.verdict == "regressed" for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "regressed": self.regressed,
            "threshold_pct": self.threshold_pct,
            "compared": sum(r.verdict != "not comparable" for r in self.rows),
            "rows": [asdict(r) for r in self.rows],
            "only_old": self.only_old,
            "only_new": self.only_new,
        }

    def lines(self) -> list[str]:
        """The verdict as text: each regressed figure, each row not gated, and last a line
        that says pass or fail."""
        pct = f"{self.threshold_pct:g}%"
        bad = [r for r in self.rows if r.verdict == "regressed"]
        out = [f"regressed: {r.line()}" for r in bad]
        unlike = {r.where(): r.why for r in self.rows if r.verdict == "not comparable"}
        out += [f"not gated: not comparable ({why}): {where}" for where, why in unlike.items()]
        for side, alone in (("OLD", self.only_old), ("NEW", self.only_new)):
            out += [f"not gated: only in {side}: {_where(r)}" for r in alone]
        gated = [r for r in self.rows if r.verdict != "not comparable"]
        count = (
            f"{f.plural(len(gated), 'figure')} of "
            f"{f.plural(len({r.where() for r in gated}), 'row')} compared"
        )
        untested = sum(_untested(r.test) for r in gated)
        if untested:
            count += f", {untested} without a noise test"
        if any(r.noise == "within-run" for r in gated):
            count += "; within-run noise only where a campaign had one run"
        if bad:
            out.append(
                f"REGRESSION: {f.plural(len(bad), 'figure')} lower beyond noise and by more "
                f"than {pct} ({count})"
            )
        else:
            out.append(f"no regression beyond noise and {pct} ({count})")
        return out


def _where(r: dict[str, Any]) -> str:
    level = f", {r['level']} clients" if r["kind"] == "concurrency" else ""
    return f"{r['config']} on {r['host']}, TP {r['tp']}, {r['workload']}{level}"


def gate_frame(inp: Inputs) -> pl.DataFrame:
    """A campaign's comparison frame (its report's, and ``--report A B``'s) with the accept
    length's moments over its units beside it: ``accept_unit`` (the mean over units of each
    unit's mean accept length), ``accept_unit_sd``, ``accept_unit_n``."""
    frame = compared(inp)
    keys = [*SCOPE, "config"]
    df = requests(inp)
    moments = unit_moments(df, keys, value="accept_length") if df.height else None
    if moments is None or moments.height == 0:
        return frame.with_columns(
            pl.lit(None, pl.Float64).alias("accept_unit"),
            pl.lit(None, pl.Float64).alias("accept_unit_sd"),
            pl.lit(None, pl.Int64).alias("accept_unit_n"),
        )
    acc = moments.select(
        *(pl.col(k).cast(frame.schema[k]) for k in keys),
        pl.col("mean").alias("accept_unit"),
        pl.col("sd").alias("accept_unit_sd"),
        pl.col("n").cast(pl.Int64).alias("accept_unit_n"),
    )
    return frame.join(acc, on=keys, how="left")


def gate_dirs(old: Path, new: Path, pct: float) -> Gate:
    """:func:`gate` of two results directories."""
    return gate(gate_frame(load_inputs(old)), gate_frame(load_inputs(new)), pct)


def gate(old: pl.DataFrame, new: pl.DataFrame, pct: float) -> Gate:
    """NEW's figures against OLD's (frames of :func:`gate_frame`), each figure failing where
    it is lower beyond noise and by more than ``pct`` percent."""
    keys = match_keys([old, new])
    rows, alone = matched([old, new], keys)
    bases = {_scope(e): e["rows"] for e in rows if e["rows"][0]["baseline"]}
    out: list[GateRow] = []
    for e in rows:
        o, n = e["rows"]
        head = {
            "config": str(o["config"]),
            "host": "/".join(sorted({str(o["host"]), str(n["host"])})),
            "tp": o["tp"],
            "kind": o["kind"],
            "workload": o["workload"],
            "level": o["concurrency"] or 0,
        }
        why = "; ".join(
            f"{side}: {r['why'] or 'not comparable'}"
            for side, r in (("OLD", o), ("NEW", n))
            if r["comparable"] is False
        )
        for figure, old_v, new_v, (beyond, test) in _figures(o, n, bases.get(_scope(e))):
            change = (new_v / old_v - 1) * 100 if old_v > 0 else None
            if why:
                verdict = "not comparable"
            elif beyond and change is not None and change < -pct:
                verdict = "regressed"
            else:
                verdict = "ok"
            across = all(bool(r.get("between_runs")) for r in (o, n))
            out.append(
                GateRow(
                    **head,
                    figure=figure,
                    old=old_v,
                    new=new_v,
                    change_pct=change,
                    beyond_noise=beyond,
                    noise="between-run" if across else "within-run",
                    test=test,
                    verdict=verdict,
                    why=why or None,
                )
            )
    only: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
    for e in alone:
        side = 0 if e["rows"][0] is not None else 1
        r = e["rows"][side]
        only[side].append(
            {
                "config": r["config"],
                "host": r["host"],
                "tp": r["tp"],
                "kind": r["kind"],
                "workload": r["workload"],
                "level": r["concurrency"] or 0,
            }
        )
    return Gate(pct, out, *only)


def _scope(entry: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(v for k, v in entry["key"].items() if k != "config")


def _decode(r: dict[str, Any]) -> Mean:
    return from_moments(r["decode_tok_s"], r["decode_tok_s_sd"], r["n"])


def _untested(words: str) -> bool:
    """The noise test had no interval to judge by (one unit a side, or no ratio)."""
    return words in ("", "too few units", "single run")


def _figures(
    o: dict[str, Any], n: dict[str, Any], base: list[dict[str, Any]] | None
) -> list[tuple[str, float, float, tuple[bool, str]]]:
    """Each figure both rows have: its name, OLD's and NEW's value, and the noise test's
    (whether it differs beyond noise, and the test's words)."""
    got = []
    timed = not o["untimed"] and not n["untimed"]
    words, ratio = noise_verdict(o, n, _decode(o), _decode(n)) if timed else ("", None)
    decode = (bool(ratio and ratio.beyond_one), words)
    if timed and not o["baseline"] and o["speedup"] is not None and n["speedup"] is not None:
        # Lower beyond noise where the config's decode tok/s fell, or its baseline's rose.
        fell = decode[0] and ratio is not None and ratio.value < 1
        test = words
        bo, bn = base or (None, None)
        if bo is not None and bn is not None and not bo["untimed"] and not bn["untimed"]:
            b_words, b_ratio = noise_verdict(bo, bn, _decode(bo), _decode(bn))
            fell = fell or bool(b_ratio and b_ratio.beyond_one and b_ratio.value > 1)
            if not (_untested(words) and _untested(b_words)):
                test = f"decode tok/s {words}, its baseline's {b_words}"
        got.append((SPEEDUP, o["speedup"], n["speedup"], (fell, test)))
    if o["accept_len_weighted"] is not None and n["accept_len_weighted"] is not None:
        a_words, a_ratio = "", None
        if o.get("accept_unit") is not None and n.get("accept_unit") is not None:
            a_words, a_ratio = noise_verdict(
                o,
                n,
                from_moments(o["accept_unit"], o["accept_unit_sd"], o["accept_unit_n"]),
                from_moments(n["accept_unit"], n["accept_unit_sd"], n["accept_unit_n"]),
            )
        accept = (bool(a_ratio and a_ratio.beyond_one), a_words)
        got.append((ACCEPT, o["accept_len_weighted"], n["accept_len_weighted"], accept))
    if timed:
        got.append((DECODE, o["decode_tok_s"], n["decode_tok_s"], decode))
    return got

"""Where a speed-up comes from: the forced-acceptance sweep beside real acceptance.

A config's speed-up over the baseline is its accept length (tokens a verify step yields: the
drafter's quality) over its step cost (a speculative step's time over an autoregressive step's:
the system's). A forced sweep (``forced_accept``) pins the accept length and measures the
speed-up each length buys on the same server: the system-cost curve. The real campaign's
measured accept length, placed on that curve (linear interpolation between the two forced
lengths around it), gives the speed-up the system would deliver at that acceptance; beside the
measured speed-up, it tells drafter quality from verify cost.

Forced rows are kept apart from real ones (``Inputs.forced_requests``): they are compared with
the baseline here by the same frame as every table (``frames.comparison``), on a view that
holds both, and nowhere else. Greedy equivalence is not judged on forced cells.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import polars as pl

from specbench_tui.bench.figures import figure_axis, figure_title
from specbench_tui.bench.forced import CHECK, FORCED_TOLERANCE
from specbench_tui.report import format as f
from specbench_tui.report.blocks import (
    Bullets,
    Cell,
    Chart,
    Charts,
    Para,
    Point,
    Section,
    Series,
    Table,
    text,
)
from specbench_tui.report.frames import comparison, label, ran_adapters
from specbench_tui.report.inputs import Inputs
from specbench_tui.report.sections import columns as C
from specbench_tui.report.sections.common import FIELLER_BARS, interval_bars, speedup_cell

TITLE = "Forced acceptance: where the speed-up comes from"
#: Scope of one curve: a workload at one level on one host and TP size.
_SCOPE = ("host", "tp", "kind", "workload", "concurrency")


def real_config(config: str, forced: float) -> str:
    """The real-acceptance config a forced one was made from (``NAME-fa<value>``, the name
    ``plan/configs.py`` gives it)."""
    suffix = f"-fa{forced:g}"
    return config[: -len(suffix)] if config.endswith(suffix) else config


def _both(inp: Inputs) -> pl.DataFrame:
    """The comparison frame over real and forced rows together (speed-ups against the same
    baseline rows), for this section only."""
    assert inp.forced_requests is not None
    both = replace(
        inp,
        requests=pl.concat([inp.requests, inp.forced_requests], how="diagonal_relaxed"),
        config_order=[*inp.config_order, *inp.forced],
        forced={},
        cache={},
    )
    return comparison(both)


def interpolate(curve: list[dict[str, Any]], x: float) -> dict[str, Any] | None:
    """The speed-up the curve predicts at accept length ``x``: linear between the two forced
    points around it, its interval bounds interpolated the same way (None where either point
    has none); None outside the forced range."""
    pts = sorted(curve, key=lambda p: p["forced"])
    for a, b in itertools.pairwise(pts):
        if a["forced"] <= x <= b["forced"]:
            w = (x - a["forced"]) / (b["forced"] - a["forced"])
            break
    else:
        exact = [p for p in pts if abs(p["forced"] - x) < 1e-9]
        if not exact:
            return None
        a = b = exact[0]
        w = 0.0

    def mix(key: str) -> float | None:
        if a[key] is None or b[key] is None:
            return None
        return (1 - w) * a[key] + w * b[key]

    return {"speedup": mix("speedup"), "lo": mix("speedup_lo"), "hi": mix("speedup_hi")}


def build(inp: Inputs) -> Section | None:
    if not inp.forced:
        return None
    if inp.forced_requests is None or inp.forced_requests.height == 0:
        return _none_finished(inp)
    rows = _both(inp).to_dicts()
    real = {
        tuple(r[k] for k in (*_SCOPE, "config")): r for r in rows if r["config"] not in inp.forced
    }
    curves: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        if r["config"] in inp.forced:
            forced = inp.forced[r["config"]]
            key = (*(r[k] for k in _SCOPE), real_config(r["config"], forced))
            curves.setdefault(key, []).append({**r, "forced": forced})
    sec = Section(TITLE)
    sec.add(Para(text(_intro(inp))))
    sec.add(Para(text(_NOT_JUDGED), kind="warning"))
    sec.add(_check_table(inp, curves))
    for host, tp in sorted({(k[0], k[1]) for k in curves}):
        keys = sorted(k for k in curves if (k[0], k[1]) == (host, tp))
        sec.add(_curve_table(inp, host, tp, keys, curves, real))
        sec.add(_chart(inp, host, tp, keys, curves, real))
        sec.add(_decomposition(inp, host, tp, keys, curves, real))
    return sec


def _none_finished(inp: Inputs) -> Section:
    """Forced configs planned, no forced row measured: say so, with why their cells ended
    (an engine that refuses the knob fails its server's start)."""
    why: dict[str, str] = {}
    for c in inp.state.cells.values():
        if c.config in inp.forced and c.reason:
            why.setdefault(c.config, c.reason)
    names = ", ".join(label(inp, n) for n in inp.forced)
    sec = Section(TITLE).add(
        Para(text(f"No forced-acceptance cell measured anything ({names}), so there is no curve."))
    )
    if why:
        sec.add(Bullets([text(f"{label(inp, n)}: {r}") for n, r in sorted(why.items())]))
    return sec


def _intro(inp: Inputs) -> str:
    """:data:`_INTRO`, naming the knob of each engine this campaign ran (its adapter's
    ``forced_accept_knob``)."""
    knobs = ", ".join(
        f"{a.label}'s {a.forced_accept_knob}" for a in ran_adapters(inp) if a.forced_accept_knob
    )
    return _INTRO.replace(" {knobs}", f" ({knobs})" if knobs else "")


_INTRO = (
    "Each forced config ran its real config's server with the engine made to accept a set "
    "number of tokens per verify step whatever the drafter proposed {knobs}: its speed-up "
    "over the baseline, in the same host, TP, workload and level, is what that accept "
    "length buys on this system, the system-cost curve. The real config's measured accept "
    "length is placed on the curve by linear interpolation between the two forced lengths "
    "around it; the predicted speed-up's interval is interpolated from theirs. Speed-up = "
    "accept length / step cost (a speculative step's time over an autoregressive step's): "
    "the drafter sets the accept length, the system the step cost. Measured over predicted "
    "below 1: real acceptance costs more than its mean says (its spread, or drafting that "
    "forced runs skip); near 1: the curve explains the speed-up. Forced rows are reported "
    "here only, never pooled with real-acceptance rows."
)
_NOT_JUDGED = (
    "Greedy equivalence is not judged on forced cells: their engine accepts drafts whatever "
    "the target model says, so their outputs are not meant to equal the baseline's. Each "
    "forced config is checked instead for the accept length it measured: more than "
    f"{FORCED_TOLERANCE:.0%} from the forced value fails its check (a knob the engine ignored)."
)


#: The check table: each forced config's forced against measured accept length.
WHERE = C.field("workload", "Workload", align="l", at="where")
CHECK_COLUMNS = (
    C.field("config", "Forced config", align="l", at="label"),
    C.TP,
    WHERE,
    C.field("forced_accept", "Forced", f.accept),
    C.field("accept_length", "Measured", f.accept),
    C.Col("check", "Check", lambda r: Cell(r["check"], bold=r["check"] == "fail"), "l"),
)


def _check_table(inp: Inputs, curves: dict[tuple[Any, ...], list[dict[str, Any]]]) -> Table:
    """Forced against measured accept length per forced config, TP and workload."""
    rows = []
    for key in sorted(curves):
        host, tp, _, workload, level = key[:5]
        for p in sorted(curves[key], key=lambda p: p["forced"]):
            v = inp.state.checks.get((CHECK, host, p["config"], tp))
            rows.append(
                {
                    "host": host,
                    "tp": tp,
                    "workload": workload,
                    "where": f"{workload} ({level} clients)" if level else workload,
                    "concurrency": level,
                    "config": p["config"],
                    "label": label(inp, p["config"]),
                    "forced_accept": p["forced"],
                    "accept_length": p["accept_len_weighted"],
                    "check": v.status if v is not None else "not checked",
                }
            )
    fields = ["host", "tp", "workload", "concurrency", "config", "forced_accept"]
    caption = "Forced against measured accept length"
    return C.table(caption, CHECK_COLUMNS, rows, [*fields, "accept_length", "check"], small=True)


#: The curve table: each forced length's speed-up, and the real config's point (bold).
CURVE_COLUMNS = (
    C.CONFIG,
    WHERE,
    C.Col("acceptance", "Acceptance", lambda r: Cell(r["said"], bold=r["real"]), "l"),
    C.Col(
        "accept_length",
        figure_title("accept_length"),
        lambda r: Cell(f.accept(r["accept_length"]), bold=r["real"]),
    ),
    C.Col("speedup_ci", figure_title("speedup", ci=True), lambda r: _bold(speedup_cell(r), r)),
)
_CURVE_CSV = ["host", "tp", "workload", "concurrency", "config", "acceptance", "forced_accept"]
_CURVE_CSV += ["accept_length", "speedup", "speedup_lo", "speedup_hi"]


def _bold(cell: Cell, r: dict[str, Any]) -> Cell:
    return Cell(cell.text, bold=r["real"])


def _curve_table(
    inp: Inputs,
    host: str,
    tp: int,
    keys: list[tuple[Any, ...]],
    curves: dict[tuple[Any, ...], list[dict[str, Any]]],
    real: dict[tuple[Any, ...], dict[str, Any]],
) -> Table:
    """The curve's points, and the real config's point, per config and workload."""
    rows = []
    for key in keys:
        where = f"{key[3]} ({key[4]} clients)" if key[4] else key[3]
        points = [(p, p["forced"]) for p in sorted(curves[key], key=lambda p: p["forced"])]
        points += [(real[key], None)] if key in real else []
        for r, forced in points:
            rows.append(
                {
                    **{k: r[k] for k in ("speedup", "speedup_lo", "speedup_hi")},
                    "speedup_too_few": r["speedup_too_few"],
                    "host": key[0],
                    "tp": key[1],
                    "workload": key[3],
                    "where": where,
                    "concurrency": key[4],
                    "config": key[5],
                    "label": label(inp, key[5]),
                    "real": forced is None,
                    "acceptance": "real" if forced is None else "forced",
                    "said": "real" if forced is None else f"forced {f.accept(forced)}",
                    "forced_accept": forced,
                    "accept_length": r["accept_len_weighted"],
                }
            )
    caption = f"Speed-up against forced accept length, TP {tp} on {host}"
    return C.table(caption, CURVE_COLUMNS, rows, _CURVE_CSV, small=True)


def _chart(
    inp: Inputs,
    host: str,
    tp: int,
    keys: list[tuple[Any, ...]],
    curves: dict[tuple[Any, ...], list[dict[str, Any]]],
    real: dict[tuple[Any, ...], dict[str, Any]],
) -> Charts:
    """The curves (forced accept length against speed-up, one line per config and workload)
    and each real config's measured point, on one chart."""
    series = []
    for i, key in enumerate(keys):
        name = f"{label(inp, key[5])}, {key[3]}" + (f" c{key[4]}" if key[4] else "")
        pts = [
            Point(p["forced"], p["speedup"], p["speedup_lo"], p["speedup_hi"])
            for p in sorted(curves[key], key=lambda p: p["forced"])
            if p["speedup"] is not None
        ]
        series.append(Series(f"{name} (forced)", pts, color=i))
        r = real.get(key)
        if r is not None and r["speedup"] is not None and r["accept_len_weighted"] is not None:
            point = Point(r["accept_len_weighted"], r["speedup"], r["speedup_lo"], r["speedup_hi"])
            series.append(Series(f"{name} (real)", [point], color=i, dashed=True))
    return Charts(
        [
            Chart(
                title=f"Speed-up against accept length, TP {tp} on {host}",
                kind="lines",
                xlabel=f"{figure_axis('accept_length')} (tokens per verify step)",
                ylabel=f"{figure_axis('speedup')} over the baseline",
                series=series,
                hline=1.0,
                wide=True,
                bars=interval_bars(
                    FIELLER_BARS,
                    [p.get("n") for k in keys for p in curves[k]]
                    + [r.get("n") for r in real.values()],
                ),
            )
        ]
    )


_STEP_COST = (
    "Step cost: a speculative step's time over an autoregressive step's, the accept length "
    "over the speed-up (measured: the real speed-up's; curve: the predicted one's)."
)


#: Drafter quality against verify cost: the predicted speed-up beside the measured one.
DECOMPOSITION_COLUMNS = (
    C.CONFIG,
    WHERE,
    C.figure("accept_length", f.accept, scope="drafter"),
    C.Col(
        "predicted_speedup_ci",
        figure_title("speedup", scope="predicted", ci=True),
        lambda r: Cell(f.ratio(r["predicted_speedup"], r["predicted_lo"], r["predicted_hi"])),
    ),
    C.Col("speedup_ci", figure_title("speedup", scope="measured", ci=True), speedup_cell),
    C.field("step_cost", "Step cost (measured)", lambda v: f.fnum(v, 2)),
    C.field("step_cost_on_curve", "Step cost (curve)", lambda v: f.fnum(v, 2)),
    C.field("measured_over_predicted", "Measured / predicted", lambda v: f.fnum(v, 2)),
)
_DECOMPOSITION_CSV = ["host", "tp", "workload", "concurrency", "config", "accept_length"]
_DECOMPOSITION_CSV += ["predicted_speedup", "predicted_lo", "predicted_hi", "speedup"]
_DECOMPOSITION_CSV += ["speedup_lo", "speedup_hi", "step_cost", "step_cost_on_curve"]
_DECOMPOSITION_CSV += ["measured_over_predicted"]


def _decomposition(
    inp: Inputs,
    host: str,
    tp: int,
    keys: list[tuple[Any, ...]],
    curves: dict[tuple[Any, ...], list[dict[str, Any]]],
    real: dict[tuple[Any, ...], dict[str, Any]],
) -> Table:
    """Per config and workload: drafter quality (the measured accept length), verify cost
    (step cost, measured and on the curve), the predicted speed-up beside the measured one."""
    rows, notes = [], []
    for key in keys:
        r = real.get(key)
        if r is None or r["accept_len_weighted"] is None:
            continue
        al = r["accept_len_weighted"]
        lengths = [p["forced"] for p in curves[key]]
        pred = interpolate(curves[key], al) or {}
        where = f"{key[3]} ({key[4]} clients)" if key[4] else key[3]
        if not pred:
            notes.append(
                f"{label(inp, key[5])}, {where}: its accept length {f.accept(al)} is outside "
                f"the forced range {f.accept(min(lengths))}-{f.accept(max(lengths))}: no "
                "prediction (add a forced value beyond it)"
            )
        s, sp = r["speedup"], pred.get("speedup")
        rows.append(
            {
                **{k: r[k] for k in ("speedup", "speedup_lo", "speedup_hi", "speedup_too_few")},
                "host": host,
                "tp": tp,
                "workload": key[3],
                "where": where,
                "concurrency": key[4],
                "config": key[5],
                "label": label(inp, key[5]),
                "accept_length": al,
                "predicted_speedup": sp,
                "predicted_lo": pred.get("lo"),
                "predicted_hi": pred.get("hi"),
                "step_cost": al / s if s else None,
                "step_cost_on_curve": al / sp if sp else None,
                "measured_over_predicted": s / sp if s and sp else None,
            }
        )
    caption = f"Drafter quality against verify cost, TP {tp} on {host}"
    notes.append(_STEP_COST)
    return C.table(
        caption, DECOMPOSITION_COLUMNS, rows, _DECOMPOSITION_CSV, notes=notes, small=True
    )

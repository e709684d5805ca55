"""GPU telemetry per service group, on the group's own GPUs: busy (while its cells ran) apart
from idle (server up between cells), never averaged together, and utilization and power over
the group's time up."""

from __future__ import annotations

from typing import Any

import polars as pl

from specbench_tui.report import format as f
from specbench_tui.report.blocks import (
    Cell,
    Chart,
    Charts,
    Column,
    Para,
    Point,
    Section,
    Series,
    Table,
    text,
)
from specbench_tui.report.frames import marked
from specbench_tui.report.inputs import Inputs
from specbench_tui.report.sections.common import batch_hosts

MAX_POINTS = 120  # per series: enough for the shape, few enough for pgfplots


def _windows(inp: Inputs, gid: str) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(up windows, busy windows) of a group: server ready to stopped, and its cells' runs."""
    g = inp.state.groups[gid]
    last = inp.state.last_ts or 0.0
    up = [(a, b if b is not None else last) for a, b in g.windows]
    busy = []
    for cid in g.cells:
        c = inp.state.cells.get(cid)
        if c is not None and c.started_at is not None and c.ended_at is not None:
            busy.append((c.started_at, c.ended_at))
    if not up and busy:
        up = [(min(a for a, _ in busy), max(b for _, b in busy))]
    return up, busy


def _inside(col: str, spans: list[tuple[float, float]]) -> pl.Expr:
    if not spans:
        return pl.lit(False)
    return pl.any_horizontal([(pl.col(col) >= a) & (pl.col(col) <= b) for a, b in spans])


def group_samples(inp: Inputs) -> dict[str, pl.DataFrame]:
    """Per group: its GPUs' samples while its server was up, with a ``busy`` flag."""
    tel = inp.telemetry
    if tel is None or tel.height == 0 or not {"time", "host", "gpu"} <= set(tel.columns):
        return {}
    out = {}
    for gid, g in inp.state.groups.items():
        up, busy = _windows(inp, gid)
        if not up or not g.gpu_ids:
            continue
        part = tel.filter(
            (pl.col("host") == g.host) & pl.col("gpu").is_in(list(g.gpu_ids)) & _inside("time", up)
        )
        if part.height:
            out[gid] = part.with_columns(_inside("time", busy).alias("busy"))
    return out


def _stat(df: pl.DataFrame, col: str, how: str) -> float | None:
    if col not in df.columns or df.height == 0:
        return None
    s = df[col].cast(pl.Float64)
    v = s.mean() if how == "mean" else s.max()
    return None if v is None else float(v)


def _over_time(df: pl.DataFrame, t0: float, col: str) -> list[Point]:
    """Mean over the group's GPUs per sample time, binned to at most MAX_POINTS points."""
    if col not in df.columns:
        return []
    per_t = df.group_by("time").agg(pl.col(col).cast(pl.Float64).mean()).sort("time")
    if per_t.height == 0:
        return []
    span = float(per_t["time"].max()) - float(per_t["time"].min())
    width = max(span / MAX_POINTS, 1e-9)
    binned = (
        per_t.with_columns(((pl.col("time") - t0) / width).floor().alias("_bin"))
        .group_by("_bin")
        .agg(pl.col("time").mean(), pl.col(col).mean())
        .sort("time")
    )
    return [Point(float(t) - t0, float(v)) for t, v in binned.select("time", col).iter_rows()]


def build(inp: Inputs) -> Section | None:
    per_group = group_samples(inp)
    if not per_group:
        on_batch = batch_hosts(inp)
        if not on_batch:
            return None
        # Said rather than left out, so that a cluster's report has a local run's shape and
        # a reader does not look for samples that were never taken.
        sec = Section("GPU telemetry per service group")
        sec.add(
            Para(
                text(
                    f"No GPU samples for the groups on {', '.join(on_batch)}: each ran as a "
                    "batch job, and its node recorded none (a job's samples come into "
                    "the campaign where its node's GPUs can be read)."
                )
            )
        )
        return sec
    sec = Section("GPU telemetry per service group")
    sec.add(
        Para(
            text(
                "Samples of each group's own GPUs while its server was up. Busy: while one of "
                "its cells ran; idle: server up between cells (start-up, warm-up requests "
                "and the wait between cells). Utilization and power are means over the "
                "group's GPUs; memory and temperature are peaks."
            )
        )
    )
    rows, charts = [], []
    for gid, df in per_group.items():
        g = inp.state.groups[gid]
        busy, idle = df.filter(pl.col("busy")), df.filter(~pl.col("busy"))
        _, spans = _windows(inp, gid)
        busy_s = sum(b - a for a, b in spans)
        rows.append(
            [
                Cell(gid, code=True),
                Cell(",".join(str(i) for i in g.gpu_ids)),
                Cell(f.duration(busy_s)),
                Cell(f.count(df.height)),
                Cell(f.pct(_stat(busy, "util_pct", "mean"))),
                Cell(f.pct(_stat(idle, "util_pct", "mean"))),
                Cell(f.fnum(_stat(busy, "power_w", "mean"), 0)),
                Cell(f.fnum(_stat(idle, "power_w", "mean"), 0)),
                Cell(f.fnum(_stat(df, "mem_used_mib", "max"), 0)),
                Cell(f.fnum(_stat(df, "temp_c", "max"), 0)),
            ]
        )
        up, _ = _windows(inp, gid)
        t0 = up[0][0] if up else float(df["time"].min())
        charts.append(
            Chart(
                f"{marked(inp, g.config, g.host, [g.tp])}, TP {g.tp} on {g.host}",
                "lines",
                "seconds since the server was ready",
                "utilization (%)",
                [
                    Series("utilization", _over_time(df, t0, "util_pct"), color=0),
                    Series("power", _over_time(df, t0, "power_w"), color=1, right=True),
                ],
                ylabel_right="power (W)",
                ymin=0.0,
            )
        )
    sec.add(
        Table(
            "GPU telemetry per service group (busy and idle apart)",
            [
                Column("Group", "l"),
                Column("GPUs", "l"),
                Column("Busy"),
                Column("Samples"),
                Column("Util busy %"),
                Column("Util idle %"),
                Column("Power busy W"),
                Column("Power idle W"),
                Column("Peak mem MiB"),
                Column("Max temp C"),
            ],
            rows,
            small=True,
        )
    )
    sec.add(Charts([c for c in charts if c.has_points]))
    return sec


def host_gpus(inp: Inputs) -> dict[str, dict[str, Any]]:
    """Per host: GPUs seen in telemetry and their memory, where telemetry recorded them."""
    tel = inp.telemetry
    if tel is None or tel.height == 0 or "host" not in tel.columns:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for (host,), part in tel.partition_by("host", as_dict=True).items():
        info: dict[str, Any] = {"count": part["gpu"].n_unique()}
        if "mem_total_mib" in part.columns:
            info["mem_total_mib"] = _stat(part, "mem_total_mib", "max")
        for col in ("name", "gpu_name", "model", "driver", "driver_version"):
            if col in part.columns:
                vals = part[col].drop_nulls().unique().to_list()
                if vals:
                    info[col] = ", ".join(str(v) for v in vals)
        out[str(host)] = info
    return out

"""The server's view beside the client's, per group and workload kind: accept length and
generation throughput from the server's log lines, the engine's counter deltas where the cell
recorded them, and the client's figures; a disagreement beyond a tolerance is called out.

Every figure of a row is pooled over the cells of its group and kind as the rest of the report
pools (a ratio of sums: tokens over verify steps, tokens over seconds), so the client's accept
length here is the one the per-TP and per-dataset tables print for the same requests. Each log
figure is set against the client's figure over the same stretches: the stats lines a cell
pooled (each wholly inside it, report/server_log.py) describe parts of it, and the client's
figure beside them counts each request by the share of its time (sent to last token) that
lies inside those parts, where they are long enough for the stamps to place them
(``STRETCH_RES``); a cell the log says nothing about is left out of that comparison,
not compared with its neighbours' lines. The client's speed is all output tokens over all
measured windows; beside the log's, the client's tokens inside the lines' stretches over
their seconds.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from specbench_tui.bench.figures import figure_title
from specbench_tui.engines.registry import accept_length
from specbench_tui.report import format as f
from specbench_tui.report.blocks import Bullets, Cell, Para, Section, text
from specbench_tui.report.frames import (
    ACCEPT_COLUMNS,
    accept_frame,
    cell_figures,
    config_rank,
    group_engines,
    label,
    marked,
    ran_adapters,
    requests,
)
from specbench_tui.report.inputs import Inputs
from specbench_tui.report.sections import columns as C
from specbench_tui.report.server_log import log_figures, log_spans, share_inside, stats_lines_read

#: Relative differences beyond which the two views disagree. The log's accept length is a
#: rolling figure over a window of decode steps, and its throughput counts idle time within its
#: interval, so they are looser than the counters, which cover exactly the measured window.
ACCEPT_TOL = 0.10
THROUGHPUT_TOL = 0.25
COUNTER_TOL = 0.02
SHOWN = 12  # disagreements listed in full; the tables mark every one
#: The client's figures are set beside the log's only over stretches of at least this many
#: stamp resolutions (10 s at stamps to the second): the stamps place each end within half a
#: resolution, which then moves a figure's stretch by at most a tenth. A shorter one (a cell
#: of a second or two, an engine printing several lines a second) cannot be placed among the
#: requests: the seed rehearsal's one line in a 1.2 s agentic cell described 40 steps of a
#: second that held eight turns.
STRETCH_RES = 10

#: The engine-side comparison of the counters with the requests' own counts, per cell.
ACCEPTANCE_CHECK = "acceptance_check"
#: The counter deltas a cell records (engines/acceptance.py), summed over a group's cells.
_COUNTER_SUMS = ("counter_generation_tokens", "counter_verify_steps", "counter_accepted_tokens")


def _rel(a: Any, b: Any) -> float | None:
    if a is None or b is None or not b:
        return None
    return abs(float(a) - float(b)) / abs(float(b))


def _pooled(num: str, den: str, where: pl.Expr | None = None) -> pl.Expr:
    """The ratio of two sums over a group's cells (those ``where`` holds): how the report
    pools every rate and accept length, so that a row here is the figure the other tables
    give for the same requests, not a mean of per-cell ratios."""
    n, d = pl.col(num), pl.col(den)
    if where is not None:
        n, d = n.filter(where), d.filter(where)
    return pl.when(d.sum() > 0).then(n.sum() / d.sum())


def _kind_per_temperature(req: pl.DataFrame) -> pl.DataFrame:
    """``kind`` as the view keys it: a kind whose requests ran at several temperatures is
    one kind per temperature (``single T=1``), never pooled, as the report's workloads are."""
    if "temperature" not in req.columns:
        return req
    temps = req.group_by("kind").agg(pl.col("temperature").drop_nulls().n_unique().alias("_n"))
    several = temps.filter(pl.col("_n") > 1)["kind"].to_list()
    if not several:
        return req
    named = (
        pl.col("kind")
        + " T="
        + pl.col("temperature").map_elements(lambda t: f"{t:g}", return_dtype=pl.String)
    )
    return req.with_columns(
        pl.when(pl.col("kind").is_in(several) & pl.col("temperature").is_not_null())
        .then(named)
        .otherwise(pl.col("kind"))
        .alias("kind")
    )


#: The request counts an accept length pools; scaled by a request's share inside the log's
#: stretches when the client's figure is taken over those stretches.
_COUNTS = ("output_tokens", "spec_verify_ct", "spec_accepted_tokens", "spec_draft_tokens")


def _placed(inp: Inputs) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """Per kind (``accept``, ``speed``) and cell: its pooled lines' stretches where the
    stamps can place them among its requests (``STRETCH_RES``); made once per read."""
    if "server_view_placed" not in inp.cache:
        placed: dict[str, dict[str, list[tuple[float, float]]]] = {"accept": {}, "speed": {}}
        for cid, own in log_spans(inp).items():
            for kind, cells in placed.items():
                stretches = own.union(kind)
                if sum(b - a for a, b in stretches) >= STRETCH_RES * own.res:
                    cells[cid] = stretches
        inp.cache["server_view_placed"] = placed
    return inp.cache["server_view_placed"]


def _on_stretches(inp: Inputs, req: pl.DataFrame) -> pl.DataFrame:
    """Each request's share of its time (sent to last token: the server did all its work
    within it) inside its cell's placed log stretches: ``_in_accept`` over the lines that
    gave verify steps, ``_in_speed`` over those that gave seconds; 0 where its cell has no
    such line. Not the decode window alone: a client that read a stream in one burst (a
    lagging one) puts it in the last milliseconds, after the server had decoded it. Only
    the rows of cells with placed lines are looked at one by one."""
    placed = _placed(inp)
    logged = set(placed["accept"]) | set(placed["speed"])
    cell = pl.col("cell_id").is_in(list(logged))
    rest = req.filter(~cell).with_columns(
        pl.lit(0.0).alias("_in_accept"), pl.lit(0.0).alias("_in_speed")
    )
    mine = req.filter(cell)
    if mine.height == 0:
        return rest

    def share(kind: str) -> pl.Expr:
        cells = placed[kind]

        def one(r: dict[str, Any]) -> float:
            stretches = cells.get(r["cell_id"], [])
            if not stretches or r["started_at"] is None or r["e2e_s"] is None:
                return 0.0
            return share_inside(r["started_at"], r["started_at"] + r["e2e_s"], stretches)

        return (
            pl.struct("cell_id", "started_at", "e2e_s")
            .map_elements(one, return_dtype=pl.Float64)
            .alias(f"_in_{kind}")
        )

    return pl.concat([rest, mine.with_columns(share("accept"), share("speed"))])


def _warmups(inp: Inputs, req: pl.DataFrame) -> pl.DataFrame:
    """The finished cells' warm-up requests (``warmup_requests``, sent and not measured) as
    request rows, keyed as the cell's measured rows are (group, kind, engine): the server's
    log counts them, so the client's figure over the log's stretches must too."""
    rows = []
    for cid, c in inp.state.cells.items():
        kept = c.figures.get("warmup_requests") if c.status == "done" else None
        rows += [(cid, *w) for w in kept or []]  # workloads.warmup_row's five
    schema = {
        "cell_id": pl.String,
        "started_at": pl.Float64,
        "e2e_s": pl.Float64,
        "output_tokens": pl.Int64,
        "spec_verify_ct": pl.Int64,
        "spec_accepted_tokens": pl.Int64,
    }
    warm = pl.DataFrame(rows, schema=schema, orient="row")
    if warm.height == 0:
        return warm
    keys = req.group_by("cell_id").agg(pl.col("group", "kind", "engine").first())
    return warm.join(keys, on="cell_id", how="inner").with_columns(
        pl.when(pl.col("spec_verify_ct") > 0)
        .then(pl.col("output_tokens") / pl.col("spec_verify_ct"))
        .alias("accept_length")
    )


def _stretch_seconds(inp: Inputs) -> pl.DataFrame:
    """Per cell: the seconds its placed throughput lines cover (what the client's tokens
    inside them are divided by, as the server's are)."""
    rows = [(cid, sum(b - a for a, b in u)) for cid, u in _placed(inp)["speed"].items()]
    return pl.DataFrame(
        rows, schema={"cell_id": pl.String, "_span_seconds": pl.Float64}, orient="row"
    )


def view_frame(inp: Inputs) -> pl.DataFrame:
    """Per group and kind: client and server figures pooled over the group's cells (the
    client's beside each log figure over the same stretches, ``*_logged``, and beside the
    counters' over the same cells, ``accept_len_countered``).

    Each figure is a ratio of sums: the client's accept length the engine's own definition
    over the counts of the requests (``frames.accept_frame``), the log's over the tokens and
    verify steps of its lines, the counters' over their deltas, and the cell throughput all
    output tokens over all measured windows (a cell's window is its tokens over its
    throughput)."""
    req = requests(inp)
    if req.height == 0:
        return pl.DataFrame()
    req = _kind_per_temperature(req.with_columns(pl.col("cell_id").cast(pl.String)))
    # Beside the log, every request the client sent counts, its warm-ups too (the log
    # counts them), each by its share inside the cell's pooled lines.
    sent = _on_stretches(inp, pl.concat([req, _warmups(inp, req)], how="diagonal_relaxed"))
    keys = ["group", "kind"]
    per_cell = req.group_by("group", "cell_id", "kind").agg(
        pl.col("output_tokens").sum().cast(pl.Float64).alias("_tokens")
    )
    span_tokens = sent.group_by("cell_id").agg(
        (pl.col("output_tokens") * pl.col("_in_speed")).sum().alias("_span_tokens")
    )
    per_cell = per_cell.join(span_tokens, on="cell_id", how="left").join(
        _stretch_seconds(inp), on="cell_id", how="left"
    )
    cells = cell_figures(inp)
    wanted = ("throughput_tok_s", ACCEPTANCE_CHECK, *_COUNTER_SUMS)
    extra = [c for c in wanted if c in cells.columns]
    if cells.height and extra:
        figs = cells.select(pl.col("cell_id").cast(pl.String), *extra)
        per_cell = per_cell.join(figs, on="cell_id", how="left")
    for c in ("throughput_tok_s", *_COUNTER_SUMS):
        if c not in per_cell.columns:
            per_cell = per_cell.with_columns(pl.lit(None, dtype=pl.Float64).alias(c))
    if ACCEPTANCE_CHECK not in per_cell.columns:
        per_cell = per_cell.with_columns(pl.lit(None, dtype=pl.String).alias(ACCEPTANCE_CHECK))
    logs = log_figures(inp).drop("group", "kind")
    per_cell = per_cell.join(logs, on="cell_id", how="left").with_columns(
        pl.when(pl.col("throughput_tok_s") > 0)
        .then(pl.col("_tokens") / pl.col("throughput_tok_s"))
        .alias("_seconds")
    )
    has_accept = pl.col("log_steps").is_not_null()
    has_speed = pl.col("log_seconds").is_not_null()
    countered = pl.col("counter_verify_steps") > 0
    view = per_cell.group_by(keys).agg(
        _pooled("log_accept_tokens", "log_steps").alias("log_accept_len"),
        _pooled("log_speed_tokens", "log_seconds").alias("log_gen_throughput"),
        _pooled("_tokens", "_seconds").alias("client_speed"),
        _pooled("_span_tokens", "_span_seconds", has_speed).alias("client_speed_logged"),
        *(pl.col(c).filter(countered).sum().alias(c) for c in _COUNTER_SUMS),
        pl.col("counter_accepted_tokens").filter(countered).is_null().any().alias("_no_acc"),
        pl.col("log_lines").sum(),
        (has_accept | has_speed).sum().alias("cells_logged"),
        pl.col(ACCEPTANCE_CHECK)
        .filter(pl.col(ACCEPTANCE_CHECK).str.starts_with("disagree"))
        .first()
        .alias("engine_check"),
        pl.len().alias("cells"),
    )
    engines = group_engines(inp)
    view = view.with_columns(
        pl.struct("group", *_COUNTER_SUMS, "_no_acc")
        .map_elements(
            lambda r: (
                accept_length(
                    engines.get(r["group"], ""),
                    r["counter_generation_tokens"],
                    r["counter_verify_steps"],
                    None if r["_no_acc"] else r["counter_accepted_tokens"],
                )
                if r["counter_verify_steps"]
                else None
            ),
            return_dtype=pl.Float64,
        )
        .alias("counter_accept_len")
    )

    def client_accept(cells_where: pl.Expr, name: str) -> pl.DataFrame:
        ids = per_cell.filter(cells_where)["cell_id"]
        sub = req.filter(pl.col("cell_id").is_in(ids.implode()))
        return accept_frame(sub.select(*keys, "cell_id", *ACCEPT_COLUMNS), keys).select(
            *keys, pl.col("accept_len_weighted").alias(name)
        )

    # The log's accept length against the client's over the same stretches: each request's
    # counts in the share of its decode that lay inside the cell's pooled lines.
    inside = sent.filter(pl.col("_in_accept") > 0).with_columns(
        *((pl.col(c) * pl.col("_in_accept")).alias(c) for c in _COUNTS)
    )
    logged = accept_frame(inside.select(*keys, "cell_id", *ACCEPT_COLUMNS), keys).select(
        *keys, pl.col("accept_len_weighted").alias("accept_len_logged")
    )

    every = accept_frame(req.select(*keys, "cell_id", *ACCEPT_COLUMNS), keys).select(
        *keys, "accept_len_mean", "accept_len_weighted"
    )
    return (
        view.join(every, on=keys, how="left")
        .join(logged, on=keys, how="left")
        .join(client_accept(countered, "accept_len_countered"), on=keys, how="left")
    )


def _beside(log: Any, client: Any, fmt: Any) -> str:
    """A log figure with the client's over the same stretches beside it: each label keeps
    one definition (the client's columns are over every cell, as in the other tables)."""
    if log is None:
        return fmt(None)
    return f"{fmt(log)} ({fmt(client)})"


def disagreements(r: dict[str, Any]) -> list[str]:
    """What differs beyond its tolerance in one row of the view."""
    out = []
    d = _rel(r.get("log_accept_len"), r.get("accept_len_logged"))
    if d is not None and d > ACCEPT_TOL:
        out.append(
            f"log accept length {f.accept(r['log_accept_len'])} vs client "
            f"{f.accept(r['accept_len_logged'])} ({d:.0%} apart, tolerance {ACCEPT_TOL:.0%})"
        )
    d = _rel(r.get("counter_accept_len"), r.get("accept_len_countered"))
    if d is not None and d > COUNTER_TOL:
        out.append(
            f"counter accept length {f.accept(r['counter_accept_len'])} vs client "
            f"{f.accept(r['accept_len_countered'])} ({d:.0%} apart, tolerance "
            f"{COUNTER_TOL:.0%})"
        )
    d = _rel(r.get("log_gen_throughput"), r.get("client_speed_logged"))
    if d is not None and d > THROUGHPUT_TOL:
        out.append(
            f"log gen throughput {f.toks(r['log_gen_throughput'])} vs client cell throughput "
            f"{f.toks(r['client_speed_logged'])} tok/s ({d:.0%} apart, tolerance "
            f"{THROUGHPUT_TOL:.0%})"
        )
    if r.get("engine_check"):
        out.append(f"engine-side check: {r['engine_check']}")
    return out


def _stats_lines(inp: Inputs) -> str:
    """``" (<label> <stats lines>), "``: the stats lines each engine this campaign ran
    prints, as its adapter names them; a bare comma where none names any."""
    named = [f"{a.label} {a.stats_lines_name}" for a in ran_adapters(inp) if a.stats_lines_name]
    return f" ({', '.join(named)}), " if named else ", "


def _intervals(inp: Inputs) -> str:
    """``" (<label> prints every <interval>)"``: how often each engine this campaign ran
    logs them."""
    said = [f"{a.label} prints {a.stats_interval}" for a in ran_adapters(inp) if a.stats_interval]
    return f" ({'; '.join(said)})" if said else ""


def _flagged(tag: str, title: str, at: tuple[str, ...], fmt: Any, word: str) -> C.Col:
    """A server-side figure (``at[0]``), beside the client's over the same stretches
    (``at[1]``) where given; bold where a disagreement names ``word``."""

    def cell(r: Any) -> Cell:
        said = _beside(r[at[0]], r[at[1]], fmt) if len(at) == 2 else fmt(r[at[0]])
        return Cell(said, bold=any(word in b for b in r["bad"]))

    return C.Col(tag, title, cell)


#: The server view's columns: the client's figures over every cell of the config and kind,
#: the log's (and the counters') beside the client's over the same stretches.
LEAD = (
    C.CONFIG,
    C.field("kind", "Kind", align="l"),
    C.Col("cells", "Cells (logged)", lambda r: Cell(f"{r['cells']} ({r['cells_logged']})")),
    C.figure("accept_length", f.accept, at="accept_len_mean", scope="client, request mean"),
    C.figure("accept_length", f.accept, at="accept_len_weighted", scope="client"),
    _flagged(
        "log_accept_len",
        figure_title("accept_length", scope="log; client on the same stretches"),
        ("log_accept_len", "accept_len_logged"),
        f.accept,
        "log accept",
    ),
)
COUNTER = _flagged(
    "counter_accept_len",
    figure_title("accept_length", scope="engine counters"),
    ("counter_accept_len",),
    f.accept,
    "counter",
)
TRAIL = (
    C.figure("throughput_tok_s", f.toks, at="client_speed", scope="client"),
    _flagged(
        "log_gen_throughput",
        "Log gen tok/s (client on the same stretches)",
        ("log_gen_throughput", "client_speed_logged"),
        f.toks,
        "gen throughput",
    ),
    C.Col("log_lines", "Log lines", lambda r: Cell(f.count(r["log_lines"] or 0))),
    C.Col("marks", "", lambda r: Cell("disagree" if r["bad"] else ""), "l"),
)


def build(inp: Inputs) -> Section | None:
    view = view_frame(inp)
    if view.height == 0:
        return None
    groups = inp.state.groups
    order = config_rank(inp)
    has_counters = view["counter_accept_len"].drop_nulls().len() > 0
    has_log = view["log_lines"].fill_null(0).sum() > 0
    sec = Section("Server view beside the client view")
    sec.add(
        Para(
            text(
                "Per service group and workload kind (one per temperature), each figure "
                "pooled over the cells (a "
                "ratio of sums, as in the other tables). The client's accept length is the "
                "engine's own definition over the requests' counts (what its counters give); "
                "the server log's pools the stats lines whose whole stretch lay inside a cell"
                f"{_stats_lines(inp)}weighted by the "
                "verify steps behind each, warm-up requests within a cell included. The "
                "client's speed is the cells' throughput (output tokens over their measured "
                "windows); the server's is its logged generation throughput over the same "
                "stretches, weighted by their tokens. A cell shorter than the server's "
                "logging interval may have no line of its own: it is left out of the log "
                "comparison (the cells compared are counted). The client's columns are over "
                "every cell, as in the other tables; a log figure has the client's over the "
                "same stretches beside it, in brackets: each request counted by the share of "
                "its time (sent to last token) inside the lines' stretches, and the "
                "client's tokens there over the stretches' seconds; only where a cell's "
                f"stretches add up to {STRETCH_RES} stamp resolutions or more (the stamps "
                "place each end to half a resolution), else that cell is not compared. "
                + (
                    "Counter accept length is from the engine's Prometheus counter deltas over "
                    "the cells' measured windows, summed. "
                    if has_counters
                    else "No cell recorded counter deltas from the engine's metrics. "
                )
                + f"Tolerances: accept length {ACCEPT_TOL:.0%} (log), {COUNTER_TOL:.0%} "
                f"(counters), throughput {THROUGHPUT_TOL:.0%}."
            )
        )
    )
    read = stats_lines_read(inp)
    if not has_log and not read:
        sec.add(Para(text("No stats lines were found in the kept server logs."), "warning"))
    elif not has_log:
        sec.add(
            Para(
                text(
                    f"The kept server logs hold {f.plural(read, 'stats line')}, but none "
                    "describes a stretch wholly inside one cell: the cells are shorter than "
                    f"the server's logging interval{_intervals(inp)}, so the log has "
                    "no figure of its own for any cell."
                )
            )
        )
    rows_all = []
    for r in view.to_dicts():
        g = groups.get(r["group"])
        r["host"] = g.host if g else ""
        r["tp"] = g.tp if g else 0
        r["config"] = g.config if g else r["group"]
        rows_all.append(r)
    issues: list[str] = []
    for host, tp in sorted({(r["host"], r["tp"]) for r in rows_all}):
        rows = [r for r in rows_all if (r["host"], r["tp"]) == (host, tp)]
        rows.sort(key=lambda r: (order.get(r["config"], len(order)), r["kind"]))
        for r in rows:
            r["label"] = marked(inp, r["config"], host, [tp])
            r["bad"] = disagreements(r)
            who = f"{label(inp, r['config'])}, TP {tp}, {r['kind']} on {host}"
            issues += [f"{who}: {b}" for b in r["bad"]]
        cols = [*LEAD, *([COUNTER] if has_counters else []), *TRAIL]
        sec.add(C.table(f"Server and client figures, TP {tp} on {host}", cols, rows, small=True))
    if issues:
        sec.blocks.insert(
            1,
            Para(
                text(
                    f"{len(issues)} disagreement(s) between the server's and the client's "
                    "figures beyond tolerance:"
                ),
                "warning",
            ),
        )
        sec.blocks.insert(2, Bullets([text(i) for i in issues[:SHOWN]]))
        if len(issues) > SHOWN:
            more = f"... and {len(issues) - SHOWN} more, marked in the tables below."
            sec.blocks.insert(3, Para(text(more)))
    else:
        sec.add(Para(text("No disagreement beyond tolerance.")))
    return sec

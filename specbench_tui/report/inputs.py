"""A results directory read through the results contract, once, for every section of the report
and for the console's live results table.

Everything comes from ``specbench_tui.results``: the reducer's state of the event log (cells,
groups, checks, run status), the per-cell part files of each finished cell's counted attempt,
telemetry parts. Any input may be missing, empty or unreadable: the sections that need it come
back empty and a note says why, instead of the whole report failing.

Only the columns the report uses are read (``REQUEST_COLUMNS``): the per-chunk gap lists
(``itl_s``, ``chunk_tokens``) are the biggest columns of a results directory and the report
takes their percentiles from each cell's own summary instead. That keeps a million request rows
well under a gigabyte.
"""

from __future__ import annotations

import fcntl
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from specbench_tui.bench.greedy_judge import judge
from specbench_tui.errors import InputError
from specbench_tui.results.cells import baseline_config
from specbench_tui.results.damaged import UNREADABLE, set_aside_notes
from specbench_tui.results.files import NotAFile, read_event_log, read_json_object
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.schema import REQUEST_SCHEMA, TELEMETRY_SCHEMA
from specbench_tui.results.state import CampaignState, RowsExist
from specbench_tui.results.views import counted_attempts, part_files, telemetry_files

#: Request columns the report reads, where the file has them. The optional ones are added by
#: newer clients and engines; without them the report computes what it can from the others
#: (decode tok/s from output_tokens, e2e_s and ttft_s).
REQUEST_COLUMNS: tuple[str, ...] = (
    "cell_id",
    "attempt",
    "group",
    "host",
    "config",
    "tp",
    "workload",
    "kind",
    "prompt_set",
    "prompt_id",
    "max_tokens",
    "concurrency",
    "session",
    "turn",
    "repeat",
    "started_at",
    "ttft_s",
    "e2e_s",
    "tpot_s",
    "output_tokens",
    "prompt_tokens",
    "cached_tokens",
    "output_tok_s",
    "spec_verify_ct",
    "accept_length",
    "output_sha256",
    "error",
    # Newer columns (client: figures per request; engines: raw speculative counts).
    "decode_tok_s",
    "e2e_tok_s",
    "spec_accepted_tokens",
    "spec_draft_tokens",
    "decode_s",
    "burst_read",
)
_OPTIONAL_TYPES: dict[str, Any] = {
    "decode_tok_s": pl.Float64,
    "decode_s": pl.Float64,
    "e2e_tok_s": pl.Float64,
    "spec_accepted_tokens": pl.Int64,
    "spec_draft_tokens": pl.Int64,
    "burst_read": pl.Boolean,
}
_TYPES: dict[str, Any] = {**REQUEST_SCHEMA, **_OPTIONAL_TYPES}
# Text columns with few distinct values: categorical takes a fraction of their memory on a
# million rows (the output hashes stay text: nearly every one is distinct).
_CATEGORICAL = ("cell_id", "group", "host", "config", "workload", "kind", "prompt_set", "prompt_id")


@dataclass
class Inputs:
    """A results directory read through the results contract; each file may be absent.

    ``requests`` holds only the counted attempt of each finished cell (the reducer says which),
    with the columns of ``REQUEST_COLUMNS`` the files have, every one of them present (nulls
    where a file lacked it).
    """

    root: Path
    layout: ResultsLayout
    plan: dict[str, Any]
    state: CampaignState
    requests: pl.DataFrame
    telemetry: pl.DataFrame | None
    labels: dict[str, str]
    config_order: list[str]
    live: bool = False
    notes: list[str] = field(default_factory=list)
    # The plan's baseline config (a parametrized base name: its first expansion); None
    # without one.
    baseline: str | None = None
    # manifest.json: what each group ran on and with, by group id (empty: none recorded).
    manifest: dict[str, Any] = field(default_factory=dict)
    # Frames derived once per read (report/frames.py), by name.
    cache: dict[str, Any] = field(default_factory=dict)
    # Forced acceptance (``forced_accept``): config -> the accept length its server was forced
    # to, and those configs' request rows, kept apart: ``requests`` and ``config_order`` hold
    # real acceptance only, so no table pools the two (sections/forced.py sets them side by
    # side).
    forced: dict[str, float] = field(default_factory=dict)
    forced_requests: pl.DataFrame | None = None


def _read_plan(path: Path, notes: list[str]) -> dict[str, Any]:
    if not path.exists():
        notes.append("plan.toml is missing: the baseline and checks are unknown")
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        notes.append(f"plan.toml could not be read ({exc})")
        return {}


def _labels(state: CampaignState) -> tuple[dict[str, str], list[str]]:
    """Config name -> label, in plan order, as the log's service groups recorded them."""
    labels: dict[str, str] = {}
    for g in state.groups.values():
        if g.config:
            labels.setdefault(g.config, g.label or g.config)
    return labels, list(labels)


def is_live(layout: ResultsLayout) -> bool:
    """Whether a campaign process holds the directory now (it takes an exclusive flock)."""
    try:
        fd = os.open(layout.lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _scan(path: Path) -> pl.LazyFrame:
    """One parquet file, projected onto the report's columns, every one present and typed."""
    lf = pl.scan_parquet(path)
    have = lf.collect_schema()
    exprs = []
    for name in REQUEST_COLUMNS:
        dtype = _TYPES[name]
        if name in have:
            e = pl.col(name)
            e = e.cast(dtype) if have[name] != dtype else e
        else:
            e = pl.lit(None, dtype=dtype).alias(name)
        exprs.append(e.cast(pl.Categorical) if name in _CATEGORICAL else e)
    return lf.select(exprs)


def _empty_requests() -> pl.DataFrame:
    return pl.DataFrame(
        schema={n: pl.Categorical if n in _CATEGORICAL else _TYPES[n] for n in REQUEST_COLUMNS}
    )


def _read_parts(paths: list[Path], notes: list[str]) -> tuple[pl.DataFrame, list[Path]]:
    """The parts' rows, and the parts that could not be read. All at once where every part
    reads; one by one otherwise, so an unreadable part costs its own rows and a note naming
    it, not the report."""
    try:
        return pl.concat([_scan(p) for p in paths], how="vertical").collect(), []
    except UNREADABLE:  # one part or more is torn: find which, one by one
        pass
    frames, bad = [], []
    for p in paths:
        try:
            frames.append(_scan(p).collect())
        except UNREADABLE as exc:
            bad.append(p)
            why = (str(exc).strip().splitlines() or ["no detail"])[0][:200]
            notes.append(
                f"parts/{p.name} could not be read ({type(exc).__name__}: {why}): its cell's "
                "rows are left out and the cell counts as not done (a run of the plan sets "
                "the file aside in unreadable/ and runs the cell again)"
            )
    if not frames:
        return _empty_requests(), bad
    return pl.concat(frames, how="vertical"), bad


def read_requests(
    layout: ResultsLayout, state: CampaignState, notes: list[str]
) -> tuple[pl.DataFrame, set[tuple[str, int]]]:
    """Rows of each finished cell's counted attempt: from its part file (the truth), else from
    ``requests.parquet`` (a directory copied without its parts); and the (cell, attempt) of
    each part that could not be read."""
    counted = counted_attempts(state)
    parts = {layout.part_key(p): p for p in part_files(layout)}
    have = [parts[k] for k in counted.items() if k in parts]
    left = sum(1 for k in parts if k is not None and counted.get(k[0]) != k[1])
    if have:
        df, bad = _read_parts(have, notes)
        unreadable = {k for k in (layout.part_key(p) for p in bad) if k is not None}
        if left:
            notes.append(
                f"{left} part files of earlier attempts or unfinished cells were left out "
                "(only each finished cell's counted attempt is aggregated)"
            )
        return df, unreadable
    return _read_requests_view(layout, counted, notes), set()


def _read_requests_view(
    layout: ResultsLayout, counted: dict[str, int], notes: list[str]
) -> pl.DataFrame:
    if not layout.requests.exists():
        if counted:
            notes.append("requests.parquet is missing and parts/ holds no counted rows")
        else:
            notes.append("requests.parquet is missing")
        return _empty_requests()
    try:
        full = _scan(layout.requests)
        keep = (
            pl.DataFrame(
                {"cell_id": list(counted), "attempt": list(counted.values())},
                schema={"cell_id": pl.String, "attempt": pl.Int64},
            )
            .lazy()
            .with_columns(pl.col("cell_id").cast(pl.Categorical))
        )
        df = full.join(keep, on=["cell_id", "attempt"], how="semi").collect()
        total = full.select(pl.len()).collect().item()
    except UNREADABLE as exc:
        notes.append(f"requests.parquet could not be read ({type(exc).__name__}: {exc})")
        return _empty_requests()
    if total == 0:
        notes.append("requests.parquet has no rows yet")
    elif total > df.height:
        notes.append(
            f"{total - df.height} request rows of earlier attempts or unfinished cells were "
            "left out (only each finished cell's counted attempt is aggregated)"
        )
    return df


def read_telemetry(layout: ResultsLayout, notes: list[str]) -> pl.DataFrame | None:
    """GPU samples: the parts in the order they were taken, else the view."""
    paths = telemetry_files(layout) or ([layout.telemetry] if layout.telemetry.exists() else [])
    if not paths:
        return None
    try:
        frames = [pl.read_parquet(p) for p in paths]
    except UNREADABLE as exc:
        notes.append(f"telemetry could not be read ({type(exc).__name__}: {exc})")
        return None
    frames = [f for f in frames if f.height]
    if not frames:
        return pl.DataFrame(schema=TELEMETRY_SCHEMA)
    return pl.concat(frames, how="diagonal_relaxed")


def forced_configs(state: CampaignState) -> dict[str, float]:
    """Config -> its forced accept length, for the configs the plan forced (``forced_accept``)."""
    return {
        c.config: c.cell.forced_accept
        for c in state.cells.values()
        if c.cell is not None and c.cell.forced_accept is not None
    }


def known_configs(order: list[str], state: CampaignState, requests: pl.DataFrame) -> list[str]:
    """Every config the log or the rows name, in plan order; forced-acceptance configs are
    not among them (they are reported apart)."""
    names = list(order)
    for c in state.cells.values():
        if c.cell is not None and c.cell.forced_accept is not None:
            continue
        if c.config and c.config not in names:
            names.append(c.config)
    if requests.height:
        for c in requests["config"].unique().cast(pl.String).to_list():
            if c is not None and c not in names:
                names.append(c)
    return names


def resolve_baseline(plan: dict[str, Any], known: list[str]) -> str | None:
    """The plan's baseline config; a parametrized base name stands for its first expansion."""
    ref = (plan.get("campaign") or {}).get("baseline")
    return baseline_config(str(ref) if ref else None, known)


#: Output texts already read, by path, with the (mtime, size) they were read at: a texts
#: file is written whole once per attempt, so a console that reloads the results after
#: every cell reads each one once.
_TEXTS: dict[Path, tuple[tuple[int, int], dict[str, Any]]] = {}
_TEXTS_LIMIT = 4096


def read_texts(layout: ResultsLayout, cell_id: str, attempt: int) -> dict[str, Any]:
    """One attempt's output texts (``parts/<cell>.a<k>.texts.json``); empty when missing."""
    path = layout.texts_path(cell_id, attempt)
    try:
        st = path.stat()
    except OSError:
        return {}
    stamp = (st.st_mtime_ns, st.st_size)
    hit = _TEXTS.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    obj = read_json_object(path)
    if len(_TEXTS) >= _TEXTS_LIMIT:
        _TEXTS.pop(next(iter(_TEXTS)))
    _TEXTS[path] = (stamp, obj)
    return obj


def _judge_greedy(
    plan: dict[str, Any], state: CampaignState, layout: ResultsLayout, base: str | None, live: bool
) -> None:
    """Fold into ``state`` the greedy verdicts judged from the stored outputs (see
    bench/greedy_judge.py): whatever the campaign's end, a lossy config is flagged and one
    nothing judged is unchecked. Not written to the log: a view, rebuilt on every read."""
    if not (plan.get("checks") or {}).get("greedy_equivalence"):
        return
    state.add_judged(judge(state, base, lambda cid, a: read_texts(layout, cid, a), live=live))


def _manifest(layout: ResultsLayout) -> dict[str, Any]:
    groups = read_json_object(layout.manifest).get("groups")
    return (
        {str(k): v for k, v in groups.items() if isinstance(v, dict)}
        if isinstance(groups, dict)
        else {}
    )


def _readable(layout: ResultsLayout, unreadable: set[tuple[str, int]]) -> RowsExist:
    def rows_exist(cid: str, attempt: int) -> bool:
        return (cid, attempt) not in unreadable and layout.rows_exist(cid, attempt)

    return rows_exist


def load_inputs(root: Path) -> Inputs:
    """Read everything a report (or the console's results table) uses from
    ``<results>/<campaign>/``; a directory with no event log is one clear error."""
    root = Path(root)
    layout = ResultsLayout(root)
    if not layout.events.exists():
        raise InputError(f"{root}: no campaign here (no events.jsonl)")
    notes: list[str] = []
    plan = _read_plan(layout.plan, notes)
    # A directory copied without its parts/ (only the views): trust the log's finished cells
    # and read their rows from requests.parquet.
    rows_exist = layout.rows_exist if layout.parts.is_dir() else None
    try:
        log = read_event_log(layout.events)
    except NotAFile as exc:
        raise InputError(str(exc)) from None
    if log.bad:
        notes.append(log.summary(layout.events))
    state = CampaignState.from_events(log.events, rows_exist)
    requests, unreadable = read_requests(layout, state, notes)
    if unreadable and rows_exist is not None:  # those cells' rows are not there to count
        state = CampaignState.from_events(log.events, _readable(layout, unreadable))
    notes += set_aside_notes(layout)
    labels, order = _labels(state)
    forced = forced_configs(state)
    if forced:
        is_forced = pl.col("config").cast(pl.String).is_in(list(forced))
        forced_rows = requests.filter(is_forced)
        requests = requests.filter(~is_forced)
        order = [c for c in order if c not in forced]
    live = is_live(layout)
    base = resolve_baseline(plan, known_configs(order, state, requests))
    _judge_greedy(plan, state, layout, base, live)
    return Inputs(
        root=root,
        layout=layout,
        plan=plan,
        state=state,
        requests=requests,
        telemetry=read_telemetry(layout, notes),
        labels=labels,
        config_order=order,
        live=live,
        notes=notes,
        baseline=base,
        manifest=_manifest(layout),
        forced=forced,
        forced_requests=forced_rows if forced else None,
    )

"""Every figure of a request and of a cell, defined once; rows, cell summaries, the report's
frames, the console and the headless line all take them from here.

With ``n`` output tokens (the server's count), TTFT ``ttft`` (request sent to first content
chunk) and ``e2e`` (request sent to end of stream):

- **decode window** ``decode_s`` = e2e - ttft: the time the tokens after the first took;
  null for n < 2. It is zero (0.0, a *zero decode window*) when every content chunk came in
  the socket read of the first: then the tokens arrived at once, and e2e - ttft is the time
  to parse the read or to wait for the end of the stream, not a decode time (such a request
  would claim 10k-500k tok/s).
- **decode tok/s per request** ``decode_tok_s`` = (n - 1) / decode window, TTFT left out;
  null where there is no window or a zero one.
- **end-to-end tok/s per request** ``e2e_tok_s`` = n / e2e, TTFT included (the contract's
  older column ``output_tok_s`` holds the same figure).
- **TPOT** ``tpot_s`` = decode window / (n - 1), the inverse of the decode rate.
- **decode tok/s of a cell (or of any set of requests)** ``decode_tok_s_total`` =
  sum(n - 1) / sum(decode window) over the successful requests that have a window:
  token-weighted, never a mean of per-request rates (a short request that happened to arrive
  in one burst would outweigh a long one). The requests it leaves out are counted and named:
  ``decode_one_token`` (n < 2: no decode at all), ``decode_zero_window`` (the window was
  not measured, see above) and ``decode_burst_read`` (see below). Per-request rates stay a
  distribution (``decode_tok_s_p50`` ...).
- **burst read** ``burst_read``: a request whose decode window is under a tenth
  (``BURST_SHARE``) of what its chunks imply, chunks - 1 times the median of its cell's
  chunk gaps measured between two reads (each chunk after the first is a step of the
  server's; the client read most of them at once, late, so the window is its reads', not
  the server's decode). Its window is kept as measured; it has no rate and is left out of
  every decode rate, counted as the zero windows are. A tenth: on a real engine on CPU and the
  simulator most windows of the requests read as they came lie at 0.2-8 times what their
  chunks imply, and the requests under a tenth (1 of 90, 1 of 137, 3 of 533) at 0.005-0.04
  (one of 63 chunks in 0.6 ms: 103,000 tok/s).
- **measured window of a cell** ``wall_s``: for a concurrency cell, from the first measured
  request sent to the last byte received (the request span); for single-stream and agentic
  cells, whose requests run one after another, the sum of the requests' own spans. What the
  client does around the requests (a cache flush, building the next turn, garbage
  collection, writing rows) is outside it.
- **cell throughput** ``throughput_tok_s`` = all output tokens of the cell's successful
  requests over its measured window.
- **chunk gap** (per SSE event): the time between two content-bearing chunks; the request
  row's ``itl_s`` list (the contract's name) holds them. Two chunks that came in one read of
  the socket have no measured gap between them: their gap's index is listed in the row's
  ``coalesced_gaps`` and it is left out of every chunk-gap statistic (the cell's
  ``coalesced_gap_share`` says how many were), never counted as a 0.00 ms gap.
- **ITL per token**: the chunks of one read form one arrival; an arrival that carries k
  tokens after a gap g gives k inter-token latencies of g / k. Tokens per chunk come from the
  server's running count (``chunk_tokens``, as the engine's stream parser reads it: deltas of a
  running ``completion_tokens`` between chunks, the token ids each chunk carries when asked for
  them, or an OpenAI server's continuous usage); an arrival whose count did not move adds its
  gap to the next one that carries tokens. Where the server gives no running count and every
  chunk must carry one token (n == chunks), each chunk counts one; otherwise it is unknown and
  ``chunk_tokens`` is empty.
- **good request** (goodput as serving benchmarks and DistServe define it): a request that
  succeeded and meets every limit the plan's ``[slo]`` gives: TTFT <= ``ttft``, TPOT <=
  ``tpot``, e2e <= ``e2e``. A request with no TPOT (one output token, or a zero decode window)
  is not good while a ``tpot`` limit is given: it must not pass that limit vacuously. A failed
  request is never good, and it is counted among the requests.
- **goodput** ``goodput_req_s`` = good requests / the measured window (requests per second).
- **share meeting the SLO** ``slo_share`` = good requests / all measured requests (failed
  ones included), with its 95% Wilson score interval ``slo_share_lo`` .. ``slo_share_hi``
  (z = 1.96; it stays inside [0, 1] and is honest at 0 or n of n, where the normal
  approximation collapses to a point). ``slo_met``: the interval's lower bound reaches the
  ``[slo]`` target, the test a capacity search puts to each concurrency level.
- **capacity under the SLO** ``max_concurrency_under_slo``: the highest concurrency level,
  among those a capacity search tried, whose share met the SLO (``slo_met``), with the bracket
  it was found in: ``capacity_pass_level`` (= it) and ``capacity_fail_level``, the lowest
  level tried that failed (null when none did: the capacity is at least the top of the
  search). Null when even the lowest level tried failed.
- **speed-up**: the ratio of two configs' decode tok/s, each the mean over its units
  (repeats, sessions, or the cell of a concurrency level) of the unit's token-weighted
  ``decode_tok_s_total``, with Fieller's interval (``report/stats.py``).
- **accept length**: the engine's own definition (``engines/registry.py``
  ``accept_length``), per request from its counts and per cell from the pooled counts.
- **stalled request** (``server stalled?``): a successful request of a cell of at least
  ``STALL_MIN_REQUESTS`` whose e2e is over ``STALL_FACTOR`` times the median e2e of the
  cell's successful requests, or one with a gap between two chunks longer than
  ``STALL_GAP_S`` (a server frozen, swapped out or paused mid-stream; no decode step takes
  that long). It stays counted; the cell says how many, the worst e2e against the median,
  and the cell's decode tok/s without them (``stalled_*`` columns), so the reader sees what
  it did to the figure.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from specbench_tui.results.records import Measurement


def chunk_tokens(running: Sequence[int], output_tokens: int | None, chunks: int) -> list[int]:
    """Tokens each content chunk carried, from the server's running counts (-1: unknown)."""
    if running and all(c >= 0 for c in running):
        out = [running[0]]
        out += [max(0, b - a) for a, b in itertools.pairwise(running)]
        return out
    if output_tokens is not None and output_tokens == chunks:
        return [1] * chunks
    return []


def fill_rates(m: Measurement, running: Sequence[int], *, one_read: bool = False) -> None:
    """Set the rate figures of a finished request from what the stream measured.
    ``one_read``: every content chunk came in the read of the first."""
    m.chunk_tokens = chunk_tokens(running, m.output_tokens, m.chunks)
    m.decode_s = m.decode_tok_s = m.tpot_s = m.e2e_tok_s = m.output_tok_s = None
    n, e2e, ttft = m.output_tokens, m.e2e_s, m.ttft_s
    if m.error is not None or n is None or e2e is None:
        return
    if e2e > 0:
        m.e2e_tok_s = m.output_tok_s = n / e2e
    if n > 1 and ttft is not None:
        if e2e > ttft and not one_read:
            m.decode_s = e2e - ttft
            m.decode_tok_s = (n - 1) / m.decode_s
            m.tpot_s = m.decode_s / (n - 1)
        else:
            m.decode_s = 0.0  # a zero decode window: counted as such, no rate


def decode_window(m: Measurement) -> float | None:
    """A row's decode window: its own ``decode_s`` (0.0: a zero window), or for rows written
    before that column existed, e2e - ttft where it is positive (their zero windows cannot be
    told)."""
    if m.decode_s is not None:
        return m.decode_s
    if m.error is not None or m.e2e_s is None or m.ttft_s is None:
        return None
    return m.e2e_s - m.ttft_s if m.e2e_s > m.ttft_s else None


@dataclass(frozen=True)
class DecodeTotal:
    """Token-weighted decode rate of a set of successful requests, and what it left out."""

    tokens: int  # sum of n - 1 over the requests with a decode window
    seconds: float  # sum of their decode windows
    counted: int
    one_token: int  # n < 2
    zero_window: int  # n >= 2 with no measured window (all in one read)
    burst: int = 0  # a window far shorter than its chunks imply (``mark_bursts``)

    @property
    def rate(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0 else None

    def columns(self) -> dict[str, float | int | None]:
        """The cell-row columns (``cells.parquet``)."""
        return {
            "decode_tok_s_total": self.rate,
            "decode_requests": self.counted,
            "decode_one_token": self.one_token,
            "decode_zero_window": self.zero_window,
            "decode_burst_read": self.burst,
        }

    def left_out(self) -> str:
        """What the rate leaves out, in words ("" when nothing)."""
        parts = []
        if self.zero_window:
            parts.append(f"{self.zero_window} with a zero decode window (all in one read)")
        if self.burst:
            parts.append(
                f"{self.burst} read in a burst (a window under a tenth of what its chunks imply)"
            )
        if self.one_token:
            parts.append(f"{self.one_token} of one token")
        return ", ".join(parts)


def decode_left_out(columns: Mapping[str, Any]) -> str:
    """What a cell's decode tok/s left out, in words, from its row's columns ("" for
    nothing, or for cells recorded before these columns existed)."""
    one, zero = columns.get("decode_one_token") or 0, columns.get("decode_zero_window") or 0
    burst = columns.get("decode_burst_read") or 0
    return DecodeTotal(0, 0.0, 0, int(one), int(zero), int(burst)).left_out()


def decode_total(records: Iterable[Measurement]) -> DecodeTotal:
    """:class:`DecodeTotal` of the successful requests among ``records``."""
    tokens = counted = one = zero = burst = 0
    seconds: list[float] = []
    for r in records:
        if r.error is not None or r.output_tokens is None:
            continue
        if r.output_tokens < 2:
            one += 1
            continue
        if r.burst_read:
            burst += 1
            continue
        w = decode_window(r)
        if w is None or not w > 0:
            zero += 1
            continue
        tokens += r.output_tokens - 1
        seconds.append(w)
        counted += 1
    return DecodeTotal(tokens, math.fsum(seconds), counted, one, zero, burst)


def decode_parts_expr() -> tuple[pl.Expr, pl.Expr]:
    """:func:`decode_total` as two polars expressions over request rows: (tokens, seconds) of
    each row that counts, null for the others, to be summed per unit or per cell. Rows of
    results written before ``decode_s`` existed fall back as :func:`decode_window` does."""
    n, e2e, ttft = pl.col("output_tokens"), pl.col("e2e_s"), pl.col("ttft_s")
    window = pl.coalesce(pl.col("decode_s"), pl.when(e2e > ttft).then(e2e - ttft))
    burst = pl.col("burst_read").fill_null(False)
    counts = (n >= 2) & window.is_not_null() & (window > 0) & ~burst
    return (
        pl.when(counts).then(n - 1).cast(pl.Float64),
        pl.when(counts).then(window),
    )


#: See "stalled request" above; the flag is how every view says it.
STALL_FLAG = "SERVER STALLED?"
STALL_FACTOR = 10.0
STALL_MIN_REQUESTS = 3
STALL_GAP_S = 30.0


def stall_columns(records: Sequence[Measurement]) -> dict[str, Any]:
    """The cell-row columns of its stalled requests (``stalled_requests`` 0 when none)."""
    ok = [r for r in records if r.error is None and r.e2e_s is not None]
    # The cell's median e2e (its summary's e2e_s_p50); too few requests: no e2e bound.
    median = statistics.median(float(r.e2e_s or 0.0) for r in ok) if ok else 0.0
    bound = STALL_FACTOR * median if len(ok) >= STALL_MIN_REQUESTS and median > 0 else math.inf

    def stalls(r: Measurement) -> bool:
        return float(r.e2e_s or 0.0) > bound or max(r.itl_s, default=0.0) > STALL_GAP_S

    stalled = [r for r in ok if stalls(r)]
    if not stalled:
        return {"stalled_requests": 0}
    kept = [r for r in ok if not stalls(r)]
    return {
        "stalled_requests": len(stalled),
        "stalled_worst_e2e_s": max(float(r.e2e_s or 0.0) for r in stalled),
        "stalled_longest_gap_s": max(max(r.itl_s, default=0.0) for r in stalled),
        "decode_tok_s_without_stalled": decode_total(kept).rate,
    }


def stall_said(columns: Mapping[str, Any]) -> str:
    """A cell's stalled requests in words, from its row's columns ("" when none)."""
    n = columns.get("stalled_requests") or 0
    if not n:
        return ""
    worst, median = columns.get("stalled_worst_e2e_s"), columns.get("e2e_s_p50")
    gap = columns.get("stalled_longest_gap_s")
    total, without = columns.get("decode_tok_s_total"), columns.get("decode_tok_s_without_stalled")
    of = f" of {columns['requests']}" if columns.get("requests") else ""
    noun = "request" if n == 1 and not of else "requests"
    out = f"{STALL_FLAG} {n}{of} {noun} took up to {worst:.1f} s"
    if median:
        out += f" ({worst / median:.0f}x the median {median:.1f} s"
        out += f", a {gap:.1f} s gap in the stream)" if gap and gap > STALL_GAP_S else ")"
    elif gap and gap > STALL_GAP_S:
        out += f" (a {gap:.1f} s gap in the stream)"
    if total is not None and without is not None:
        out += f"; counted: decode {total:.1f} tok/s with, {without:.1f} without"
    return out


@dataclass(frozen=True)
class Span:
    """A request's place on the client's clock (``time.perf_counter`` seconds)."""

    sent: float
    end: float


def measured_window(spans: Sequence[Span], concurrent: bool) -> float:
    """The measured window of a cell from its requests' spans (see the module docstring)."""
    if not spans:
        return 0.0
    if concurrent:
        return max(s.end for s in spans) - min(s.sent for s in spans)
    return math.fsum(max(0.0, s.end - s.sent) for s in spans)


def throughput(records: Iterable[Measurement], wall_s: float | None) -> float | None:
    """Cell throughput: output tokens of the successful requests over the measured window."""
    if not wall_s or wall_s <= 0:
        return None
    return sum(r.output_tokens or 0 for r in records if r.error is None) / wall_s


#: A decode window under this share of what its chunks imply is a burst read (module
#: docstring: measured on a real engine on CPU and the simulator).
BURST_SHARE = 0.1


def mark_bursts(records: Sequence[Measurement]) -> int:
    """Mark a cell's burst reads (``burst_read``; module docstring): their rates go, their
    windows stay. The cell's median chunk gap measured between two reads is the pace its
    chunks imply. Returns how many were marked."""
    gaps = [g for r in records for g in measured_gaps(r.itl_s or [], r.coalesced_gaps or [])]
    if not gaps:
        return 0
    pace = statistics.median(gaps)
    if pace <= 0:
        return 0
    marked = 0
    for r in records:
        window = r.decode_s
        if r.error is not None or not window or r.chunks < 3:
            continue
        if window < BURST_SHARE * (r.chunks - 1) * pace:
            r.burst_read = True
            r.decode_tok_s = r.tpot_s = None
            marked += 1
    return marked


def measured_gaps(gaps: Sequence[float], coalesced: Sequence[int]) -> list[float]:
    """The chunk gaps of a request that were measured: those between two reads."""
    if not coalesced:
        return list(gaps)
    skip = set(coalesced)
    return [g for i, g in enumerate(gaps) if i not in skip]


def token_gaps(
    gaps: Sequence[float], tokens: Sequence[int], coalesced: Sequence[int] = ()
) -> list[tuple[float, int]]:
    """ITL per token as (latency, how many tokens had it) from a request's chunk gaps, tokens
    per chunk and the gaps that fell inside one read; empty when tokens per chunk are
    unknown."""
    if not tokens or len(tokens) != len(gaps) + 1:
        return []
    skip = set(coalesced)
    out: list[tuple[float, int]] = []
    waited = 0.0
    carried = 0  # tokens of the arrival being gathered (chunks of one read)
    first = True  # still in the first chunk's read: those tokens came with the first one
    for i, (gap, k) in enumerate(zip(gaps, tokens[1:], strict=True)):
        if i in skip:  # the same read as the chunk before: one arrival
            if not first:
                carried += k
            continue
        first = False
        if carried:
            out.append((waited / carried, carried))
            waited = 0.0
        waited += gap
        carried = k
    if carried:
        out.append((waited / carried, carried))
    return out


#: z of a two-sided 95% interval.
Z95 = 1.959963984540054


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval of a share of ``k`` in ``n`` (None for ``n`` = 0)."""
    if n <= 0:
        return None
    p = k / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    lo = 0.0 if k <= 0 else max(0.0, centre - half)
    hi = 1.0 if k >= n else min(1.0, centre + half)
    return lo, hi


def slo_good(m: Measurement, limits: Mapping[str, float]) -> bool:
    """Whether one request is good under ``limits`` (seconds by ``ttft``, ``tpot``, ``e2e``;
    only those given apply): see the module docstring."""
    if m.error is not None:
        return False
    values = {"ttft": m.ttft_s, "tpot": m.tpot_s, "e2e": m.e2e_s}
    for name, limit in limits.items():
        value = values[name]
        if value is None or not value <= limit:
            return False
    return True


def slo_limits_text(limits: Mapping[str, float]) -> str:
    """The limits as a plan writes them: "TTFT <= 2s, TPOT <= 50ms"."""
    names = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "e2e"}

    def say(s: float) -> str:
        return f"{s * 1000:g}ms" if s < 1 else f"{s:g}s"

    return ", ".join(f"{names[k]} <= {say(v)}" for k, v in limits.items())


@dataclass(frozen=True)
class SloFigures:
    """Goodput and the share meeting the SLO of a set of measured requests."""

    requests: int  # all measured requests, failed ones included
    good: int
    window_s: float | None  # the measured window goodput is over
    target: float

    @property
    def share(self) -> float | None:
        return self.good / self.requests if self.requests else None

    @property
    def interval(self) -> tuple[float, float] | None:
        return wilson_interval(self.good, self.requests)

    @property
    def goodput(self) -> float | None:
        return self.good / self.window_s if self.window_s and self.window_s > 0 else None

    @property
    def met(self) -> bool:
        iv = self.interval
        return iv is not None and iv[0] >= self.target

    def columns(self) -> dict[str, Any]:
        """The cell-row columns (``results/records.py`` SLO_COLUMNS, less ``slo_limits``)."""
        iv = self.interval
        return {
            "goodput_req_s": self.goodput,
            "slo_requests": self.requests,
            "slo_good": self.good,
            "slo_share": self.share,
            "slo_share_lo": iv[0] if iv else None,
            "slo_share_hi": iv[1] if iv else None,
            "slo_target": self.target,
            "slo_met": self.met,
        }


def slo_figures(
    records: Iterable[Measurement],
    window_s: float | None,
    limits: Mapping[str, float],
    target: float,
) -> SloFigures:
    """:class:`SloFigures` of ``records`` (every measured request, failed ones included)."""
    rows = list(records)
    good = sum(1 for r in rows if slo_good(r, limits))
    return SloFigures(len(rows), good, window_s, target)


def slo_columns(
    records: Iterable[Measurement],
    window_s: float | None,
    limits: Mapping[str, float],
    target: float,
) -> dict[str, Any]:
    """A cell's SLO columns (all of SLO_COLUMNS), from its measured requests and window."""
    out = slo_figures(records, window_s, limits, target).columns()
    out["slo_limits"] = slo_limits_text(limits)
    return out


def slo_said(columns: Mapping[str, Any]) -> str:
    """A cell's SLO figures in words, from its row's columns ("" where it has none): the
    share meeting the SLO with its interval and the goodput, or a capacity search's result
    with its bracket."""
    if "capacity_note" in columns:
        cap, fail = columns.get("max_concurrency_under_slo"), columns.get("capacity_fail_level")
        tried = len(columns.get("capacity_levels") or ())
        found = "none" if cap is None else str(cap)
        bracket = f" (fails at {fail})" if fail is not None else ""
        return (
            f"capacity under the SLO {found}{bracket}, {tried} levels tried, "
            f"{columns.get('capacity_note')}"
        )
    share = columns.get("slo_share")
    if share is None:
        return ""
    lo, hi = columns.get("slo_share_lo"), columns.get("slo_share_hi")
    goodput = columns.get("goodput_req_s")
    rate = f", goodput {goodput:.2f} req/s" if goodput is not None else ""
    return f"SLO met by {share:.0%} [{lo:.2f}, {hi:.2f}]{rate}"


#: Each figure's short definition, the one the report's table of figures prints and its
#: sections' prose repeats (report/sections/methodology.py, common.py); the module docstring
#: above is the long form. ``{chunk_tokens}``: where the engines that ran take a chunk's token
#: count from (their adapters say).
DEFINITIONS: dict[str, str] = {
    "ttft_s": "request sent to first token.",
    "decode_tok_s_total": (
        "token-weighted: sum(output tokens - 1) / sum(e2e - TTFT) over the requests of a unit "
        "(repeat, session, or the cell of a concurrency level), TTFT excluded; a config's "
        "figure is the mean over its units. Requests with one token, a zero decode window "
        "(every token in the read of the first) or a burst read (a window under a tenth of "
        "what its chunks imply) have no decode time: they are left out, and the methodology "
        "counts them."
    ),
    "e2e_tok_s": "per request, output tokens / e2e: TTFT included.",
    "throughput_tok_s": (
        "all output tokens of a cell over its measured window: for concurrency the request "
        "span (first request sent to last byte received), else the sum of the requests' "
        "spans; warm-up, cache flushes, garbage collection and writes stay out."
    ),
    "tpot_s": "per request, (e2e - TTFT) / (output tokens - 1).",
    "itl_token_s": (
        "a read that brings k tokens after a gap g gives k latencies of g / k; tokens per "
        "chunk from {chunk_tokens}."
    ),
    "chunk_gap_s": (
        "time between streamed chunks (SSE events) that came in different reads; a "
        "speculative server sends several tokens per chunk, so it is not ITL."
    ),
    "speedup": (
        "ratio of two configs' decode tok/s with Fieller's 95% interval; 'too few units' "
        "where the means are too uncertain to bound it."
    ),
    "load_speedup": (
        "the ratio of a config's cell throughput to the baseline's at the same number of "
        "clients (concurrency cells)."
    ),
}

#: Each figure's name as the report, the cells' columns and the console say it, by its
#: column stem (``decode_tok_s`` for ``decode_tok_s_p50`` ...): a view names a figure from
#: here rather than inventing a name of its own.
FIGURE_NAMES: dict[str, str] = {
    "ttft_s": "TTFT",
    "decode_tok_s": "decode tok/s",
    "decode_tok_s_total": "decode tok/s",
    "e2e_tok_s": "end-to-end tok/s",
    "throughput_tok_s": "cell throughput",
    "tpot_s": "TPOT",
    "itl_token_s": "ITL per token",
    "chunk_gap_s": "chunk gap",
    "accept_length": "accept length",
    "acceptance_rate": "acceptance rate",
    "goodput_req_s": "goodput",
    "slo_share": "share meeting the SLO",
    "max_concurrency_under_slo": "capacity under the SLO",
    "speedup": "speed-up",
    "load_speedup": "throughput speed-up",
    "j_per_token": "J/token",
    "j_per_token_above_idle": "J/token above idle",
}

#: The unit a figure's column and axis print it in, where its name does not say one (the
#: report prints times in milliseconds).
FIGURE_UNITS: dict[str, str] = {
    "ttft_s": "ms",
    "tpot_s": "ms",
    "itl_token_s": "ms",
    "chunk_gap_s": "ms",
    "throughput_tok_s": "tok/s",
    "goodput_req_s": "req/s",
}


def figure_name(key: str) -> str:
    """The figure's name as a sentence or a title starts it: ``Decode tok/s``."""
    name = FIGURE_NAMES[key]
    return name[:1].upper() + name[1:]


def defined(key: str) -> str:
    """``Cell throughput is all output tokens ...``: the figure's name and its one definition,
    as a section's prose says it."""
    return f"{figure_name(key)} is {DEFINITIONS[key]}"


def figure_title(
    key: str, *, stat: str = "", scope: str = "", ci: bool = False, lead: bool = True
) -> str:
    """A figure's name as a column header or chart title starts: ``TTFT p50 ms``,
    ``Accept length (request mean)``, ``Decode tok/s [95% CI]``. ``stat``: a percentile;
    ``scope``: what it is taken over where that differs from the figure's own (a different
    scope is a different name); ``ci``: the column carries the 95% interval; ``lead``: the
    title starts the header (else it follows a workload's name: ``chat accept length``)."""
    name = figure_name(key) if lead else FIGURE_NAMES[key]
    out = " ".join(p for p in (name, stat, FIGURE_UNITS.get(key, "")) if p)
    return out + (f" ({scope})" if scope else "") + (" [95% CI]" if ci else "")


def figure_axis(key: str, *, stat: str = "") -> str:
    """A chart axis for the figure: ``TTFT p50 (ms)``, ``decode tok/s``."""
    unit = FIGURE_UNITS.get(key, "")
    return " ".join(p for p in (FIGURE_NAMES[key], stat) if p) + (f" ({unit})" if unit else "")

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
  ``decode_one_token`` (n < 2: no decode at all) and ``decode_zero_window`` (the window was
  not measured, see above). Per-request rates stay a distribution (``decode_tok_s_p50`` ...).
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
- **ITL per token**: the chunks of one read form one arrival; an arrival that carries k tokens
  after a gap g gives k inter-token latencies of g / k. Tokens per chunk come from the
  server's running count (``chunk_tokens``: deltas of SGLang's ``completion_tokens`` between
  chunks, the token ids each vLLM chunk carries when asked for them, or an OpenAI server's
  continuous usage); an arrival whose count did not move adds its gap to the next one that
  carries tokens. Where the server gives no running count and every chunk must carry one
  token (n == chunks), each chunk counts one; otherwise it is unknown and ``chunk_tokens`` is
  empty.
- **speed-up**: the ratio of two configs' decode tok/s, each the mean over its units
  (repeats, sessions, or the cell of a concurrency level) of the unit's token-weighted
  ``decode_tok_s_total``, with Fieller's interval (``report/stats.py``).
- **accept length**: the engine's own definition (``engines/registry.py``
  ``accept_length``), per request from its counts and per cell from the pooled counts.
"""

from __future__ import annotations

import itertools
import math
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
        }

    def left_out(self) -> str:
        """What the rate leaves out, in words ("" when nothing)."""
        parts = []
        if self.zero_window:
            parts.append(f"{self.zero_window} with a zero decode window (all in one read)")
        if self.one_token:
            parts.append(f"{self.one_token} of one token")
        return ", ".join(parts)


def decode_left_out(columns: Mapping[str, Any]) -> str:
    """What a cell's decode tok/s left out, in words, from its row's columns ("" for
    nothing, or for cells recorded before these columns existed)."""
    one, zero = columns.get("decode_one_token") or 0, columns.get("decode_zero_window") or 0
    return DecodeTotal(0, 0.0, 0, int(one), int(zero)).left_out()


def decode_total(records: Iterable[Measurement]) -> DecodeTotal:
    """:class:`DecodeTotal` of the successful requests among ``records``."""
    tokens = counted = one = zero = 0
    seconds: list[float] = []
    for r in records:
        if r.error is not None or r.output_tokens is None:
            continue
        if r.output_tokens < 2:
            one += 1
            continue
        w = decode_window(r)
        if w is None or not w > 0:
            zero += 1
            continue
        tokens += r.output_tokens - 1
        seconds.append(w)
        counted += 1
    return DecodeTotal(tokens, math.fsum(seconds), counted, one, zero)


def decode_parts_expr() -> tuple[pl.Expr, pl.Expr]:
    """:func:`decode_total` as two polars expressions over request rows: (tokens, seconds) of
    each row that counts, null for the others, to be summed per unit or per cell. Rows of
    results written before ``decode_s`` existed fall back as :func:`decode_window` does."""
    n, e2e, ttft = pl.col("output_tokens"), pl.col("e2e_s"), pl.col("ttft_s")
    window = pl.coalesce(pl.col("decode_s"), pl.when(e2e > ttft).then(e2e - ttft))
    counts = (n >= 2) & window.is_not_null() & (window > 0)
    return (
        pl.when(counts).then(n - 1).cast(pl.Float64),
        pl.when(counts).then(window),
    )


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
}

"""The per-request figures, defined once; the request row and the cell summary use these.

With ``n`` output tokens (the server's count), TTFT ``ttft`` (request sent to first content
chunk) and ``e2e`` (request sent to end of stream):

- **decode tok/s per request** ``decode_tok_s`` = (n - 1) / (e2e - ttft): the decode rate,
  TTFT left out; null for n < 2.
- **end-to-end tok/s per request** ``e2e_tok_s`` = n / e2e, TTFT included (the contract's
  older column ``output_tok_s`` holds the same figure).
- **TPOT** ``tpot_s`` = (e2e - ttft) / (n - 1), the inverse of the decode rate.
- **chunk gap** (per SSE event): the time between two content-bearing chunks; the request
  row's ``itl_s`` list (the contract's name) holds them.
- **ITL per token**: a chunk that carries k tokens after a gap g gives k inter-token latencies
  of g / k. Tokens per chunk come from the server's running count (``chunk_tokens``, from
  deltas of ``completion_tokens`` between chunks); a chunk whose count did not move adds its
  gap to the next one that carries tokens. Where the server gives no running count and every
  chunk must carry one token (n == chunks), each chunk counts one; otherwise it is unknown and
  ``chunk_tokens`` is empty.
- **cell throughput** ``throughput_tok_s``: all output tokens of a cell over its wall time
  (:func:`specbench_tui.bench.metrics.summarize`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

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


def fill_rates(m: Measurement, running: Sequence[int]) -> None:
    """Set the rate figures of a finished request from what the stream measured."""
    m.chunk_tokens = chunk_tokens(running, m.output_tokens, m.chunks)
    n, e2e, ttft = m.output_tokens, m.e2e_s, m.ttft_s
    if m.error is not None or n is None or e2e is None:
        return
    if e2e > 0:
        m.e2e_tok_s = n / e2e
    if n > 1 and ttft is not None and e2e > ttft:
        m.decode_tok_s = (n - 1) / (e2e - ttft)


def token_gaps(gaps: Sequence[float], tokens: Sequence[int]) -> list[tuple[float, int]]:
    """ITL per token as (latency, how many tokens had it) from a request's chunk gaps and
    tokens per chunk; empty when tokens per chunk are unknown."""
    if not tokens or len(tokens) != len(gaps) + 1:
        return []
    out: list[tuple[float, int]] = []
    waited = 0.0
    for gap, k in zip(gaps, tokens[1:], strict=True):
        waited += gap
        if k > 0:
            out.append((waited / k, k))
            waited = 0.0
    return out


#: Each figure's name as the report, the cells' columns and the console say it, by its
#: column stem (``decode_tok_s`` for ``decode_tok_s_p50`` ...): a view names a figure from
#: here rather than inventing a name of its own.
FIGURE_NAMES: dict[str, str] = {
    "ttft_s": "TTFT",
    "decode_tok_s": "decode tok/s",
    "e2e_tok_s": "end-to-end tok/s",
    "throughput_tok_s": "cell throughput",
    "tpot_s": "TPOT",
    "itl_token_s": "ITL per token",
    "chunk_gap_s": "chunk gap",
    "accept_length": "accept length",
}

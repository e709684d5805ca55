"""A cell's acceptance, derived here from raw counts, one convention for every engine.

Per request the engines give verify steps, accepted and proposed draft tokens, a histogram of
drafts accepted per step, and an accept length, each engine's own definition and the one its
counters give (``EngineAdapter.accept_length``, by name ``engines/registry.py``
``accept_length``: SGLang completion tokens / verify steps, vLLM and TensorRT-LLM 1 + accepted
drafts / verify steps). Per cell:

``accept_length_mean``
    the plain mean of the requests' accept lengths (computed with the other per-request
    statistics, ``bench/metrics.py``): a distribution figure, not the cell's accept length;
``accept_length_weighted``
    the cell's accept length: the engine's definition over the counts summed over its
    requests (equally, the requests' accept lengths weighted by their verify steps; for
    SGLang every completion token counts, as in its counters). This is what the engine's
    counters give, so it is the figure to compare with them, and the one the report, the
    console and the headless line show;
``accept_length_counters``, ``acceptance_rate_counters``, ``accept_per_position_counters``
    the same from the deltas of the engine's Prometheus counters over the measured window;
``acceptance_rate``
    accepted over proposed draft tokens; ``accept_per_position[p]``: share of verify steps
    whose draft was accepted up to position ``p`` (position 0 first);
``acceptance_check``
    ``"agree"``, ``"disagree: ..."``, or why the two sources could not be compared.

Everything is null for a configuration without speculative decoding; nothing here ever uses
a server-lifetime average.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from specbench_tui.engines.counters import Counters, WindowResult
from specbench_tui.engines.registry import accept_length, adapter
from specbench_tui.results.records import Measurement

COLUMNS: tuple[str, ...] = (
    "accept_length_weighted",
    "acceptance_rate",
    "accept_per_position",
    "spec_verify_steps",
    "spec_accepted_tokens",
    "spec_draft_tokens",
    "accept_length_counters",
    "acceptance_rate_counters",
    "accept_per_position_counters",
    "counter_verify_steps",
    "counter_accepted_tokens",
    "counter_draft_tokens",
    "counter_generation_tokens",
    "acceptance_check",
)

_REL_TOL = 1e-9


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def request_side(records: Sequence[Measurement], engine: str) -> dict[str, Any]:
    """Pooled figures of the successful requests, counted the way the engine's counters
    count (its adapter's definition)."""
    ok = [r for r in records if r.error is None]
    spec = [r for r in ok if r.spec_verify_ct and r.accept_length is not None]
    out: dict[str, Any] = dict.fromkeys(COLUMNS[:6])
    if not spec:
        return out
    steps = sum(r.spec_verify_ct or 0 for r in spec)
    out["spec_verify_steps"] = steps
    # Each request's accept length times its steps: its tokens (SGLang) or its steps plus
    # accepted drafts (vLLM), for builds that leave a raw count out.
    step_weighted = math.fsum((r.accept_length or 0.0) * (r.spec_verify_ct or 0) for r in spec)
    if all(r.output_tokens is not None for r in ok):
        tokens = float(sum(r.output_tokens or 0 for r in ok))
    else:
        tokens = step_weighted
    if all(r.spec_accepted_tokens is not None for r in spec):
        out["spec_accepted_tokens"] = sum(r.spec_accepted_tokens or 0 for r in spec)
    accepted = out["spec_accepted_tokens"]
    if accepted is None:
        accepted = step_weighted - steps
    out["accept_length_weighted"] = accept_length(engine, tokens, steps, accepted)
    if all(r.spec_draft_tokens is not None for r in spec):
        out["spec_draft_tokens"] = sum(r.spec_draft_tokens or 0 for r in spec)
    out["acceptance_rate"] = _ratio(out["spec_accepted_tokens"], out["spec_draft_tokens"])
    hists = [r.spec_accept_histogram for r in spec]
    if all(h for h in hists):
        k = max(len(h) for h in hists if h) - 1
        hist_steps = sum(sum(h) for h in hists if h)
        if k > 0 and hist_steps:
            out["accept_per_position"] = [
                sum(sum(h[p + 1 :]) for h in hists if h) / hist_steps for p in range(k)
            ]
    return out


def counter_side(deltas: Counters | None, engine: str) -> dict[str, Any]:
    out: dict[str, Any] = dict.fromkeys(COLUMNS[6:13])
    if deltas is None or not deltas.verify_steps:
        return out
    steps = deltas.verify_steps
    out["counter_verify_steps"] = steps
    out["counter_accepted_tokens"] = deltas.accepted_tokens
    out["counter_draft_tokens"] = deltas.draft_tokens
    out["counter_generation_tokens"] = deltas.generation_tokens
    out["accept_length_counters"] = accept_length(
        engine, deltas.generation_tokens, steps, deltas.accepted_tokens
    )
    if deltas.accepted_tokens is not None:
        out["acceptance_rate_counters"] = _ratio(deltas.accepted_tokens, deltas.draft_tokens)
        if deltas.per_position:
            out["accept_per_position_counters"] = [x / steps for x in deltas.per_position]
    return out


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return True  # nothing to compare
    return math.isclose(a, b, rel_tol=_REL_TOL, abs_tol=1e-9)


def compare(req: dict[str, Any], ctr: dict[str, Any]) -> str:
    """How the requests' own numbers and the counter deltas relate."""
    have_req = req.get("accept_length_weighted") is not None
    have_ctr = ctr.get("accept_length_counters") is not None
    if not have_req and not have_ctr:
        return "no acceptance data"
    if not have_ctr:
        return "requests only"
    if not have_req:
        return "counters only"
    diffs = []
    pairs = (
        ("accept length", req["accept_length_weighted"], ctr["accept_length_counters"]),
        ("verify steps", req["spec_verify_steps"], ctr["counter_verify_steps"]),
        ("accepted tokens", req["spec_accepted_tokens"], ctr["counter_accepted_tokens"]),
        ("draft tokens", req["spec_draft_tokens"], ctr["counter_draft_tokens"]),
    )
    for what, a, b in pairs:
        if not _same(a, b):
            diffs.append(f"{what} {_fmt(a)} from requests vs {_fmt(b)} from counters")
    return "agree" if not diffs else "disagree: " + "; ".join(diffs)


def _fmt(v: Any) -> str:
    if isinstance(v, float) and not v.is_integer():
        return f"{v:.4f}"
    return str(int(v)) if isinstance(v, float) else str(v)


def _no_counters(window: WindowResult | None, engine: str) -> str:
    """Why a speculative cell's acceptance comes from its requests alone: never left unsaid."""
    eng = adapter(engine)
    if window is None:
        return f"no counters: the server's {eng.metrics_path} is off or did not answer"
    if window.problem:
        return window.problem
    if window.deltas is None or window.deltas.verify_steps is None:
        return f"no {eng.verify_counter} counter in the server's {eng.metrics_path}"
    return f"{eng.verify_counter} counted no verify step over the cell"


def cell_acceptance(
    records: Sequence[Measurement],
    window: WindowResult | None,
    *,
    engine: str,
    speculative: bool,
) -> dict[str, Any]:
    """The acceptance columns of one cell (see the module docstring)."""
    out: dict[str, Any] = dict.fromkeys(COLUMNS)
    if not speculative:
        return out
    req = request_side(records, engine)
    ctr = counter_side(window.deltas if window is not None else None, engine)
    out.update(req)
    out.update(ctr)
    check = compare(req, ctr)
    failed = sum(1 for r in records if r.error is not None)
    if check.startswith(("agree", "disagree")):
        if failed:
            check = f"not compared: {failed} request(s) failed, the counters include them"
        elif window is not None and not window.settled:
            check += " (a counter read did not settle)"
    elif check == "requests only":
        check += f" ({_no_counters(window, engine)})"
    out["acceptance_check"] = check
    return out

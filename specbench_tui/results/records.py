"""The request row: what one request measured, exactly the columns of the results contract."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class RequestIdentity:
    """Which cell, attempt and prompt a request belongs to (the row's first columns)."""

    campaign: str = ""
    cell_id: str = ""
    attempt: int = 1
    group: str = ""
    host: str = ""
    config: str = ""
    tp: int = 0
    workload: str = ""
    kind: str = ""
    prompt_set: str | None = None
    prompt_id: str | None = None
    max_tokens: int = 0
    concurrency: int | None = None
    session: int | None = None
    turn: int | None = None
    repeat: int | None = None


@dataclass
class Measurement:
    """What the client measured for one request. Times are seconds; ``started_at`` is Unix
    epoch seconds. Token counts come from the server's own numbers (``meta_info`` or
    ``usage``), never from counting streamed chunks: a speculative server sends several
    tokens per chunk.

    Speculative counts are the engine's raw numbers per request, one convention for both
    engines: ``spec_verify_ct`` verify steps, ``spec_accepted_tokens`` accepted draft tokens
    (the bonus token of each step not counted), ``spec_draft_tokens`` draft tokens proposed,
    ``spec_accept_histogram[j]`` verify steps that accepted exactly ``j`` drafts. Each is null
    where the engine does not give it, and all are null without speculative decoding.

    The figures are defined in :mod:`specbench_tui.bench.figures`. Two columns keep the
    contract's older names: ``itl_s`` is the list of chunk gaps (one per SSE event after the
    first, not per token) and ``output_tok_s`` is the end-to-end rate, equal to
    ``e2e_tok_s``. The columns after ``error`` were added later, so older results lack them.
    """

    started_at: float = 0.0
    ttft_s: float | None = None
    e2e_s: float | None = None
    tpot_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    output_tokens: int | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    chunks: int = 0
    output_tok_s: float | None = None
    spec_verify_ct: int | None = None
    accept_length: float | None = None
    finish_reason: str | None = None
    output_sha256: str | None = None
    error: str | None = None
    spec_accepted_tokens: int | None = None
    spec_draft_tokens: int | None = None
    spec_accept_histogram: list[int] | None = None
    decode_tok_s: float | None = None
    e2e_tok_s: float | None = None
    chunk_tokens: list[int] = field(default_factory=list)
    # The decode window (e2e - TTFT; 0.0: a zero window, everything came in one read) and the
    # indexes of the chunk gaps in ``itl_s`` whose two chunks came in one read (no measured
    # gap): bench/figures.py defines both.
    decode_s: float | None = None
    coalesced_gaps: list[int] = field(default_factory=list)
    # The decode window is far shorter than its chunks imply (a burst read, bench/figures.py
    # ``mark_bursts``): kept as measured, left out of every decode rate.
    burst_read: bool = False
    # The prompt's rendering: the chat template's sha256 and the kwargs it was rendered with
    # (JSON, sorted keys); where the server rendered it, the template the model directory
    # holds (null when it could not be read).
    chat_template_sha256: str | None = None
    chat_template_kwargs: str | None = None

    def measurements(self) -> dict[str, Any]:
        """Just the measured fields, to fill a :class:`RequestRecord`."""
        return {name: getattr(self, name) for name in MEASUREMENT_FIELDS}


@dataclass
class RequestRecord(Measurement, RequestIdentity):
    """One request row: identity columns, then measurements (the contract's order)."""

    def to_row(self) -> dict[str, Any]:
        return asdict(self)


MEASUREMENT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Measurement))
REQUEST_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(RequestRecord))


#: A finished cell's GPU board energy columns (``bench/energy.py`` defines them; its
#: ``cell_energy`` event fills them). Every finished cell's row has them, null where the host's
#: GPUs were not read, so that a run's cells.parquet has one shape with or without telemetry.
ENERGY_COLUMNS: tuple[str, ...] = (
    "gpu_energy_j",
    "j_per_output_token",
    "j_per_output_token_above_idle",
    "avg_power_w",
    "idle_power_w",
    "energy_method",
    "energy_valid",
    "energy_note",
    "energy_samples",
    "energy_window_s",
    "energy_output_tokens",
)

#: A finished cell's GPU conditions over its window (``bench/conditions.py`` defines them; the
#: same ``cell_energy`` event fills them): null where the host's GPUs were not read, like the
#: energy columns, so that cells.parquet has one shape with or without telemetry.
GPU_CONDITION_COLUMNS: tuple[str, ...] = (
    "gpu_sm_clock_mhz",
    "gpu_mem_clock_mhz",
    "gpu_temp_max_c",
    "gpu_power_limit_w",
    "gpu_throttle_mask",
    "gpu_foreign_processes",
)

#: A concurrency or capacity cell's SLO columns where the plan has ``[slo]``
#: (``bench/figures.py`` defines them): goodput, the share of requests meeting every given
#: limit with its 95% Wilson interval, whether its lower bound reaches the target, and the
#: limits in words.
SLO_COLUMNS: tuple[str, ...] = (
    "goodput_req_s",
    "slo_requests",
    "slo_good",
    "slo_share",
    "slo_share_lo",
    "slo_share_hi",
    "slo_target",
    "slo_met",
    "slo_limits",
)

#: A capacity cell's search result (``plan/capacity.py``): the highest level that met the
#: SLO and its bracket, then one list entry per level tried, in the order tried.
CAPACITY_COLUMNS: tuple[str, ...] = (
    "max_concurrency_under_slo",
    "capacity_pass_level",
    "capacity_fail_level",
    "capacity_note",
    "capacity_levels",
    "capacity_shares",
    "capacity_share_lo",
    "capacity_share_hi",
    "capacity_goodput_req_s",
    "capacity_throughput_tok_s",
    "capacity_decode_tok_s",
)

#: A cell's warm-up requests, sent and not measured (``bench/workloads.py warmup_row``): one
#: list each, [sent (UTC seconds), e2e seconds, output tokens, verify steps, accepted drafts],
#: so that what the server's log counts beside the measured requests can be rebuilt.
WARMUP_COLUMNS: tuple[str, ...] = ("warmup_requests",)

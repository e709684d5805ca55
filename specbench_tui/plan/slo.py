"""The plan's ``[slo]`` table: latency limits a request must meet to count as good, and the
share of requests that must meet them.

Any subset of ``ttft``, ``tpot`` and ``e2e`` may be given (durations, as every plan duration);
a request is good when every given limit holds (``bench/figures.py`` defines goodput and the
share meeting the SLO). ``target`` is the share a ``kind = "capacity"`` search asks of a
concurrency level, judged by the lower bound of the share's 95% interval, so that a level
passes on evidence rather than on a lucky handful of requests. ``share`` is taken as another
name of ``target`` (the name the plan-format contract first gave it).

This module does not import ``plan/model.py`` (which imports it), so its model repeats the
plan's strictness settings; the checks that need the whole plan are in ``plan/capacity.py``.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from specbench_tui.durations import parse_duration

_Duration = Annotated[float, BeforeValidator(parse_duration)]

SLO_LIMITS: tuple[str, ...] = ("ttft", "tpot", "e2e")


class SloSpec(BaseModel):
    """Latency limits of a good request."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)

    # Time to first token a good request stays within, e.g. "2s".
    ttft: _Duration | None = None
    # Time per output token after the first a good request stays within, e.g. "50ms"; a
    # request of one token has none and is not good while this is set.
    tpot: _Duration | None = None
    # End-to-end latency a good request stays within, e.g. "30s".
    e2e: _Duration | None = None
    # Share of requests that must be good (failed ones count as not good); a capacity search
    # passes a level when the lower bound of the share's 95% Wilson interval reaches it.
    target: float = Field(default=0.9, gt=0, lt=1)

    @model_validator(mode="before")
    @classmethod
    def _share_is_target(cls, data: Any) -> Any:
        if isinstance(data, dict) and "share" in data:
            if "target" in data:
                raise ValueError("give the share as either target or share, not both")
            data = {("target" if k == "share" else k): v for k, v in data.items()}
        return data

    @model_validator(mode="after")
    def _some_limit(self) -> SloSpec:
        if self.ttft is None and self.tpot is None and self.e2e is None:
            raise ValueError('[slo] needs at least one of ttft, tpot, e2e (e.g. tpot = "50ms")')
        return self

    def limits(self) -> dict[str, float]:
        """The given limits in seconds, by name (``ttft``, ``tpot``, ``e2e``)."""
        return {k: v for k in SLO_LIMITS if (v := getattr(self, k)) is not None}


def fewest_requests(target: float, z: float = 1.959963984540054) -> int:
    """The fewest requests whose share can show ``target`` at 95%: with all n good the Wilson
    lower bound is n / (n + z^2), which reaches ``target`` from n = z^2 t / (1 - t) on."""
    return math.ceil(z * z * target / (1 - target) - 1e-9)

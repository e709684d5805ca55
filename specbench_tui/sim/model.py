"""The performance model: how long a step takes and how many tokens it yields.

All numbers here are in *simulated* milliseconds, i.e. what a real 27B hybrid model on RTX PRO
6000-class GPUs would take; the scheduler divides them by ``--speed``. They are plausible
rather than measured: the point is that a campaign against the simulator shows the same shapes
as a real one (speculation wins on code, loses ground on translation, DDTree peaks at a middle
budget, throughput saturates with concurrency), so the console and the report can be exercised.
See the package docstring for the model in words.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass

from specbench_tui.sim.config import SimConfig

# Single-request decode step of the target model, by tensor-parallel size.
_DECODE_STEP_MS = {1: 28.0, 2: 18.0, 4: 12.0, 8: 9.0}
# Prefill cost of one uncached prompt token on one GPU (about 4.5k tokens/s).
_PREFILL_MS_PER_TOKEN_TP1 = 0.22
# How much one more running request slows a step (memory traffic grows with the KV read).
_BATCH_SLOWDOWN = 0.012
# Mean accept length (tokens per verify step) of a 16-token DFlash block, by prompt type:
# code and math are predictable, translation is not.
CLASS_ACCEPT = {"code": 4.5, "math": 4.0, "chat": 3.0, "summarize": 2.8, "translate": 2.5}
# Draft quality of the chain drafters relative to DFlash's per-token acceptance probability.
_CHAIN_QUALITY = {"EAGLE": 0.93, "EAGLE3": 0.97, "NEXTN": 0.98}
_REFERENCE_DEPTH = 16

PROMPT_CLASSES = tuple(CLASS_ACCEPT)

_CODE_CUES = re.compile(
    r"```|\bdef \w+\(|\bclass \w+[:(]|\bimport \w+|#include|\bfunction\b|\breturn\b|=>|"
    r"\bpython\b|\bjavascript\b|\brust\b|\bSQL\b|\bbug\b|\brefactor|\bcompile|\bstack trace|"
    r"[;{}]\s*\n",
    re.IGNORECASE,
)
_MATH_CUES = re.compile(
    r"\bhow (?:many|much|long|far)\b|\bsolve\b|\bcalculate\b|\bcompute\b|\bequation\b|"
    r"\bprove\b|\bprobability\b|\binteger\b|\bsum of\b|\bpercent|\$\d|\d+\s*[-+*/^=%]\s*\d+",
    re.IGNORECASE,
)


def classify_prompt(text: str) -> str:
    """Guess the prompt type from cheap content cues; the instruction prefix wins.

    Benchmark prompt sets start with their instruction ("Translate ...", "Summarize ..."), and
    an agentic conversation keeps its code, so looking at the head and a few cues suffices.
    """
    head = text[:400].lower()
    if re.search(r"\btranslat(e|ion)\b", head):
        return "translate"
    if re.search(r"\bsummari[sz]e|\bsummary\b|\btl;?dr\b", head):
        return "summarize"
    if len(_CODE_CUES.findall(text[:20000])) >= 2 or "```" in text:
        return "code"
    if _MATH_CUES.search(text[:4000]) and sum(c.isdigit() for c in text[:4000]) >= 2:
        return "math"
    return "chat"


def _solve_token_accept_prob(mean_len: float, depth: int) -> float:
    """Per-token acceptance probability p such that E[1 + min(Geom(p), depth)] = mean_len."""
    mean_len = min(mean_len, depth + 0.999)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        p = (lo + hi) / 2
        expected = (1 - p ** (depth + 1)) / (1 - p) if p < 1 else depth + 1
        if expected < mean_len:
            lo = p
        else:
            hi = p
    return (lo + hi) / 2


def expected_accept_length(p: float, depth: int) -> float:
    """Mean tokens per step for per-token acceptance ``p`` and at most ``depth`` drafts."""
    return (1 - p ** (depth + 1)) / (1 - p) if p < 1 else depth + 1


def ddtree_mean_accept(prompt_class: str, budget: int) -> float:
    """DDTree's mean accept length: a wider tree covers more of the draft's alternatives, so
    it grows with log(budget) above the linear DFlash block's."""
    return CLASS_ACCEPT[prompt_class] * (0.85 + 0.10 * math.log2(max(budget, 1)))


@dataclass(frozen=True)
class StepCost:
    """Simulated cost of one decode step, split so DDTree can log its draft/verify times."""

    draft_ms: float
    verify_ms: float

    @property
    def total_ms(self) -> float:
        return self.draft_ms + self.verify_ms


def forced_drafts(rng: random.Random, accept_length: float, depth: int) -> int:
    """Drafts one verify step accepts under forced acceptance: the minimum-variance schedule
    of a synthetic rejection sampler (the upstream function is named where its engine's
    adapter reads the knob): the first floor(L - 1) positions always accepted, the next with
    the fraction left, so a step accepts floor(L - 1) or one more and the mean is L, capped by
    the depth."""
    wanted = min(accept_length - 1.0, float(depth))
    whole = int(wanted)
    return whole + (1 if whole < depth and rng.random() < wanted - whole else 0)


class PerfModel:
    """Step latencies and acceptance for one server configuration."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.algorithm = cfg.algorithm
        slow = cfg.fault("slow")
        self._slow = slow.value if slow else 1.0
        # ``neighbours:X``: X times slower while another simulated server is busy on the host
        # (shared CPUs, PCIe and power), as ``crowded`` tells (the server sets it).
        near = cfg.fault("neighbours")
        self._crowded_by = near.value if near else 1.0
        self.crowded: Callable[[], bool] = lambda: False
        self.base_ms = _DECODE_STEP_MS.get(cfg.tp_size, 6.0 + 22.0 / cfg.tp_size)
        self.prefill_ms_per_token = _PREFILL_MS_PER_TOKEN_TP1 / cfg.tp_size**0.85
        if self.algorithm == "DDTREE":
            budget = cfg.ddtree_budget or 32
            self.depth = min(cfg.num_draft_tokens or _REFERENCE_DEPTH, budget)
            self.verify_tokens = budget + 1
        elif self.algorithm == "DFLASH":
            self.depth = cfg.num_draft_tokens or _REFERENCE_DEPTH
            self.verify_tokens = self.depth + 1
        elif self.algorithm is not None:
            self.depth = cfg.num_steps or 3
            self.verify_tokens = cfg.num_draft_tokens or self.depth + 1
        else:
            self.depth = 0
            self.verify_tokens = 1
        self._p_cache: dict[tuple[str, bool], float] = {}

    @property
    def slowdown(self) -> float:
        """How much slower than the model's steps this server runs now."""
        if self._crowded_by != 1.0 and self.crowded():
            return self._slow * self._crowded_by
        return self._slow

    # -- latency -------------------------------------------------------------------------------

    def step_cost(self, batch: int) -> StepCost:
        """One decode step for ``batch`` running requests, in simulated ms."""
        batch = max(batch, 1)
        target = self.base_ms * (1 + _BATCH_SLOWDOWN * (batch - 1))
        if self.algorithm is None:
            return StepCost(0.0, target * self.slowdown)
        # Verifying n tokens per request is memory-bound while n is small and becomes
        # compute-bound as it grows: the super-linear term is what makes huge trees lose.
        extra = self.base_ms * (self.verify_tokens / 160) ** 2 * batch
        if self.algorithm in ("DFLASH", "DDTREE"):
            # One parallel pass of the block drafter, plus building the tree from its top-k.
            draft = self.base_ms * 0.08 * (1 + 0.05 * (batch - 1))
            if self.algorithm == "DDTREE":
                draft += 0.004 * self.verify_tokens * batch
        else:
            draft = self.base_ms * 0.045 * self.depth * (1 + 0.03 * (batch - 1))
        return StepCost(draft * self.slowdown, (target + extra) * self.slowdown)

    def prefill_ms(self, uncached_tokens: int, new_seqs: int) -> float:
        """A prefill batch: fixed launch overhead plus a cost per uncached token."""
        ms = self.base_ms * 0.5 + max(uncached_tokens, new_seqs) * self.prefill_ms_per_token
        if self.algorithm is not None:
            ms *= 1.1  # the draft model prefills too
        return ms * self.slowdown

    def startup_s(self) -> float:
        """Simulated seconds from launch until ready (weights, KV cache, CUDA graphs)."""
        return 8.0 + 2.0 * self.cfg.tp_size + (2.0 if self.algorithm else 0.0)

    # -- acceptance ----------------------------------------------------------------------------

    def token_accept_prob(self, prompt_class: str, sampled: bool) -> float:
        """Per-draft-token acceptance probability for this config and prompt type."""
        key = (prompt_class, sampled)
        if key not in self._p_cache:
            mean = CLASS_ACCEPT[prompt_class]
            if self.algorithm == "DDTREE":
                mean = ddtree_mean_accept(prompt_class, self.verify_tokens - 1)
            p = _solve_token_accept_prob(mean, _REFERENCE_DEPTH)
            p *= _CHAIN_QUALITY.get(self.algorithm or "", 1.0)
            if sampled:
                p *= 0.95  # sampling at temperature > 0 rejects more drafts
            self._p_cache[key] = p
        return self._p_cache[key]

    def sample_accept(self, rng: random.Random, p: float) -> int:
        """Tokens one verify step yields: the accepted drafts plus the target's bonus token."""
        if self.algorithm is None:
            return 1
        if self.cfg.forced_accept is not None:
            return 1 + forced_drafts(rng, self.cfg.forced_accept, self.depth)
        u = rng.random()
        drafts = self.depth if u <= 0.0 else int(math.log(u) / math.log(p)) if p > 0 else 0
        return 1 + min(drafts, self.depth)

    def mean_accept(self, prompt_class: str) -> float:
        """Expected accept length, for docs, tests and log sanity checks."""
        if self.algorithm is None:
            return 1.0
        if self.cfg.forced_accept is not None:
            return min(self.cfg.forced_accept, 1.0 + self.depth)
        return expected_accept_length(self.token_accept_prob(prompt_class, False), self.depth)

    def accept_rate(self, accept_len: float) -> float:
        """The engine's 'accept rate': the fraction of draft positions that were accepted."""
        if self.algorithm is None or self.depth == 0:
            return 1.0
        return max(0.0, min(1.0, (accept_len - 1) / self.depth))

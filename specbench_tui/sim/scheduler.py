"""Continuous batching: one loop runs prefill and decode steps for every admitted request.

This mirrors the engine's scheduler closely enough for the client to see the same behaviour:
requests wait in a queue while ``max_running_requests`` are running; a step that admits new
requests is a prefill step (running requests stall meanwhile) and yields each new request's
first token; every other step is a decode step in which all running requests advance by the
tokens their verify accepted, one streamed chunk per step.

Timing: each step's end is a deadline on ``time.perf_counter``, computed from the previous
deadline rather than from when the loop woke, so event-loop wake-up jitter (about 1 ms with
epoll) never accumulates into drift. If the loop falls far behind (an overloaded machine), the
deadline is reset rather than bursting steps to catch up.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specbench_tui.sim.cache import PrefixCache
from specbench_tui.sim.config import SimConfig
from specbench_tui.sim.logfmt import ServerLog
from specbench_tui.sim.model import PerfModel, classify_prompt
from specbench_tui.sim.textgen import (
    EOS_TOKEN_ID,
    TokenStream,
    count_tokens,
    natural_length,
    prompt_seed,
)

_DECODE_LOG_STEPS = 40
_DECODE_LOG_MIN_S = 0.5
_MAX_PREFILL_TOKENS = 16384
_RESYNC_BEHIND_S = 0.02


@dataclass(eq=False, slots=True)
class SimRequest:
    """One generation request as the scheduler sees it, and the handle its HTTP handler awaits.

    The scheduler appends output and sets ``wake``; the handler sends whatever is new since
    its last write. If the handler is slower than the steps, it sends several steps in one
    chunk, exactly as a real server does when its client lags.
    """

    rid: str
    prompt: str
    max_new_tokens: int
    temperature: float
    stream: bool
    received: float
    stops: tuple[str, ...] = ()
    ignore_eos: bool = False
    internal: bool = False
    prompt_tokens: int = 0
    cached_tokens: int = 0
    prompt_class: str = "chat"
    text: str = ""
    completion_tokens: int = 0
    verify_ct: int = 0
    finish: dict[str, Any] | None = None
    finished_at: float | None = None
    first_token_at: float | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    tokens: TokenStream | None = None
    natural_len: int | None = None
    accept_rng: random.Random = field(default_factory=random.Random)
    accept_p: float = 0.0
    step_times: list[float] = field(default_factory=list)
    step_tokens: list[int] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.finish is not None


class Stats:
    """Lifetime counters behind ``/get_server_info`` and the periodic decode log line."""

    def __init__(self) -> None:
        self.total_tokens = 0
        self.total_verify = 0
        self.last_gen_throughput = 0.0
        self.finished = 0
        self.reset_interval(time.perf_counter())

    def reset_interval(self, now: float) -> None:
        self.i_start = now
        self.i_steps = 0
        self.i_tokens = 0
        self.i_verify = 0
        self.i_draft_ms = 0.0
        self.i_verify_ms = 0.0

    @property
    def avg_accept_length(self) -> float:
        return self.total_tokens / self.total_verify if self.total_verify else 1.0


class Scheduler:
    """The single batching loop; HTTP handlers only submit requests and read their progress."""

    def __init__(
        self, cfg: SimConfig, model: PerfModel, log: ServerLog, max_total_tokens: int
    ) -> None:
        self.cfg = cfg
        self.model = model
        self.log = log
        self.max_total_tokens = max_total_tokens
        self.cap = cfg.max_running_requests or 48
        self.cache = PrefixCache()
        self.stats = Stats()
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.last_step_end = 0.0
        self._nonce = 0
        self._wakeup = asyncio.Event()
        self._stopped = False
        self._time_scale = 1.0 / (1000.0 * cfg.speed)  # simulated ms -> wall seconds
        # diverge-tp:N: as diverge, on a server of TP size N only (outputs differ across TP).
        on_tp = cfg.fault("diverge-tp")
        self._diverge = cfg.fault("diverge") is not None or (
            on_tp is not None and on_tp.value == cfg.tp_size
        )
        leak = cfg.fault("leak")
        self._leak_after = int(leak.value) if leak is not None and leak.value else None
        self._leak_armed = False  # a long request left state behind for the next one

    # -- called by handlers -------------------------------------------------------------------

    def submit(self, req: SimRequest) -> None:
        """Queue a request; its prompt-derived state is set up here, off the step path."""
        self._nonce += 1
        req.prompt_tokens = count_tokens(req.prompt)
        req.prompt_class = classify_prompt(req.prompt)
        leak_at = None
        if self._leak_armed and not req.internal:
            # The state a long request left poisons the next one a few tokens in.
            leak_at = 4 + prompt_seed(req.prompt) % 12
            self._leak_armed = False
        req.tokens = TokenStream(
            req.prompt,
            temperature=req.temperature,
            seed=self.cfg.seed,
            nonce=self._nonce,
            diverge=self._diverge,
            diverge_at=leak_at,
        )
        req.natural_len = None if req.ignore_eos else natural_length(req.prompt)
        # Seeded from the prompt and --seed only (stable across processes), so a greedy cell
        # run twice sees the same acceptance; sampled requests also vary per request.
        salt = (self.cfg.seed, self._nonce if req.temperature > 0 else 0, prompt_seed(req.prompt))
        req.accept_rng = random.Random(hash(salt))
        req.accept_p = self.model.token_accept_prob(req.prompt_class, req.temperature > 0)
        self.waiting.append(req)
        self._wakeup.set()

    def cancel(self, req: SimRequest, message: str) -> None:
        """Abort one request (client went away); the loop drops it at its next step."""
        if not req.done:
            self._finish(req, {"type": "abort", "message": message}, time.perf_counter())

    def abort_all(self, message: str) -> None:
        """Abort everything queued or running, for shutdown."""
        now = time.perf_counter()
        for req in [*self.waiting, *self.running]:
            if not req.done:
                self._finish(req, {"type": "abort", "message": message}, now)
        self.waiting.clear()
        self.running.clear()

    def stop(self) -> None:
        self._stopped = True
        self._wakeup.set()

    @property
    def busy(self) -> bool:
        return bool(self.running or self.waiting)

    # -- the loop -----------------------------------------------------------------------------

    async def run(self) -> None:
        deadline = time.perf_counter()
        while not self._stopped:
            if not self.running and not self.waiting:
                self._wakeup.clear()
                await self._wakeup.wait()
                deadline = time.perf_counter()
                self.stats.reset_interval(deadline)
                continue
            self.running = [r for r in self.running if not r.done]
            while self.waiting and self.waiting[0].done:
                self.waiting.popleft()
            if self.waiting and len(self.running) < self.cap:
                deadline = await self._prefill_step(deadline)
            elif self.running:
                deadline = await self._decode_step(deadline)

    async def _sleep_until(self, target: float) -> float:
        """Wait for a step's end; returns the time the next step should be counted from."""
        now = time.perf_counter()
        if target > now:
            await asyncio.sleep(target - now)
            return target
        await asyncio.sleep(0)  # let the handlers write what the last step produced
        return target if now - target < _RESYNC_BEHIND_S else time.perf_counter()

    async def _prefill_step(self, deadline: float) -> float:
        batch: list[SimRequest] = []
        new_tokens = cached = 0
        while self.waiting and len(self.running) + len(batch) < self.cap:
            req = self.waiting[0]
            if req.done:
                self.waiting.popleft()
                continue
            hit = self.cache.match(req.prompt)
            uncached = req.prompt_tokens - hit
            if batch and new_tokens + uncached > _MAX_PREFILL_TOKENS:
                break
            self.waiting.popleft()
            req.cached_tokens = hit
            new_tokens += uncached
            cached += hit
            batch.append(req)
        if not batch:
            return deadline
        running = len(self.running) + len(batch)
        self.log.line(
            self.log.fmt.prefill_line(
                len(batch), new_tokens, cached, self._usage(batch), running, len(self.waiting)
            )
        )
        cost_s = self.model.prefill_ms(new_tokens, len(batch)) * self._time_scale
        deadline = await self._sleep_until(deadline + cost_s)
        now = time.perf_counter()
        for req in batch:
            if req.done:
                continue
            req.first_token_at = now
            self._advance(req, 1, now, verify=False)
            if not req.done:
                self.running.append(req)
        self.last_step_end = now
        return deadline

    async def _decode_step(self, deadline: float) -> float:
        running = self.running
        cost = self.model.step_cost(len(running))
        deadline = await self._sleep_until(deadline + cost.total_ms * self._time_scale)
        now = time.perf_counter()
        stats = self.stats
        spec = self.model.algorithm is not None
        produced = verifies = 0
        for req in running:
            if req.done:
                continue
            n = self.model.sample_accept(req.accept_rng, req.accept_p) if spec else 1
            produced += self._advance(req, n, now, verify=spec)
            verifies += 1
        self.last_step_end = now
        stats.i_steps += 1
        stats.i_tokens += produced
        if spec:
            stats.i_verify += verifies
            stats.total_tokens += produced
            stats.total_verify += verifies
        stats.i_draft_ms += cost.draft_ms / self.cfg.speed
        stats.i_verify_ms += cost.verify_ms / self.cfg.speed
        if stats.i_steps >= _DECODE_LOG_STEPS or now - stats.i_start >= _DECODE_LOG_MIN_S:
            self._log_decode(now)
        return deadline

    def _advance(self, req: SimRequest, n: int, now: float, *, verify: bool) -> int:
        """Append up to ``n`` tokens to a request, finishing it where it would end."""
        limit = req.max_new_tokens - req.completion_tokens
        if req.natural_len is not None:
            limit = min(limit, req.natural_len - req.completion_tokens)
        n = max(0, min(n, limit))
        words = req.tokens.next_words(n) if req.tokens is not None else []
        finish: dict[str, Any] | None = None
        if req.stops and words:
            piece = "".join(words)
            tail_len = max(len(s) for s in req.stops)
            window = req.text[-tail_len:] + piece
            hits = [(window.find(s), s) for s in req.stops if s and s in window]
            if hits:
                pos, matched = min(hits)
                req.text = req.text[: len(req.text) - min(tail_len, len(req.text))] + window[:pos]
                finish = {"type": "stop", "matched": matched}
            else:
                req.text += piece
        else:
            req.text += "".join(words)
        req.completion_tokens += n
        if verify:
            req.verify_ct += 1
        req.step_times.append(now)
        req.step_tokens.append(n)
        if finish is None:
            if req.completion_tokens >= req.max_new_tokens:
                finish = {"type": "length", "length": req.completion_tokens}
            elif req.natural_len is not None and req.completion_tokens >= req.natural_len:
                finish = {"type": "stop", "matched": EOS_TOKEN_ID}
        if finish is not None:
            self._finish(req, finish, now)
        else:
            req.wake.set()
        return n

    def _finish(self, req: SimRequest, finish: dict[str, Any], now: float) -> None:
        req.finish = finish
        req.finished_at = now
        if finish["type"] != "abort":
            self.cache.insert(req.prompt + req.text)
            self.stats.finished += 1
            if self._leak_after is not None and (
                req.prompt_tokens + req.completion_tokens >= self._leak_after
            ):
                self._leak_armed = True
        req.wake.set()

    # -- logging ------------------------------------------------------------------------------

    def _usage(self, extra: Sequence[SimRequest] = ()) -> float:
        return self._kv_tokens(extra) / self.max_total_tokens

    def _kv_tokens(self, extra: Sequence[SimRequest] = ()) -> int:
        return sum(r.prompt_tokens + r.completion_tokens for r in (*self.running, *extra))

    def _log_decode(self, now: float) -> None:
        s = self.stats
        elapsed = max(now - s.i_start, 1e-9)
        throughput = s.i_tokens / elapsed
        s.last_gen_throughput = throughput
        accept_len = accept_rate = None
        if self.model.algorithm is not None and s.i_verify:
            accept_len = s.i_tokens / s.i_verify
            accept_rate = self.model.accept_rate(accept_len)
        kv = self._kv_tokens()
        self.log.line(
            self.log.fmt.decode_line(
                len([r for r in self.running if not r.done]),
                kv,
                kv / self.max_total_tokens,
                accept_len,
                accept_rate,
                throughput,
                len(self.waiting),
            )
        )
        if self.model.algorithm == "DDTREE" and accept_len is not None and s.i_steps:
            budget = self.model.verify_tokens - 1
            self.log.line(
                self.log.fmt.tree_line(
                    budget,
                    budget,
                    accept_len,
                    s.i_draft_ms / s.i_steps,
                    s.i_verify_ms / s.i_steps,
                )
            )
        s.reset_interval(now)

"""Prometheus counters over a cell's measured window, for acceptance from the engine's side.

A cell's acceptance must come from the requests it measured, never from a server-lifetime
average (warm-up and earlier cells included). So the counters are read at the edges of every
measured stretch of the cell and only the differences count: warm-up requests sent in between
are left out. The engine's counters move when a request finishes (SGLang) or as its tokens come
out (vLLM); a read is taken once the generation-token counter has caught up with the tokens
the client has seen, so no fixed sleep is needed, and a read that does not settle is said so.

Which counters an engine has, and how they read, is the engine adapter's
(``EngineAdapter.parse_counters``; all samples of a family summed over their label sets, e.g.
engines and ranks).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Protocol

import httpx


class CounterSource(Protocol):
    """What reading the counters needs of an engine (its adapter)."""

    metrics_path: str

    def parse_counters(self, text: str) -> Counters: ...


@dataclass(frozen=True)
class Counters:
    """Counter totals that acceptance needs; None where the server has no such counter."""

    generation_tokens: float | None = None
    verify_steps: float | None = None
    accepted_tokens: float | None = None
    draft_tokens: float | None = None
    per_position: tuple[float, ...] | None = None

    def minus(self, other: Counters) -> Counters:
        def d(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else a - b

        pos = None
        if self.per_position is not None and other.per_position is not None:
            n = max(len(self.per_position), len(other.per_position))
            mine = list(self.per_position) + [0.0] * (n - len(self.per_position))
            theirs = list(other.per_position) + [0.0] * (n - len(other.per_position))
            pos = tuple(a - b for a, b in zip(mine, theirs, strict=True))
        return Counters(
            d(self.generation_tokens, other.generation_tokens),
            d(self.verify_steps, other.verify_steps),
            d(self.accepted_tokens, other.accepted_tokens),
            d(self.draft_tokens, other.draft_tokens),
            pos,
        )

    def plus(self, other: Counters) -> Counters:
        def s(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else a + b

        pos = None
        if self.per_position is not None and other.per_position is not None:
            n = max(len(self.per_position), len(other.per_position))
            mine = list(self.per_position) + [0.0] * (n - len(self.per_position))
            theirs = list(other.per_position) + [0.0] * (n - len(other.per_position))
            pos = tuple(a + b for a, b in zip(mine, theirs, strict=True))
        return Counters(
            s(self.generation_tokens, other.generation_tokens),
            s(self.verify_steps, other.verify_steps),
            s(self.accepted_tokens, other.accepted_tokens),
            s(self.draft_tokens, other.draft_tokens),
            pos,
        )


_ZERO = Counters(0.0, 0.0, 0.0, 0.0, ())


async def scrape(engine: CounterSource, base_url: str, client: httpx.AsyncClient) -> Counters:
    resp = await client.get(base_url.rstrip("/") + engine.metrics_path)
    resp.raise_for_status()
    return engine.parse_counters(resp.text)


@dataclass
class WindowResult:
    """Counter deltas over a cell's measured stretches.

    ``settled``: every read waited until the generation-token counter had caught up with the
    tokens the client saw (else a read may have been early). ``problem``: why there are no
    deltas, or what is doubtful about them.
    """

    deltas: Counters | None
    settled: bool
    problem: str | None = None


class CounterWindow:
    """Reads the engine's counters at the edges of a cell's measured stretches.

    The cell runner calls :meth:`measure` before measured requests, :meth:`pause` before
    requests that must not count (warm-up) and at the end, and :meth:`expect` with every
    response's token count (measured or not), which tells a read when the counters are
    complete. Reading failures never raise: the window just has no result.
    """

    def __init__(
        self,
        engine: CounterSource,
        base_url: str,
        *,
        settle_timeout_s: float = 5.0,
        poll_s: float = 0.05,
    ) -> None:
        self.engine = engine
        self.base_url = base_url
        self.settle_timeout_s = settle_timeout_s
        self.poll_s = poll_s
        self._client: httpx.AsyncClient | None = None
        self._base: Counters | None = None
        self._start: Counters | None = None
        self._sum = _ZERO
        self._expected = 0
        self._exact = True
        self._settled = True
        self._counting = False
        self._problem: str | None = None

    def expect(self, output_tokens: int | None) -> None:
        if output_tokens is None:
            self._exact = False
        else:
            self._expected += output_tokens

    async def measure(self) -> None:
        if self._counting or self._problem:
            return
        self._start = await self._read()
        self._counting = self._start is not None

    async def pause(self) -> None:
        if self._problem:
            return
        if not self._counting:
            if self._base is None:
                await self._read()
            return
        end = await self._read()
        if end is not None and self._start is not None:
            self._sum = self._sum.plus(end.minus(self._start))
        self._counting = False

    def result(self) -> WindowResult:
        if self._problem:
            return WindowResult(None, False, self._problem)
        if self._base is None:
            return WindowResult(None, False, "the counters were never read")
        note = None if self._settled else "a counter read did not settle in time"
        return WindowResult(self._sum, self._settled, note)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _read(self) -> Counters | None:
        if self._client is None:
            self._client = httpx.AsyncClient(
                trust_env=False, timeout=httpx.Timeout(20.0, connect=5.0)
            )
        try:
            return await self._settled_read()
        except (httpx.HTTPError, ValueError) as exc:
            path = self.engine.metrics_path
            self._problem = f"cannot read {path}: {type(exc).__name__}: {exc}"[:240]
            return None

    async def _settled_read(self) -> Counters:
        snap = await scrape(self.engine, self.base_url, self._client)  # type: ignore[arg-type]
        if self._base is None:
            self._base = snap
            return snap
        deadline = time.monotonic() + self.settle_timeout_s
        base_gen = self._base.generation_tokens
        if self._exact and base_gen is not None and snap.generation_tokens is not None:
            target = base_gen + self._expected
            while snap.generation_tokens is not None and snap.generation_tokens < target:
                if time.monotonic() > deadline:
                    self._settled = False
                    break
                await asyncio.sleep(self.poll_s)
                snap = await scrape(self.engine, self.base_url, self._client)  # type: ignore[arg-type]
            return snap
        # Unknown token counts (a failed request): wait until two reads a moment apart agree.
        while True:
            await asyncio.sleep(0.5)
            again = await scrape(self.engine, self.base_url, self._client)  # type: ignore[arg-type]
            if again == snap:
                return again
            snap = again
            if time.monotonic() > deadline:
                self._settled = False
                return snap

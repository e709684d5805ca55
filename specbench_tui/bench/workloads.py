"""Running one cell: single-stream, multi-turn agentic, or a fixed-concurrency load.

:func:`run_cell` is the one entry point the engine calls. It returns the measured rows
(warm-up requests are sent but never recorded), the output texts for the greedy-equivalence
check, and the cell's measured window (``bench/figures.py``), taken from the measured
requests' own spans on the client's clock: warm-up, cache flushes, row building, the garbage
collection after the cell and the writes stay out of it, so that ``throughput_tok_s``
describes the measurement alone.

Pausing: ``should_stop`` is polled between requests. A request in flight is always finished
(its row is valid), then the cell returns what it has with ``stopped=True``; the engine decides
whether to keep the partial rows or to run the cell again.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specbench_tui.bench.client import BenchClient, Completion, Message, Sampling
from specbench_tui.bench.client_health import ClientHealth, ClientWatch
from specbench_tui.bench.figures import (
    SloFigures,
    Span,
    decode_total,
    measured_window,
    slo_figures,
    slo_limits_text,
    throughput,
)
from specbench_tui.bench.greedy import Output
from specbench_tui.bench.prompting import DEFAULT_PROMPTING, Prompting
from specbench_tui.engines.counters import CounterWindow
from specbench_tui.engines.registry import adapter
from specbench_tui.engines.streams import StreamMode
from specbench_tui.plan.capacity import CapacitySearch
from specbench_tui.plan.prompt_sets import Prompt, PromptLibrary, sample_prompts, session_tasks
from specbench_tui.results.cells import Cell, ServiceGroup, planned_requests
from specbench_tui.results.records import RequestRecord

OnRequest = Callable[[RequestRecord], None]
ShouldStop = Callable[[], bool]
OnNote = Callable[[str], None]  # a line on the cell's progress that no request row carries

CHARS_PER_TOKEN = 4
"""Rough size of a token in English text and code, for sizing synthetic tool output."""

_WARMUP_PROMPT = "Reply with a short greeting."


@dataclass
class CellResult:
    """What one cell produced.

    ``outputs`` maps a request key to what it generated (successful requests only), for the
    losslessness checks: ``"<prompt_id>#<repeat>"`` for single cells,
    ``"<prompt_set>/<prompt_id>#<round>"`` for concurrency cells and
    ``"<prompt_set>/<prompt_id>/s<session>/t<turn>"`` for agentic cells (turns depend on
    earlier answers, so each turn is compared on its own). ``stopped`` is True when
    ``should_stop`` ended the cell before all ``planned`` requests were measured. ``client``
    says how the client itself fared (event-loop lag, CPU share): a lagging client inflates
    every timing of the cell.
    """

    records: list[RequestRecord] = field(default_factory=list)
    outputs: dict[str, Output] = field(default_factory=dict)
    wall_s: float = 0.0
    stopped: bool = False
    planned: int = 0
    acceptance: dict[str, Any] = field(default_factory=dict)  # engines/acceptance.py columns
    client: ClientHealth | None = None
    # How the prefix cache stood for the measured requests: "cold (flushed before each
    # request)", "cold (a salt per request)", "warm", or why it could not be made cold.
    prefix_cache: str = "warm"
    # Figures the workload itself found (a capacity search's result: CAPACITY_COLUMNS).
    figures: dict[str, Any] = field(default_factory=dict)
    # The warm-up requests, not measured: [sent (UTC s), e2e s, output tokens, verify steps,
    # accepted drafts] each (``warmup_row``), for what the server's log counts beside them.
    warmups: list[list[float | None]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.stopped and len(self.records) >= self.planned

    @property
    def errors(self) -> int:
        return sum(1 for r in self.records if r.error is not None)


def warmup_row(done: Completion) -> list[float | None]:
    """A warm-up request as ``CellResult.warmups`` keeps it: when it was sent (UTC seconds),
    how long it took, what it generated and in how many verify steps (None where the server
    did not say)."""
    said = (
        done.started_at,
        done.e2e_s,
        done.output_tokens,
        done.spec_verify_ct,
        done.spec_accepted_tokens,
    )
    return [None if v is None else float(v) for v in said]  # one type: a parquet list


def tool_output(tokens: int, seed: int | str) -> str:
    """Deterministic text that looks like what a coding agent's tools return.

    A file listing, a test run or a service log, about ``tokens`` tokens long; the style and
    the content follow from ``seed``, so every config of a campaign sees the same context.
    """
    rng = random.Random(f"tool:{seed}")
    target = max(1, tokens) * CHARS_PER_TOKEN
    style = rng.randrange(3)
    lines: list[str] = []
    size = 0
    dirs = ("src", "tests", "lib", "scripts", "docs", "core", "api")
    words = ("parser", "cache", "server", "client", "config", "worker", "store", "util", "model")
    n = 0
    while size < target:
        n += 1
        a, b = rng.choice(words), rng.choice(words)
        if style == 0:
            line = (
                f"-rw-r--r-- 1 dev dev {rng.randrange(200, 90000):>6} "
                f"Mar {rng.randrange(1, 29):>2} 1{rng.randrange(10)}:{rng.randrange(60):02d} "
                f"{rng.choice(dirs)}/{a}_{b}.py"
            )
        elif style == 1:
            verdict = "PASSED" if rng.random() > 0.1 else "FAILED"
            line = (
                f"tests/test_{a}.py::test_{b}_{n} {verdict} "
                f"[{min(100, n * 3):>3}%] ({rng.random() * 2:.2f}s)"
            )
        else:
            level = rng.choice(("INFO", "INFO", "INFO", "WARNING", "DEBUG", "ERROR"))
            line = (
                f"2026-03-{rng.randrange(1, 29):02d} 12:{rng.randrange(60):02d}:"
                f"{rng.randrange(60):02d},{rng.randrange(1000):03d} {level} {a}.{b}: "
                f"request {rng.randrange(10**6)} took {rng.randrange(1, 900)} ms"
            )
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


_FOLLOW_UPS = (
    "Here is the tool output. Continue with the next step of the task.",
    "The command finished. Look at the output and fix what is wrong.",
    "That is what the tool returned. What do you change next? Show the code.",
    "Output above. Summarise what it tells us, then propose the next edit.",
)


def follow_up(seed: int | str) -> str:
    """A deterministic instruction that closes a tool-output turn."""
    return random.Random(f"follow:{seed}").choice(_FOLLOW_UPS)


class _Runner:
    """State shared by the requests of one cell: identity columns, callbacks, results."""

    def __init__(
        self,
        cell: Cell,
        group: ServiceGroup,
        client: BenchClient,
        campaign: str,
        attempt: int,
        on_request: OnRequest | None,
        should_stop: ShouldStop | None,
        result: CellResult,
        counters: CounterWindow | None = None,
        on_note: OnNote | None = None,
    ) -> None:
        self.cell = cell
        self.counters = counters
        self.on_note = on_note or (lambda _text: None)
        self.group = group
        self.client = client
        self.on_request = on_request
        self.should_stop = should_stop or (lambda: False)
        self.result = result
        self.sampling = Sampling(cell.temperature, cell.top_p, cell.top_k, cell.sampling_seed)
        self.started = False  # the first measured request is under way
        self.spans: list[Span] = []  # of the measured requests, for the measured window
        # A capacity search's levels, each a measured window of its own (warm-ups between).
        self.point_windows: list[float] | None = None
        self.identity = {
            "campaign": campaign,
            "cell_id": cell.id,
            "attempt": attempt,
            "group": group.id,
            "host": group.host or cell.host,
            "config": group.config or cell.config,
            "tp": group.tp or cell.tp,
            "workload": cell.workload,
            "kind": cell.kind,
            "max_tokens": cell.max_tokens,
            "concurrency": cell.concurrency,
        }

    async def send(self, messages: list[Message] | str) -> Completion:
        done = await self.client.generate(
            messages,
            max_tokens=self.cell.max_tokens,
            sampling=self.sampling,
            timeout_s=self.cell.timeout_s,
        )
        if self.counters is not None:
            self.counters.expect(done.output_tokens)
        return done

    async def warmup(self, batch: Sequence[list[Message] | str], rounds: int) -> None:
        """Requests that are sent and not measured: ``rounds`` times the ``batch``, all its
        requests at once (one for a single stream, a level's worth for a concurrency level).
        They take CUDA graph capture, JIT and allocator growth out of the first measured
        request, and warm the batch size a level runs at. The engine's counters are read
        around them so that they stay out of the cell's acceptance; each is kept in
        ``result.warmups`` (when and what it generated), because the server's own log counts
        it."""
        if rounds <= 0 or not batch:
            return
        if self.counters is not None:
            await self.counters.pause()
        for _ in range(rounds):
            if self.should_stop():
                break
            done = await asyncio.gather(*(self.send(messages) for messages in batch))
            self.result.warmups += [warmup_row(d) for d in done]
        if self.counters is not None:
            await self.counters.measure()

    async def mark_start(self) -> None:
        if not self.started:
            if self.counters is not None:
                await self.counters.measure()
            self.started = True

    def wall_s(self) -> float:
        if self.point_windows is not None:
            return math.fsum(self.point_windows)
        return measured_window(self.spans, concurrent=self.cell.kind == "concurrency")

    def record(
        self,
        done: Completion,
        prompt: Prompt | None,
        text_key: str | None,
        *,
        session: int | None = None,
        turn: int | None = None,
        repeat: int | None = None,
        concurrency: int | None = None,
    ) -> RequestRecord:
        identity = (
            self.identity if concurrency is None else {**self.identity, "concurrency": concurrency}
        )
        rec = RequestRecord(
            **identity,
            prompt_set=prompt.set_name if prompt else self.cell.prompt_set,
            prompt_id=prompt.id if prompt else None,
            session=session,
            turn=turn,
            repeat=repeat,
            **done.measurements(),
        )
        self.result.records.append(rec)
        if done.span is not None:
            self.spans.append(done.span)
        if text_key is not None and done.error is None and text_key not in self.result.outputs:
            ids = done.output_ids
            self.result.outputs[text_key] = Output(done.text, tuple(ids) if ids else None)
        if self.on_request is not None:
            self.on_request(rec)
        return rec


def _pool(cell: Cell, library: PromptLibrary, seed: int) -> list[Prompt]:
    """All prompts of the cell's sets (sampled per set when ``samples`` is set)."""
    out: list[Prompt] = []
    for name in cell.prompts or ((cell.prompt_set,) if cell.prompt_set else ()):
        out.extend(sample_prompts(library.load(name), cell.samples, seed))
    if not out:
        raise ValueError(f"cell {cell.name}: no prompt sets to draw from")
    return out


async def _run_single(run: _Runner, prompts: list[Prompt], cold: str | None) -> None:
    """``cold``: how each measured request gets a cold prefix cache ("flush": the server's
    cache is emptied before it; "salt": the client salts every request), None to keep it."""
    cell = run.cell
    run.result.prefix_cache = {
        "flush": "cold (cache flushed before each request)",
        "salt": "cold (a cache salt per request)",
    }.get(cold or "", "warm")
    for prompt in prompts:
        msgs = prompt.messages()
        await run.warmup([msgs], cell.warmup)
        await run.mark_start()
        for rep in range(cell.repeats):
            if run.should_stop():
                run.result.stopped = True
                return
            if cold == "flush":
                refused = await run.client.flush_cache()
                if refused is not None:  # measured warm, and said so, rather than not at all
                    run.result.prefix_cache = f"warm: the server refused a flush ({refused})"
                    cold = None
            done = await run.send(msgs)
            run.record(done, prompt, f"{prompt.id}#{rep}", repeat=rep)


async def _run_agentic(run: _Runner, pool: list[Prompt], seed: int) -> None:
    """Sessions with a growing context. A question with turns of its own (MT-Bench) is a
    session of those turns, each sent after the previous answer; any other prompt starts a
    coding agent's session, each later turn a tool's output and an instruction."""
    cell = run.cell
    await run.warmup([_WARMUP_PROMPT], cell.warmup)
    await run.mark_start()
    for s, task in enumerate(session_tasks(pool, cell.sessions, cell.workload, seed)):
        msgs: list[Message] = task.messages()
        own = task.session_turns
        for t in range(min(cell.turns, own) if own else cell.turns):
            if run.should_stop():
                run.result.stopped = True
                return
            if t > 0 and own:
                msgs = [*msgs, {"role": "user", "content": task.later_turns[t - 1]}]
            elif t > 0:
                key = f"{seed}:{task.set_name}/{task.id}:{s}:{t}"
                output = tool_output(cell.tool_output_tokens, key)
                msgs = [
                    *msgs,
                    {"role": "user", "content": f"```\n{output}\n```\n{follow_up(key)}"},
                ]
            done = await run.send(msgs)
            run.record(done, task, f"{task.set_name}/{task.id}/s{s}/t{t}", session=s, turn=t)
            # A failed turn still extends the conversation (with what arrived, maybe nothing)
            # so the session keeps its shape and later turns stay comparable across configs.
            msgs = [*msgs, {"role": "assistant", "content": done.text}]


async def _run_concurrency(run: _Runner, pool: list[Prompt], seed: int) -> None:
    cell = run.cell
    order = list(pool)
    random.Random(f"{seed}:concurrency:{cell.workload}").shuffle(order)
    level = max(1, cell.concurrency or 1)
    await run.warmup([order[i % len(order)].messages() for i in range(level)], cell.warmup)
    total = cell.requests
    next_index = 0
    await run.mark_start()

    async def worker() -> None:
        nonlocal next_index
        while next_index < total:
            if run.should_stop():
                run.result.stopped = True
                return
            i = next_index
            next_index += 1
            prompt = order[i % len(order)]
            done = await run.send(prompt.messages())
            rnd = i // len(order)
            run.record(done, prompt, f"{prompt.set_name}/{prompt.id}#{rnd}", repeat=rnd)

    level = max(1, cell.concurrency or 1)
    await asyncio.gather(*(worker() for _ in range(min(level, max(total, 1)))))


async def _run_capacity(run: _Runner, pool: list[Prompt], seed: int) -> None:
    """A capacity search (``plan/capacity.py``) on the running server: at each level it asks
    for, ``level`` clients send requests back to back, each client's first ``warmup`` ones not
    counted, until ``requests`` measured ones are done; those are judged by the cell's SLO
    (``bench/figures.py``) and their rows carry the level as ``concurrency``.

    The warm-up is each client's, not a few requests before the level: a level starts from an
    idle server, whose burst of first requests is admitted over a few prefill steps that the
    first decodes wait on, so the measured requests are the ones sent once the level runs.
    For the same reason the engine's counters, which cannot part one client's warm-up from
    another's measured request, are not read: the cell's acceptance is its requests' own.
    Every level draws the same prompts in the same order, so levels differ by load alone.
    A stop ends the search; the level under way when it came is left out of the figures."""
    cell = run.cell
    limits = dict(cell.slo)
    order = list(pool)
    random.Random(f"{seed}:capacity:{cell.workload}").shuffle(order)
    search = CapacitySearch(cell.levels, cell.max_points)
    run.point_windows = []
    points: list[Point] = []
    if run.counters is not None:
        await run.counters.pause()  # read once, never measured (see above)
    run.started = True
    while (level := search.next_level()) is not None:
        if run.should_stop():
            run.result.stopped = True
            break
        first = len(run.result.records)
        spans_from = len(run.spans)
        next_index = 0

        async def worker(client: int, level: int = level) -> None:
            nonlocal next_index
            for k in range(cell.warmup):
                if run.should_stop() or next_index >= cell.requests:
                    return
                await run.send(order[(client + k) % len(order)].messages())
            while next_index < cell.requests:
                if run.should_stop():
                    run.result.stopped = True
                    return
                i = next_index
                next_index += 1
                prompt = order[i % len(order)]
                done = await run.send(prompt.messages())
                run.record(done, prompt, None, repeat=i // len(order), concurrency=level)

        await asyncio.gather(*(worker(c) for c in range(min(level, cell.requests))))
        window = measured_window(run.spans[spans_from:], concurrent=True)
        run.point_windows.append(window)
        if run.result.stopped:
            break
        rows = run.result.records[first:]
        fig = slo_figures(rows, window, limits, cell.slo_target)
        search.record(level, fig.met)
        decode = decode_total(r for r in rows if r.error is None).rate
        points.append((level, fig, throughput(rows, window), decode))
        run.on_note(capacity_progress(cell.name, level, fig, search))
    if not run.result.stopped:
        run.result.planned = len(run.result.records)
    run.result.figures = capacity_figures(search, points, limits, cell.slo_target)


Point = tuple[int, SloFigures, float | None, float | None]  # level, SLO, throughput, decode


def capacity_progress(name: str, level: int, fig: SloFigures, search: CapacitySearch) -> str:
    """One line per level a capacity search measured: whether it met the SLO, and the
    bracket so far, so the operator sees the search move while its one cell runs."""
    lo_hi = fig.interval
    share = "no requests" if fig.share is None else f"{fig.share:.0%}"
    if lo_hi is not None:
        share += f" [{lo_hi[0]:.2f}, {lo_hi[1]:.2f}]"
    verdict = "meets" if fig.met else "misses"
    passed = "-" if search.passed is None else str(search.passed)
    failed = "-" if search.failed is None else str(search.failed)
    return (
        f"{name}: {level} clients {verdict} the SLO ({share} good); "
        f"capacity bracket {passed} .. {failed}, {len(search.tried)} levels tried"
    )


def capacity_figures(
    search: CapacitySearch, points: list[Point], limits: dict[str, float], target: float
) -> dict[str, Any]:
    """A capacity cell's columns (``results/records.py`` CAPACITY_COLUMNS) from its search and
    the figures of each level tried, in the order tried."""
    passed = search.passed
    return {
        "max_concurrency_under_slo": passed,
        "capacity_pass_level": passed,
        "capacity_fail_level": search.failed,
        "capacity_note": search.note,
        "capacity_levels": [lv for lv, *_ in points],
        "capacity_shares": [f.share for _, f, *_ in points],
        "capacity_share_lo": [(f.interval or (None, None))[0] for _, f, *_ in points],
        "capacity_share_hi": [(f.interval or (None, None))[1] for _, f, *_ in points],
        "capacity_goodput_req_s": [f.goodput for _, f, *_ in points],
        "capacity_throughput_tok_s": [t for *_, t, _ in points],
        "capacity_decode_tok_s": [d for *_, d in points],
        "slo_target": target,
        "slo_limits": slo_limits_text(limits),
    }


async def run_cell(
    cell: Cell,
    group: ServiceGroup,
    base_url: str,
    *,
    campaign: str,
    attempt: int,
    seed: int,
    prompts: PromptLibrary,
    on_request: OnRequest | None = None,
    should_stop: ShouldStop | None = None,
    client: BenchClient | None = None,
    prompting: Prompting = DEFAULT_PROMPTING,
    result: CellResult | None = None,
    model: str | None = None,
    stream_mode: StreamMode = "auto",
    counters: CounterWindow | None = None,
    watch: ClientWatch | None = None,
    on_note: OnNote | None = None,
) -> CellResult:
    """Run one cell against a healthy server and return its rows.

    Request failures are rows with ``error`` set, never exceptions; this raises only for bad
    input (a missing or malformed prompt set in ``prompts``, a template that fails on a prompt:
    :class:`InputError`). ``prompting`` is the group's template (the cell's kwargs are put
    on it here). Pass ``client`` to reuse one
    connection pool across the cells of a service group; otherwise one is opened and closed
    here, sized for the cell's concurrency, sending ``model`` (the served model name) and
    reading native streams in ``stream_mode``. ``counters``, when given, is read at the edges
    of the measured requests (warm-up left out); its result is the caller's. ``result`` is filled as
    requests finish, so a caller that cancels the cell (an abort) still has every request
    that completed. The cell runs
    under ``watch`` (a default :class:`ClientWatch` when None: loop lag and CPU share
    measured, GC kept out of the cell).
    """
    own = client is None
    cold_cache = adapter(group.engine).cold_cache
    if client is None:
        client = BenchClient(
            base_url,
            group.api,
            engine=group.engine,
            concurrency=cell.concurrency or max(cell.levels, default=1),
            prompting=prompting.with_kwargs(dict(cell.chat_template_kwargs)),
            model=model,
            stream_mode=stream_mode,
            cache_salt=cold_cache == "salt" and cell.prefix_cache == "cold",
            speculative=group.speculative,
        )
    result = result if result is not None else CellResult()
    run = _Runner(
        cell, group, client, campaign, attempt, on_request, should_stop, result, counters, on_note
    )
    watch = watch or ClientWatch()
    try:
        async with watch:
            cold = cold_cache if cell.prefix_cache == "cold" else None
            await _run_kind(run, prompts, seed, cold)
    finally:
        run.result.wall_s = run.wall_s()
        run.result.client = watch.health
        try:
            if counters is not None:
                await counters.pause()  # the last read, after the last measured request
        finally:  # a second cancellation (an abort on a dead server) must not leak the pool
            if own:
                await client.aclose()
    return run.result


async def _run_kind(run: _Runner, library: PromptLibrary, seed: int, cold: str | None) -> None:
    cell = run.cell
    if cell.kind == "single":
        names = (cell.prompt_set,) if cell.prompt_set else cell.prompts
        prompts: list[Prompt] = []
        for name in names:
            prompts.extend(sample_prompts(library.load(name), cell.samples, seed))
        run.result.planned = len(prompts) * cell.repeats
        await _run_single(run, prompts, cold)
    elif cell.kind == "agentic":
        run.result.planned = planned_requests(cell)
        await _run_agentic(run, _pool(cell, library, seed), seed)
    elif cell.kind == "concurrency":
        run.result.planned = planned_requests(cell)
        await _run_concurrency(run, _pool(cell, library, seed), seed)
    elif cell.kind == "capacity":
        run.result.planned = planned_requests(cell)
        await _run_capacity(run, _pool(cell, library, seed), seed)
    else:
        raise ValueError(f"cell {cell.name}: unknown workload kind {cell.kind!r}")

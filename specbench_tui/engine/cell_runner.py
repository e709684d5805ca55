"""Running one cell's attempt on a healthy server and recording what it amounts to.

The order of writes is the crash-safety contract: the attempt's rows (and output texts) are
durable before the event that ends the attempt. An abort cancels the requests in flight after
a short grace; the requests that completed are kept as the attempt's rows (never counted,
since the attempt is re-queued), and the cell runs whole on resume.

A request lost to a server that went away (nothing listens, the connection was cut, or the
engine answers that it is dead) stops the cell at once: nothing more is sent, the requests in
flight are cut after the grace, and once the death is confirmed (the process exited, or the
engine said so, or the server fails its health check) the attempt is set aside as
interrupted and the group runner restarts the server. A cell is never done with a request
lost to a dead server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from specbench_tui.bench.client import went_away
from specbench_tui.bench.conditions import (
    CPU_FILES,
    CpuReading,
    cpu_conditions,
    parse_cpu,
)
from specbench_tui.bench.figures import mark_bursts, slo_columns
from specbench_tui.bench.greedy import greedy_warnings
from specbench_tui.bench.metrics import summarize
from specbench_tui.bench.prompting import DEFAULT_PROMPTING, Prompting
from specbench_tui.bench.workloads import CellResult, run_cell
from specbench_tui.engine.context import RunContext
from specbench_tui.engine.run_control import GroupHandle, StorageFailed
from specbench_tui.engine.verdict import SERVER_DIED, Verdict, judge
from specbench_tui.engines.acceptance import cell_acceptance
from specbench_tui.engines.counters import CounterWindow
from specbench_tui.engines.facts import ServerFacts
from specbench_tui.engines.registry import adapter, engine_dead
from specbench_tui.errors import describe
from specbench_tui.hosts.host import Host
from specbench_tui.hosts.service import Service
from specbench_tui.plan.estimate import cell_requests
from specbench_tui.results.cells import Cell, ServiceGroup
from specbench_tui.results.events import (
    CellFailed,
    CellFinished,
    CellQueued,
    CellSkipped,
    CellStarted,
    RequestDone,
)
from specbench_tui.results.files import StorageError
from specbench_tui.results.records import RequestRecord

log = logging.getLogger(__name__)

T = TypeVar("T")

# After a lost connection, how long the server's process gets to show that it is going (an
# engine's API server can exit a second or so after its engine core died) before its health is
# asked.
DEATH_SETTLE_S = 3.0
# How long a read of the host's CPU counters at a cell's edge may take (one round trip).
CPU_READ_S = 5.0


class DeathWatch:
    """The first sign, among one attempt's requests, that the server went away: an error
    the transport gives when nothing answers or the connection is cut, or the engine's own
    "I am dead" answer (``engines.registry.engine_dead``)."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.sign: str | None = None
        # The engine's own answer that it is dead, in words: no doubt left.
        self.engine_said: str | None = None

    def see(self, record: RequestRecord) -> None:
        err = record.error
        if self.sign is not None or not err:
            return
        said = engine_dead(self.engine, err)
        if said is not None:
            self.sign, self.engine_said = err, said
        elif went_away(err):
            self.sign = err


async def confirm_death(
    svc: Service, watch: DeathWatch, link_dropped: Callable[[], bool]
) -> str | None:
    """Why the server is dead, in words for a notice; None when it is not (or when the link
    to its host dropped, which is not the server's doing). A lost connection alone is
    confirmed by the process ending, or by a failed health check once it had a moment."""
    if link_dropped():
        return None
    if not svc.alive():
        return svc.ended_said()
    if watch.sign is None:
        return None
    if watch.engine_said:
        return f"the engine answered that it is dead, {watch.engine_said} ({watch.sign})"
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(svc.wait_exit(), DEATH_SETTLE_S)
    if link_dropped():
        return None
    if not svc.alive():
        return f"{svc.ended_said()} ({watch.sign})"
    if await svc.check_health() or link_dropped():
        return None  # it answers: the loss was the connection's, judged with the rows
    return f"a request was lost ({watch.sign}) and its health check fails ({svc.last_health})"


def request_done_event(record: RequestRecord, done: int, total: int) -> RequestDone:
    """The live event for one measured request."""
    return RequestDone(
        cell_id=record.cell_id,
        group=record.group,
        ttft_s=record.ttft_s,
        e2e_s=record.e2e_s,
        output_tokens=record.output_tokens,
        output_tok_s=record.output_tok_s,
        accept_length=record.accept_length,
        error=record.error,
        done=done,
        total=total,
    )


async def durably(ctx: RunContext, write: Callable[[], T]) -> T:
    """Do one results write, waiting for the disk when it is full: the run holds (its gate
    is closed) until the write succeeds, and gives up after the plan's storage wait. It
    starts once the log holds every event emitted before it (the order of the boundaries a
    resume relies on: a cell's start before its rows, its rows before the event ending it).

    The write runs in a worker thread: building and syncing a cell's rows takes tens of
    milliseconds, and in a packed run the neighbours' streams are being timed on this loop."""
    hub = ctx.hub
    await hub.durable()  # the events before this write are on disk before it, as they were
    loop = asyncio.get_running_loop()
    since = loop.time()
    while True:
        try:
            out = await _off_loop(write)
        except StorageError as exc:
            if not exc.recoverable or loop.time() - since > hub.storage_wait_s:
                hub.give_up(exc)
                raise StorageFailed(exc) from exc
            if ctx.control.storage_error is None:
                hub.notice(
                    f"{exc}; the campaign waits (servers keep running) and goes on once "
                    "the write succeeds",
                    "error",
                )
            ctx.control.storage_down(exc)
            await asyncio.sleep(hub.storage_retry_s)
            continue
        if ctx.control.storage_error is not None and not hub.unwritten:
            ctx.control.storage_up()
            hub.notice("results are written again; the campaign goes on")
        return out


async def _off_loop(write: Callable[[], T]) -> T:
    """``write()`` in a worker thread. A cancellation waits for the write to end before it
    goes on, so nothing writes the same file behind the caller's back; the rows are then
    durable with no event that ends their attempt, the boundary a resume already handles
    (they are kept as an interrupted attempt)."""
    task = asyncio.ensure_future(asyncio.to_thread(write))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        try:
            await task
        except Exception as exc:  # the cancellation goes on; what the write raised is told
            log.warning("a write under a cancellation failed: %s", describe(exc))
        raise


async def run_one(
    ctx: RunContext,
    cell: Cell,
    group: ServiceGroup,
    svc: Service,
    handle: GroupHandle,
    facts: ServerFacts,
    prompting: Prompting | None = None,
    host: Host | None = None,
) -> str | None:
    """Run one attempt of ``cell`` and record how it ended. The engine's acceptance
    counters are read around its measured requests where the server exposes them, and the
    host's CPU counters (``bench/conditions.py``) at its edges where ``host`` is given;
    ``prompting`` is the group's template (None: ChatML, for a caller that found none).
    Returns why the server is dead when it died under the attempt (which is then set aside,
    unless the operator skipped it), else None."""
    attempt = ctx.state.cells[cell.id].attempt + 1
    planned = cell_requests(cell, ctx.plan.prompts)[0]
    cpu_before = await read_cpu(host)  # before the cell is said to start: a healthy link
    ctx.hub.emit(
        CellStarted(
            cell_id=cell.id, group=group.id, cell=cell.name, attempt=attempt, requests=planned
        )
    )
    done = 0
    watch = DeathWatch(facts.engine)

    def on_request(rec: RequestRecord) -> None:
        nonlocal done
        done += 1
        watch.see(rec)
        ctx.hub.emit(request_done_event(rec, done, planned))

    result = CellResult()
    handle.cell, handle.stop = cell, None
    drops = svc.link_drops  # a change: the link to the host dropped during the cell

    def link_dropped() -> bool:
        return svc.link_drops != drops

    engine = adapter(facts.engine)
    window = CounterWindow(engine, svc.base_url) if facts.metrics else None
    task = asyncio.ensure_future(
        run_cell(
            cell,
            group,
            svc.base_url,
            campaign=ctx.spec.campaign.name,
            attempt=attempt,
            seed=ctx.spec.campaign.seed,
            prompts=ctx.plan.prompts,
            on_request=on_request,
            should_stop=lambda: (
                handle.stop is not None
                or not svc.alive()
                or link_dropped()
                or watch.sign is not None
            ),
            result=result,
            model=facts.served_model,
            stream_mode=facts.stream_mode,
            counters=window,
            prompting=prompting or DEFAULT_PROMPTING,
            on_note=ctx.hub.notice,  # a capacity search's levels, as it measures them
        )
    )
    handle.task = task
    try:
        await _await_cell(
            ctx, task, handle, lambda: link_dropped() or watch.sign is not None or not svc.alive()
        )
    except asyncio.CancelledError:
        if not task.cancelled() or _cancelling():
            raise
        result.stopped = True  # an abort, the link or the server's death cut the requests
    except Exception as exc:  # whatever broke the cell fails that cell, said; the run goes on
        handle.cell = handle.task = None
        await _fail(ctx, cell, attempt, describe(exc), [])
        return None
    finally:
        handle.cell = handle.task = None
        if not task.done():  # this task itself was cancelled: take the cell down with it
            task.cancel()
        if window is not None:
            await window.aclose()
    result.acceptance = cell_acceptance(
        result.records,
        window.result() if window is not None else None,
        engine=engine.name,
        speculative=group.speculative,
    )
    result.acceptance["engine"] = engine.name
    result.acceptance["engine_version"] = facts.version
    # Only after a cell that ran whole on a live server: after a cut (a link that dropped, a
    # server that went away, an abort), the host is the group runner's to look at, and a
    # read through a link that is going down would race its reconnect.
    whole = result.complete and not result.stopped and not link_dropped() and svc.alive()
    cpu_after = await read_cpu(host) if whole else None
    result.figures.update(cpu_conditions(cpu_before, cpu_after))
    death = await confirm_death(svc, watch, link_dropped)
    await conclude(
        ctx, cell, group, svc, attempt, result, handle, link_dropped(), death is not None
    )
    return death  # dead whatever became of the cell (a skip still skips): restarted


async def read_cpu(host: Host | None) -> CpuReading | None:
    """The host's CPU counters now; None without a host or where they cannot be read (a
    condition is a record, never a reason for a cell to fail)."""
    if host is None:
        return None
    try:
        got = await asyncio.wait_for(host.read_files(CPU_FILES), CPU_READ_S)
    except Exception as exc:  # a record, never a cell's failure: a transport's error included
        log.debug("host CPU counters not read: %s", describe(exc))
        return None
    texts = [got.get(p) for p in CPU_FILES]
    return parse_cpu(*texts, at=time.monotonic())


def _cancelling() -> bool:
    current = asyncio.current_task()
    return current is not None and current.cancelling() > 0


async def _await_cell(
    ctx: RunContext,
    task: asyncio.Future[CellResult],
    handle: GroupHandle,
    cut: Callable[[], bool],
) -> None:
    """Wait for the cell; once an abort is asked, or ``cut`` says the link to the host
    dropped or the server went away, give requests in flight a moment, then cancel them.
    None must wait a 10-minute request timeout: a request forwarded over a link that died,
    or sent to a server whose engine is gone, may never hear of it."""
    while True:
        done, _ = await asyncio.wait({task}, timeout=0.2)
        if done:
            task.result()
            return
        if handle.stop == "abort" or cut():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(task), ctx.options.abort_grace_s)
            if not task.done():
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            task.result()  # re-raises the cancellation for the caller to tell apart
            return


async def conclude(
    ctx: RunContext,
    cell: Cell,
    group: ServiceGroup,
    svc: Service,
    attempt: int,
    result: CellResult,
    handle: GroupHandle,
    link_dropped: bool = False,
    server_dead: bool = False,
) -> Verdict:
    """Write the attempt's rows, judge it, and publish the event that ends it. A cell whose
    link to its host dropped is set aside (its rows kept as an interrupted attempt) with a
    ``cell_queued`` by "host unreachable"; it runs again once the host is back. One whose
    server died is set aside by "server died" and runs again on the next server."""
    mark_bursts(result.records)  # before the rows are written and summed up
    await durably(ctx, lambda: ctx.store.write_cell_requests(cell.id, attempt, result.records))
    errors = [r.error for r in result.records if r.error]
    verdict = judge(
        requests=len(result.records),
        errors=errors,
        complete=result.complete,
        stop=handle.stop,
        server_alive=svc.alive(),
        max_error_share=ctx.spec.checks.max_error_share,
        link_dropped=link_dropped,
        server_dead=server_dead,
    )
    if verdict.outcome == "requeue" and verdict.reason == SERVER_DIED and group.url is not None:
        # A running server is never restarted, so nothing would run the cell again.
        verdict = Verdict("failed", svc.ended_said())
    hub = ctx.hub
    if verdict.outcome == "done":
        if cell.temperature == 0 and result.outputs:
            outputs = {k: o.to_json() for k, o in result.outputs.items()}
            await durably(ctx, lambda: ctx.store.write_cell_texts(cell.id, attempt, outputs))
        slo = ctx.spec.slo
        figures = {
            **summarize(result.records, result.wall_s),
            **(
                slo_columns(result.records, result.wall_s, slo.limits(), slo.target)
                if slo is not None and cell.kind == "concurrency"
                else {}
            ),
            **result.figures,  # what the workload found (a capacity search)
            **result.acceptance,
            **(result.client.figures() if result.client else {}),
            "prefix_cache": result.prefix_cache,
            "warmup_requests": result.warmups or None,
        }
        check = figures.get("acceptance_check") or ""
        if check.startswith("disagree"):
            hub.notice(f"{cell.name}: acceptance {check}", "warning")
        hub.emit(
            CellFinished(
                cell_id=cell.id,
                group=group.id,
                cell=cell.name,
                attempt=attempt,
                requests=len(result.records),
                errors=len(errors),
                wall_s=round(result.wall_s, 4),
                figures={k: v for k, v in figures.items() if k not in ("requests", "errors")},
            )
        )
        ctx.energy.cell_finished(cell.id, result.records, concurrent=cell.kind == "concurrency")
        _check_greedy(ctx, cell)
    elif verdict.outcome == "failed":
        tail = svc.log_tail(20 if not svc.alive() else 10)
        await _fail(ctx, cell, attempt, verdict.reason, tail)
    elif verdict.outcome == "skipped":
        hub.emit(
            CellSkipped(
                cell_id=cell.id,
                group=group.id,
                cell=cell.name,
                attempt=attempt,
                reason=verdict.reason,
                by="operator",
            )
        )
    else:
        hub.emit(
            CellQueued(
                cell_id=cell.id,
                group=group.id,
                cell=cell.name,
                attempt=attempt + 1,
                by=verdict.reason,
            )
        )
    ctx.store.refresh_views(ctx.state, after=hub.durable)
    return verdict


async def _fail(ctx: RunContext, cell: Cell, attempt: int, reason: str, tail: list[str]) -> None:
    ctx.hub.emit(
        CellFailed(
            cell_id=cell.id,
            group=cell.group,
            cell=cell.name,
            attempt=attempt,
            reason=reason,
            log_tail=tail,
        )
    )


def _check_greedy(ctx: RunContext, cell: Cell) -> None:
    baseline = ctx.spec.campaign.baseline
    if not (ctx.spec.checks.greedy_equivalence and baseline):
        return
    state = ctx.state
    done = [c.cell for c in state.cells.values() if c.status == "done" and c.cell is not None]

    def texts_of(cid: str) -> dict[str, object]:
        return ctx.store.read_cell_texts(cid, state.cells[cid].attempt)

    for text in greedy_warnings(cell, done, baseline, texts_of):
        ctx.hub.notice(text, "warning")

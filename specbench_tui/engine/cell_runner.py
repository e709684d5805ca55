"""Running one cell's attempt on a healthy server and recording what it amounts to.

The order of writes is the crash-safety contract: the attempt's rows (and output texts) are
durable before the event that ends the attempt. An abort cancels the requests in flight after
a short grace; the requests that completed are kept as the attempt's rows (never counted,
since the attempt is re-queued), and the cell runs whole on resume.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TypeVar

from specbench_tui.bench.greedy import greedy_warnings
from specbench_tui.bench.metrics import summarize
from specbench_tui.bench.prompting import DEFAULT_PROMPTING, Prompting
from specbench_tui.bench.workloads import CellResult, run_cell
from specbench_tui.engine.context import RunContext
from specbench_tui.engine.run_control import GroupHandle, StorageFailed
from specbench_tui.engine.verdict import Verdict, judge
from specbench_tui.engines.acceptance import cell_acceptance
from specbench_tui.engines.counters import CounterWindow
from specbench_tui.engines.facts import ServerFacts
from specbench_tui.engines.registry import adapter
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

T = TypeVar("T")


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
    is closed) until the write succeeds, and gives up after the plan's storage wait.

    The write runs in a worker thread: building and syncing a cell's rows takes tens of
    milliseconds, and in a packed run the neighbours' streams are being timed on this loop."""
    hub = ctx.hub
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
        with contextlib.suppress(Exception):
            await task
        raise


async def run_one(
    ctx: RunContext,
    cell: Cell,
    group: ServiceGroup,
    svc: Service,
    handle: GroupHandle,
    facts: ServerFacts,
    prompting: Prompting | None = None,
) -> None:
    """Run one attempt of ``cell`` and record how it ended. The engine's acceptance
    counters are read around its measured requests where the server exposes them;
    ``prompting`` is the group's template (None: ChatML, for a caller that found none)."""
    attempt = ctx.state.cells[cell.id].attempt + 1
    planned = cell_requests(cell, ctx.plan.prompts)[0]
    ctx.hub.emit(
        CellStarted(
            cell_id=cell.id, group=group.id, cell=cell.name, attempt=attempt, requests=planned
        )
    )
    done = 0

    def on_request(rec: RequestRecord) -> None:
        nonlocal done
        done += 1
        ctx.hub.emit(request_done_event(rec, done, planned))

    result = CellResult()
    handle.cell, handle.stop = cell, None
    drops = svc.link_drops  # a change: the link to the host dropped during the cell
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
                handle.stop is not None or not svc.alive() or svc.link_drops != drops
            ),
            result=result,
            model=facts.served_model,
            stream_mode=facts.stream_mode,
            counters=window,
            prompting=prompting or DEFAULT_PROMPTING,
        )
    )
    handle.task = task
    try:
        await _await_cell(ctx, task, handle, lambda: svc.link_drops != drops)
    except asyncio.CancelledError:
        if not task.cancelled() or _cancelling():
            raise
        result.stopped = True  # an abort cut the requests in flight
    except Exception as exc:
        handle.cell = handle.task = None
        await _fail(ctx, cell, attempt, f"{type(exc).__name__}: {exc}", [])
        return
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
    if result.errors and svc.alive() and svc.link_drops == drops:
        # Failed requests often mean the server is going down; its exit status may lag
        # behind the broken connections by a moment.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(svc.wait_exit(), 0.5)
    await conclude(ctx, cell, group, svc, attempt, result, handle, svc.link_drops != drops)


def _cancelling() -> bool:
    current = asyncio.current_task()
    return current is not None and current.cancelling() > 0


async def _await_cell(
    ctx: RunContext,
    task: asyncio.Future[CellResult],
    handle: GroupHandle,
    link_dropped: Callable[[], bool],
) -> None:
    """Wait for the cell; once an abort is asked or the link to the host drops, give
    requests in flight a moment, then cancel them. Neither must wait a 10-minute request
    timeout: a request forwarded over a link that died may never hear of it."""
    while True:
        done, _ = await asyncio.wait({task}, timeout=0.2)
        if done:
            task.result()
            return
        if handle.stop == "abort" or link_dropped():
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
) -> Verdict:
    """Write the attempt's rows, judge it, and publish the event that ends it. A cell whose
    link to its host dropped is set aside (its rows kept as an interrupted attempt) with a
    ``cell_queued`` by "host unreachable"; it runs again once the host is back."""
    await durably(ctx, lambda: ctx.store.write_cell_requests(cell.id, attempt, result.records))
    errors = [r.error for r in result.records if r.error]
    verdict = judge(
        requests=len(result.records),
        errors=errors,
        complete=result.complete,
        stop=handle.stop,
        server_alive=svc.alive(),
        exit_code=svc.exit_code,
        max_error_share=ctx.spec.checks.max_error_share,
        link_dropped=link_dropped,
    )
    hub = ctx.hub
    if verdict.outcome == "done":
        if cell.temperature == 0 and result.outputs:
            outputs = {k: o.to_json() for k, o in result.outputs.items()}
            await durably(ctx, lambda: ctx.store.write_cell_texts(cell.id, attempt, outputs))
        figures = {
            **summarize(result.records, result.wall_s),
            **result.acceptance,
            **(result.client.figures() if result.client else {}),
            "prefix_cache": result.prefix_cache,
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
    ctx.store.refresh_views(ctx.state)
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

"""The campaign engine: runs service groups and their cells, publishes events, takes commands.

One asyncio task drives the plan: for each service group with cells left, clear the GPUs, start
the server, wait until healthy, run the cells, stop the server. Everything observable leaves as
an event; consoles (in-process, detached, headless) see only those and steer only through
``send``. State the scheduler needs lives here and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import os
import signal
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from specbench_tui.bench.greedy import greedy_warnings
from specbench_tui.bench.logparse import LogParser
from specbench_tui.bench.metrics import summarize
from specbench_tui.bench.workloads import CellResult, request_done_event, run_cell
from specbench_tui.engine.commands import Command
from specbench_tui.engine.operator import OperatorCommands
from specbench_tui.engine.store import ResultsStore
from specbench_tui.errors import InputError
from specbench_tui.hosts.host import Host, SshSettings, make_host
from specbench_tui.hosts.service import Service, ServiceError
from specbench_tui.plan.estimate import cell_requests
from specbench_tui.plan.expand import expand
from specbench_tui.plan.loader import Plan
from specbench_tui.results.cells import Cell, ServiceGroup
from specbench_tui.results.events import (
    CampaignFinished,
    CampaignStarted,
    CellFailed,
    CellFinished,
    CellQueued,
    CellStarted,
    Event,
    GpuSample,
    GroupFinished,
    GroupStarted,
    LogLine,
    Notice,
    ServiceFailed,
    ServiceReady,
)
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.records import RequestRecord

EXIT_OK, EXIT_FAILED, EXIT_ABORTED = 0, 1, 130
T = TypeVar("T")
_END = object()


@dataclass(frozen=True)
class CampaignOptions:
    sim: bool = False
    fresh: bool = False
    only: str | None = None
    rerun_failed: bool = False
    control_socket: bool = False
    gpu_free_timeout_s: float = 300.0
    stop_grace_s: float = 30.0
    server_restarts: int = 1  # restarts of a group's server after it dies mid-cell
    telemetry_interval_s: float = 1.0
    live_history: int = 2000  # live events kept for a console that attaches late
    ssh_config: str | None = None  # like ``ssh -F FILE``; None: ~/.ssh/config


class Campaign(OperatorCommands):
    """A prepared campaign; ``run()`` drives it, ``subscribe()``/``send()`` observe and steer."""

    def __init__(self, plan: Plan, layout: ResultsLayout, options: CampaignOptions) -> None:
        self.plan = plan
        self.layout = layout
        self.options = options
        self.spec = plan.spec
        exp = expand(plan, sim=options.sim)
        self.groups: list[ServiceGroup] = exp.groups
        self.cells: dict[str, Cell] = {c.id: c for c in exp.cells}
        self.store = ResultsStore(layout)
        self.status: dict[str, str] = {}
        self.attempts: dict[str, int] = {}
        self.reasons: dict[str, str] = {}
        self._durable: list[Event] = []
        self._live: deque[Event] = deque(maxlen=options.live_history)
        self._subs: set[asyncio.Queue[Any]] = set()
        self._running = asyncio.Event()
        self._running.set()
        self._aborted = False
        self._abort_event = asyncio.Event()
        self._finished = False
        self._interrupt_cell = False  # pause, skip or abort asked the running cell to stop
        self._skip_current = False
        self._restart_group = False
        self.current_group: ServiceGroup | None = None
        self.current_cell: Cell | None = None
        self.exit_code: int | None = None
        self._log_parser = LogParser(self.spec.logs)
        self._started = time.time()
        self._hosts: dict[str, Host] = {}
        self._control_server: Any = None
        self.moved_aside: Path | None = None  # --fresh: where the old results went

    # -- preparation ---------------------------------------------------------------------------

    @classmethod
    def prepare(cls, plan: Plan, layout: ResultsLayout, options: CampaignOptions) -> Campaign:
        """Open the results directory and decide which cells run; input problems raise
        InputError before anything starts."""
        c = cls(plan, layout, options)
        if options.fresh:
            c.moved_aside = ResultsStore.move_aside(layout)
        c.store.open(plan.text, plan.hash)
        history = c.store.history()
        for cid in c.cells:
            h = history.get(cid)
            c.attempts[cid] = h.attempts if h else 0
            c.status[cid] = h.status if h else "pending"
            if h and h.reason:
                c.reasons[cid] = h.reason
        if options.rerun_failed:
            failed = [cid for cid, s in c.status.items() if s == "failed"]
            if not failed:
                c.store.close()
                raise InputError(f"{layout.root}: no failed cells to rerun")
            for cid in c.cells:
                if c.status[cid] == "pending":
                    c.status[cid] = "held"  # only the failed cells run this time
            for cid in failed:
                c.status[cid] = "pending"
        if options.only:
            pattern = options.only
            matched = [
                cid
                for cid, cell in c.cells.items()
                if fnmatch.fnmatchcase(cid, pattern)
                or fnmatch.fnmatchcase(cell.name, pattern)
                or pattern in cell.name
            ]
            if not matched:
                c.store.close()
                raise InputError(
                    f"--only {pattern!r} matches no cell id or name; see the names with --dry-run"
                )
            keep = set(matched)
            for cid in c.cells:
                if cid not in keep and c.status[cid] == "pending":
                    c.status[cid] = "held"
        return c

    # -- the control interface ------------------------------------------------------------------

    async def subscribe(self) -> AsyncIterator[Event]:
        q: asyncio.Queue[Any] = asyncio.Queue()
        replay = [*self._durable, *self._live]
        finished = self._finished
        if not finished:
            self._subs.add(q)
        try:
            for ev in replay:
                yield ev
            if finished:
                return
            while True:
                ev = await q.get()
                if ev is _END:
                    return
                yield ev
        finally:
            self._subs.discard(q)

    def _emit(self, ev: Event) -> None:
        if ev.durable:
            self.store.append_event(ev)
            self._durable.append(ev)
        else:
            self._live.append(ev)
        for q in self._subs:
            # A console that falls behind loses live samples, never lifecycle events.
            if ev.durable or q.qsize() < 5000:
                q.put_nowait(ev)

    def _notice(self, text: str, level: str = "info") -> None:
        self._emit(Notice(level=level, text=text))

    # -- running ------------------------------------------------------------------------------

    def _pending(self, group: ServiceGroup) -> list[Cell]:
        return [
            c for c in self.cells.values() if c.group == group.id and self.status[c.id] == "pending"
        ]

    def _next_group(self) -> ServiceGroup | None:
        return next((g for g in self.groups if self._pending(g)), None)

    async def run(self) -> int:
        """Drive the whole campaign; returns the exit status of the CLI contract."""
        self._started = time.time()
        done = [cid for cid, s in self.status.items() if s == "done"]
        self._emit(
            CampaignStarted(
                campaign=self.spec.campaign.name,
                title=self.spec.campaign.title,
                plan_hash=self.plan.hash,
                results_dir=str(self.layout.root),
                hosts=sorted({g.host for g in self.groups}),
                groups=[g.to_json() for g in self.groups],
                cells=[
                    {
                        **c.to_json(),
                        "status": self.status[c.id],
                        "attempt": self.attempts[c.id],
                        "reason": self.reasons.get(c.id, ""),
                    }
                    for c in self.cells.values()
                ],
                done=done,
                simulated=self._simulated(),
                pid=os.getpid(),
            )
        )
        if self.options.control_socket:
            from specbench_tui.engine.control_socket import serve_control

            self._control_server = await serve_control(self, self.layout.control_socket)
        try:
            while not self._aborted:
                await self._gate()
                group = self._next_group()
                if group is None or self._aborted:
                    break
                await self._run_group(group)
        finally:
            await self._shutdown()
        code = self._finish()
        await self._write_report()
        self._close()
        return code

    def _simulated(self) -> bool:
        return self.options.sim or all(g.host_kind == "sim" for g in self.groups)

    async def _gate(self) -> None:
        """Hold here while paused (the server and telemetry keep running)."""
        await self._running.wait()

    def _new_host(self, name: str, kind: Any) -> Host:
        hs = self.spec.hosts[name]
        ssh = None
        if kind == "ssh":
            assert hs.ssh is not None
            ssh = SshSettings(
                destination=hs.ssh,
                campaign=self.spec.campaign.name,
                services=hs.services or "systemd",
                workdir=hs.workdir,
                prepare=tuple(hs.prepare),
                restore_after=hs.restore_after,
                ssh_config=self.options.ssh_config,
            )
        return make_host(
            name,
            kind,
            hs.gpus,
            gpu_ids=hs.gpu_ids,
            on_notice=lambda level, text: self._notice(text, level),
            telemetry_interval_s=self.options.telemetry_interval_s,
            ssh=ssh,
        )

    def _host(self, group: ServiceGroup) -> Host:
        host = self._hosts.get(group.host)
        if host is None:
            host = self._new_host(group.host, group.host_kind)
            host.telemetry(on_sample=self._on_gpu_sample)
            self._hosts[group.host] = host
        return host

    async def check_hosts(self) -> None:
        """Before anything runs: reach every SSH host and check what its servers need, so an
        unknown host key or a missing model is one clear line (InputError), not a failed
        group an hour in. Connections are closed again: the run opens its own."""
        kinds = {g.host: g.host_kind for g in self.groups}
        for name, kind in kinds.items():
            if kind != "ssh":
                continue
            host = self._new_host(name, kind)
            try:
                await host.preflight([g for g in self.groups if g.host == name])  # type: ignore[attr-defined]
            finally:
                await host.close()

    def _on_gpu_sample(self, s: Any) -> None:
        procs = [p.describe() for p in s.processes]
        ev = GpuSample(
            host=s.host,
            gpu=s.gpu,
            util_pct=s.util_pct or 0.0,
            mem_used_mib=s.mem_used_mib or 0.0,
            mem_total_mib=s.mem_total_mib or 0.0,
            power_w=s.power_w or 0.0,
            temp_c=s.temp_c or 0.0,
            processes=procs,
        )
        self._emit(ev)
        self.store.add_telemetry(
            {
                "time": s.t,
                "host": s.host,
                "gpu": s.gpu,
                "util_pct": s.util_pct,
                "mem_used_mib": s.mem_used_mib,
                "mem_total_mib": s.mem_total_mib,
                "power_w": s.power_w,
                "temp_c": s.temp_c,
            }
        )

    def _on_log_line(self, group: ServiceGroup) -> Callable[[str], None]:
        parse = self._log_parser.parse_line

        def on_line(line: str) -> None:
            stats, matches = parse(line)
            self._emit(LogLine(group=group.id, line=line, stats=stats, matches=matches))

        return on_line

    async def _start_service(
        self, group: ServiceGroup, host: Host, attempt: int
    ) -> Service | ServiceFailed:
        """Clear the GPUs, start the server, wait until healthy. A failure is returned (and
        published) as its ServiceFailed event; an abort cuts any of the waits short."""
        self._emit(
            GroupStarted(
                group=group.id,
                host=group.host,
                config=group.config,
                tp=group.tp,
                gpu_ids=list(group.gpu_ids),
                command=list(group.command),
                attempt=attempt,
            )
        )
        svc: Service | None = None
        try:
            await self._unless_aborted(self._clear_gpus(group, host))
            svc = host.service(group, self.layout.log_of(group.id), self._on_log_line(group))
            await svc.start()
            startup = await self._unless_aborted(svc.wait_ready(group.ready_timeout_s))
        except Exception as exc:
            reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
            tail = list(getattr(exc, "log_tail", None) or (svc.log_tail(20) if svc else []))
            failure = ServiceFailed(group=group.id, reason=reason, log_tail=tail, attempt=attempt)
            self._emit(failure)
            if svc is not None:
                with contextlib.suppress(Exception):
                    await svc.stop(self.options.stop_grace_s)
            return failure
        self._emit(ServiceReady(group=group.id, startup_s=round(startup, 3), attempt=attempt))
        return svc

    async def _start_or_recover(
        self, group: ServiceGroup, host: Host, attempt: int
    ) -> tuple[Service | ServiceFailed, int]:
        """Start the server; if that fails, let the host repair what it can (the model gone
        from /dev/shm after a reboot: the plan's ``prepare``) and try once more."""
        started = await self._start_service(group, host, attempt)
        if isinstance(started, Service) or self._aborted:
            return started, attempt
        try:
            recovered = await self._unless_aborted(host.recover([group]))
        except Exception as exc:
            self._notice(f"{group.host}: could not repair the host: {exc}", "warning")
            recovered = False
        if recovered:
            attempt += 1
            started = await self._start_service(group, host, attempt)
        return started, attempt

    async def _clear_gpus(self, group: ServiceGroup, host: Host) -> None:
        """Wait for the group's GPUs to be free; if something holds them and the plan names
        foreign services, stop those first."""
        try:
            await host.wait_gpus_free(group.gpu_ids, 10.0)
        except Exception:
            if not group.stop_before:
                await host.wait_gpus_free(group.gpu_ids, self.options.gpu_free_timeout_s)
                return
            await host.stop_foreign(group.stop_before)
            await host.wait_gpus_free(group.gpu_ids, self.options.gpu_free_timeout_s)

    async def _unless_aborted(self, awaitable: Awaitable[T]) -> T:
        """Await something long (a GPU wait, a 15-minute start-up) that an abort must cut."""
        task = asyncio.ensure_future(awaitable)
        abort = asyncio.ensure_future(self._abort_event.wait())
        try:
            await asyncio.wait({task, abort}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            abort.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            raise ServiceError("aborted by the operator before the server was ready")
        return task.result()

    async def _run_group(self, group: ServiceGroup) -> None:
        self.current_group = group
        host = self._host(group)
        restarts = 0
        attempt = 1
        svc: Service | None = None
        try:
            started, attempt = await self._start_or_recover(group, host, attempt)
            while isinstance(started, Service):
                svc = started
                await self._gate()
                if self._aborted:
                    return
                if self._restart_group:  # the operator asked for a fresh server
                    self._restart_group = False
                    await svc.stop(self.options.stop_grace_s)
                    svc = None
                    started, attempt = await self._start_or_recover(group, host, attempt + 1)
                    continue
                pending = self._pending(group)
                if not pending:
                    return
                await self._run_one(pending[0], group, svc)
                if svc.alive() or self._aborted:
                    continue
                code = svc.exit_code
                if not self._pending(group):
                    return
                if restarts >= self.options.server_restarts:
                    self._fail_group(
                        group,
                        f"server died again (exit code {code}) after {restarts} restart(s); "
                        "giving up on the group",
                        svc.log_tail(20),
                    )
                    return
                restarts += 1
                svc = None
                self._notice(
                    f"{group.id}: server died (exit code {code}); restarting it "
                    f"({restarts}/{self.options.server_restarts})",
                    "warning",
                )
                started, attempt = await self._start_or_recover(group, host, attempt + 1)
            if not self._aborted:  # an abort during start-up leaves the cells to a resume
                self._fail_group(group, f"server did not start: {started.reason}", started.log_tail)
        finally:
            if svc is not None:
                with contextlib.suppress(Exception):
                    await svc.stop(self.options.stop_grace_s)
            states = {self.status[c.id] for c in self.cells.values() if c.group == group.id}
            status = "failed" if "failed" in states else ("done" if "done" in states else "skipped")
            self._emit(GroupFinished(group=group.id, status=status))
            self.current_group = None

    def _fail_group(self, group: ServiceGroup, reason: str, tail: list[str] | None = None) -> None:
        for cell in self._pending(group):
            self.attempts[cell.id] += 1
            self.status[cell.id] = "failed"
            self.reasons[cell.id] = reason
            self._emit(
                CellFailed(
                    cell_id=cell.id,
                    group=group.id,
                    cell=cell.name,
                    attempt=self.attempts[cell.id],
                    reason=reason,
                    log_tail=tail or [],
                )
            )

    async def _run_one(self, cell: Cell, group: ServiceGroup, svc: Service) -> None:
        self.attempts[cell.id] += 1
        attempt = self.attempts[cell.id]
        self.status[cell.id] = "running"
        self.current_cell = cell
        self._interrupt_cell = False
        self._skip_current = False
        planned = cell_requests(cell, self.plan.dir)[0]
        self._emit(
            CellStarted(
                cell_id=cell.id, group=group.id, cell=cell.name, attempt=attempt, requests=planned
            )
        )
        done = 0

        def on_request(rec: RequestRecord) -> None:
            nonlocal done
            done += 1
            self._emit(request_done_event(rec, done, planned))

        def should_stop() -> bool:
            return self._interrupt_cell or not svc.alive()

        try:
            result = await run_cell(
                cell,
                group,
                svc.base_url,
                campaign=self.spec.campaign.name,
                attempt=attempt,
                seed=self.spec.campaign.seed,
                plan_dir=self.plan.dir,
                on_request=on_request,
                should_stop=should_stop,
            )
        except Exception as exc:
            result = CellResult(stopped=True)
            self._cell_failed(cell, attempt, f"{type(exc).__name__}: {exc}", [])
            self.current_cell = None
            return
        finally:
            self.current_cell = None
        if result.errors and svc.alive():
            # Failed requests often mean the server is going down; its exit status may lag
            # behind the broken connections by a moment.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(svc.wait_exit(), 0.5)
        self._conclude(cell, group, svc, attempt, result)

    def _conclude(
        self, cell: Cell, group: ServiceGroup, svc: Service, attempt: int, result: CellResult
    ) -> None:
        # Rows are durable before the event that says the cell ended.
        self.store.write_cell_requests(cell.id, attempt, result.records)
        n, errors = len(result.records), result.errors
        if not svc.alive():
            # Whatever the rows say, a server that died during the cell makes them suspect.
            self._cell_failed(
                cell,
                attempt,
                f"server exited (code {svc.exit_code}) during the "
                f"cell after {n - errors} good request(s)",
                svc.log_tail(20),
            )
        elif result.stopped and self._skip_current:
            self._skip(cell, "skipped while running", "operator")
        elif result.stopped:
            # Pause, abort or a group restart: the cell runs again whole as a new attempt.
            self.status[cell.id] = "pending"
            why = "aborted" if self._aborted else "interrupted"
            self._emit(
                CellQueued(
                    cell_id=cell.id, group=group.id, cell=cell.name, attempt=attempt + 1, by=why
                )
            )
        elif n and errors / n > self.spec.checks.max_error_share:
            common = _most_common([r.error for r in result.records if r.error])
            self._cell_failed(
                cell,
                attempt,
                f"{errors} of {n} requests failed; most often: {common}",
                svc.log_tail(10),
            )
        else:
            figures = {
                "wall_s": round(result.wall_s, 4),
                **summarize(result.records, result.wall_s),
                **(result.client.figures() if result.client else {}),
            }
            if cell.kind == "single" and cell.temperature == 0 and result.texts:
                self.store.write_cell_texts(cell.id, attempt, result.texts)
            self.store.record_cell(cell, attempt, "done", figures, simulated=self._simulated())
            self.status[cell.id] = "done"
            self._emit(
                CellFinished(
                    cell_id=cell.id,
                    group=group.id,
                    cell=cell.name,
                    attempt=attempt,
                    requests=n,
                    errors=errors,
                    wall_s=round(result.wall_s, 4),
                    throughput_tok_s=figures.get("throughput_tok_s") or 0.0,
                    ttft_p50_s=figures.get("ttft_s_p50"),
                    output_tok_s_p50=figures.get("output_tok_s_p50"),
                    accept_length_mean=figures.get("accept_length_mean"),
                    client_lagged=bool(figures.get("client_lagged")),
                    client_lag_p99_s=figures.get("client_lag_p99_s"),
                    client_cpu_share=figures.get("client_cpu_share"),
                )
            )
            self._check_greedy(cell)

    def _check_greedy(self, cell: Cell) -> None:
        baseline = self.spec.campaign.baseline
        if not (self.spec.checks.greedy_equivalence and baseline):
            return
        done = [c for c in self.cells.values() if self.status[c.id] == "done"]
        for text in greedy_warnings(cell, done, baseline, self.store.read_cell_texts):
            self._notice(text, "warning")

    def _cell_failed(self, cell: Cell, attempt: int, reason: str, tail: list[str]) -> None:
        self.status[cell.id] = "failed"
        self.reasons[cell.id] = reason
        self.store.record_cell(
            cell, attempt, "failed", {"reason": reason}, simulated=self._simulated()
        )
        self._emit(
            CellFailed(
                cell_id=cell.id,
                group=cell.group,
                cell=cell.name,
                attempt=attempt,
                reason=reason,
                log_tail=tail,
            )
        )

    async def _shutdown(self) -> None:
        for name, host in self._hosts.items():
            # One last look at the GPUs after the last server stopped, so the console and
            # telemetry.parquet end on the state the campaign leaves behind, not mid-load.
            used = sorted({i for g in self.groups if g.host == name for i in g.gpu_ids})
            with contextlib.suppress(Exception):
                await host.wait_gpus_free(used, 5.0)
            with contextlib.suppress(Exception):
                await host.restore_foreign()
            with contextlib.suppress(Exception):
                await host.close(self.options.stop_grace_s)
        self._hosts.clear()
        self.store.flush_telemetry(force=True)
        self.store.rebuild_views()

    async def _write_report(self) -> None:
        """After campaign_finished, so the report knows how the campaign ended; in a thread,
        since a TeX run takes seconds and consoles still follow the event stream."""
        from specbench_tui.report.render import render_report

        try:
            written = await asyncio.to_thread(render_report, self.layout.root)
        except Exception as exc:  # a report problem must not change the exit status
            self._notice(
                f"report not written: {exc}; retry with --report {self.layout.root}", "warning"
            )
        else:
            self._notice("report: " + ", ".join(str(p) for p in written))

    def _finish(self) -> int:
        counts = {
            s: sum(1 for v in self.status.values() if v == s) for s in ("done", "failed", "skipped")
        }
        if self._aborted:
            code = EXIT_ABORTED
        elif counts["failed"]:
            code = EXIT_FAILED
        else:
            code = EXIT_OK
        self.exit_code = code
        self._emit(
            CampaignFinished(
                campaign=self.spec.campaign.name,
                finished=counts["done"],
                failed=counts["failed"],
                skipped=counts["skipped"],
                wall_s=round(time.time() - self._started, 3),
                exit_code=code,
            )
        )
        self._finished = True  # commands are refused from here on
        return code

    def _close(self) -> None:
        for q in self._subs:
            q.put_nowait(_END)
        if self._control_server is not None:
            self._control_server.close()
        self.store.close()

    # -- process-level entry points ------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """SIGINT/SIGTERM abort cleanly: stop the server, keep what was measured, exit 130."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(
                    sig,
                    lambda s=sig: asyncio.ensure_future(
                        self.send(Command("abort", by=signal.Signals(s).name))
                    ),
                )

    async def start_engine(self) -> int:
        """For an in-process console: run the campaign inside the console's event loop."""
        return await self.run()


def _most_common(items: list[str]) -> str:
    from collections import Counter

    return Counter(items).most_common(1)[0][0] if items else "unknown error"

"""The campaign engine's top: prepare a run, drive its service groups, end it cleanly.

``Campaign.prepare`` opens the results directory, reduces its log and decides which cells
run (``selection``); ``run`` drives the groups one after another (``group_runner``), serves
the control socket, and at the end stops whatever runs on every host, writes the views and
the report. Everything observable leaves as an event through the hub; consoles (in-process,
detached, headless) see only those and steer only through ``send``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any, ClassVar

from specbench_tui.bench.logparse import LogParser
from specbench_tui.engine.batch_scheduler import BatchScheduler
from specbench_tui.engine.checks import after_group
from specbench_tui.engine.commands import CampaignControl, Command, Reply
from specbench_tui.engine.context import CampaignOptions, RunContext
from specbench_tui.engine.host_events import HubEvents
from specbench_tui.engine.host_scheduler import HostScheduler
from specbench_tui.engine.hub import EventHub
from specbench_tui.engine.log_lines import LogLineWorker
from specbench_tui.engine.operator import OperatorCommands
from specbench_tui.engine.run_control import RunControl, StorageFailed
from specbench_tui.engine.selection import select_cells
from specbench_tui.engine.store import ResultsStore
from specbench_tui.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_STORAGE, describe
from specbench_tui.hosts import port_claims
from specbench_tui.hosts.backends import backend, build_host, preflight_host, simulated
from specbench_tui.hosts.host import Host
from specbench_tui.hosts.local_leftovers import results_owner
from specbench_tui.hosts.telemetry import GpusNotFreeError
from specbench_tui.plan.document import Plan
from specbench_tui.plan.estimate import recorded_estimate
from specbench_tui.plan.expand import expand
from specbench_tui.results.cells import Cell, ServiceGroup
from specbench_tui.results.events import (
    CampaignFinished,
    CampaignStarted,
    CellQueued,
    Event,
)
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.state import CampaignState

__all__ = ["Campaign", "CampaignOptions"]


class Campaign(CampaignControl):
    """A prepared campaign; ``run()`` drives it, ``subscribe()``/``send()`` observe and steer.
    Closing a console on it ends the campaign (it runs in the console's loop)."""

    owns_engine: ClassVar[bool] = True

    def __init__(self, plan: Plan, layout: ResultsLayout, options: CampaignOptions) -> None:
        self.plan = plan
        self.layout = layout
        self.options = options
        self.spec = plan.spec
        exp = expand(plan, sim=options.sim)
        if options.job is not None:  # a batch job: its group, on this node
            exp = options.job.narrow(exp, plan.hash)
            self.spec = options.job.node_spec(plan.spec, exp.groups[0].host)
        self.groups: list[ServiceGroup] = exp.groups
        self.cells: dict[str, Cell] = {c.id: c for c in exp.cells}
        self.store = ResultsStore(layout)
        self.control = RunControl()
        self.selected: list[str] = []
        self.exit_code: int | None = None
        self.moved_aside: Path | None = None  # --fresh: where the old results went
        self._hosts: dict[str, Host] = {}
        self._control_server: Any = None
        self._ctx: RunContext | None = None
        self._finished = False
        self._started = time.time()
        # The signal that stopped the run (SIGINT, SIGTERM), if one did, and the report being
        # written at the end: a signal then stops the report instead of the campaign.
        self._signalled: str | None = None
        self._report: asyncio.Future[list[Path]] | None = None
        self._abort: asyncio.Future[Any] | None = None
        self.schedulers: list[Any] = []  # a HostScheduler per host, a BatchScheduler per cluster

    # -- preparation ---------------------------------------------------------------------------

    @classmethod
    def prepare(cls, plan: Plan, layout: ResultsLayout, options: CampaignOptions) -> Campaign:
        """Open the results directory and decide which cells run; input problems raise
        InputError before anything starts."""
        c = cls(plan, layout, options)
        if options.fresh:
            c.moved_aside = ResultsStore.move_aside(layout)
        c.store.open(plan.text, plan.hash)
        try:
            history = c.store.state()
            c.selected = select_cells(
                history,
                c.cells.values(),
                only=options.only,
                rerun_failed=options.rerun_failed,
                rerun=options.rerun,
                where=str(layout.root),
            )
            if options.job is not None:
                c.selected = options.job.select(c.selected)
        except BaseException:
            c.store.close()
            raise
        state = CampaignState(layout.rows_exist)
        hub = EventHub(
            c.store,
            c.control,
            state,
            live_history=options.live_history,
            storage_wait_s=c.spec.campaign.storage_wait,
        )
        state.apply_all(c.store.opening_events)
        c._ctx = RunContext(
            plan=plan,
            layout=layout,
            options=options,
            store=c.store,
            hub=hub,
            control=c.control,
            log_lines=LogLineWorker(LogParser(c.spec.logs), hub.emit),
            simulated=options.sim or all(simulated(g.host_kind) for g in c.groups),
        )
        port_claims.set_results(str(layout.root))  # named in this run's port claim files
        return c

    @property
    def ctx(self) -> RunContext:
        assert self._ctx is not None, "Campaign.prepare() first"
        return self._ctx

    @property
    def hub(self) -> EventHub:
        return self.ctx.hub

    @property
    def state(self) -> CampaignState:
        return self.ctx.state

    # -- the control interface ------------------------------------------------------------------

    @property
    def results_root(self) -> Path:
        return self.layout.root

    def subscribe(self) -> AsyncIterator[Event]:
        return self.hub.subscribe()

    async def send(self, command: Command) -> Reply:
        """Apply one command; its answer comes once the log holds what it said (not waiting
        for a disk that refuses writes: the run is held then, and the command answered)."""
        reply = await OperatorCommands(self.hub, self.control, lambda: self._finished).send(command)
        await self.hub.settle()
        return reply

    # -- hosts --------------------------------------------------------------------------------

    def _new_host(self, name: str, kind: Any) -> Host:
        return build_host(
            self.spec.hosts[name],
            name,
            self.spec.campaign.name,
            self.options.hosts,
            kind=kind,
            events=HubEvents(self.hub),
            telemetry_interval_s=self.options.telemetry_interval_s,
            groups=self.groups,
            owner=results_owner(self.layout.root),
        )

    def _host(self, group: ServiceGroup) -> Host:
        host = self._hosts.get(group.host)
        if host is None:
            host = self._new_host(group.host, group.host_kind)
            host.telemetry(on_sample=self._on_gpu_sample)
            self.control.on_abort(host.abandon_waits)
            self._hosts[group.host] = host
        return host

    async def check_hosts(self) -> None:
        """Before anything runs: reach every remote host and check what its servers need, so
        an unknown host key or a missing model is one clear line (InputError), not a failed
        group an hour in. Connections are closed again: the run opens its own."""
        kinds = {g.host: g.host_kind for g in self.groups}
        for name, kind in kinds.items():
            # A running server (``url``) is not started there: nothing of it to check.
            mine = [g for g in self.groups if g.host == name and g.url is None]
            await preflight_host(
                self.spec.hosts[name],
                name,
                self.spec.campaign.name,
                kind,
                mine,
                self.options.hosts,
                events=HubEvents(self.hub),
                telemetry_interval_s=self.options.telemetry_interval_s,
                owner=results_owner(self.layout.root),
            )

    def _on_gpu_sample(self, s: Any) -> None:
        self.ctx.energy.sample(s)
        self.hub.emit(s.event())
        self.store.add_telemetry(s.row())

    # -- running ------------------------------------------------------------------------------

    async def _run_hosts(self) -> None:
        """Every host works through its own groups at the same time (a failure to write the
        results on one ends them all)."""
        self.schedulers = []
        for name in dict.fromkeys(g.host for g in self.groups):
            mine = [g for g in self.groups if g.host == name]
            hs = self.spec.hosts[name]
            if backend(mine[0].host_kind).batch_jobs is not None:  # each group one batch job
                self.schedulers.append(BatchScheduler(self.ctx, mine, name, self.options.hosts))
                continue
            self.schedulers.append(
                HostScheduler(
                    self.ctx,
                    mine,
                    lambda g=mine[0]: self._host(g),
                    gpu_ids=hs.gpu_ids if hs.gpu_ids is not None else list(range(hs.gpus)),
                    pack=self.spec.campaign.pack,
                )
            )
        try:
            async with asyncio.TaskGroup() as tg:
                for s in self.schedulers:
                    tg.create_task(s.run())
        except* StorageFailed as eg:
            raise eg.exceptions[0] from None

    async def run(self) -> int:
        """Drive the whole campaign; returns the exit status of the CLI contract."""
        ctx = self.ctx
        self._started = time.time()
        ctx.hub.emit(
            CampaignStarted(
                campaign=self.spec.campaign.name,
                title=self.spec.campaign.title,
                plan_hash=self.plan.hash,
                results_dir=str(self.layout.root),
                hosts=sorted({g.host for g in self.groups}),
                groups=list(self.groups),
                cells=list(self.cells.values()),
                selected=list(self.selected),
                simulated=ctx.simulated,
                pid=os.getpid(),
            )
        )
        for text in self.store.notices:  # after the run's start: every printer of it says them
            ctx.hub.notice(text, "warning")
        if self.options.job is None:  # a batch job runs one group of its campaign's estimate
            self._record_estimate()
        for cid in self.selected:  # --rerun-failed, a rerun: an ended cell is queued again
            c = self.state.cells[cid]
            if c.status in ("done", "failed", "skipped"):
                ctx.hub.emit(
                    CellQueued(
                        cell_id=cid,
                        group=c.group,
                        cell=c.name,
                        attempt=c.attempt + 1,
                        by="rerun-failed" if self.options.rerun_failed else "rerun",
                    )
                )
        storage_failed = False
        ctx.log_lines.start()
        if self.options.control_socket:
            from specbench_tui.engine.control_socket import serve_control

            self._control_server = await serve_control(self, self.layout.control_socket)
        try:
            await self._run_hosts()
            # The last word on each config, an aborted run's too: what its cells measured is
            # judged, so a lossy config is flagged however the campaign ended.
            for host in sorted({g.host for g in self.groups}):
                await after_group(ctx, host, final=True)
        except StorageFailed:
            storage_failed = True
        finally:
            await self._shutdown()
            await ctx.log_lines.stop()
        code = self._finish(storage_failed)
        await self.hub.settle()  # the log holds the end before the views are written
        if self.options.write_views and not await self._write_outputs():
            code = EXIT_INTERRUPTED  # a signal stopped the report: the run is not all there
        await self.hub.settle()
        self._close()
        return code

    async def _shutdown(self) -> None:
        # The last cells' energy waits for the samples after their windows: the hosts'
        # readers still run here.
        await self._step("the last cells' GPU energy", self.ctx.energy.drain())
        for name, host in self._hosts.items():
            # One last look at the GPUs after the last server stopped, so the console and
            # telemetry end on the state the campaign leaves behind, not mid-load (GPUs still
            # held after it are the next run's wait, not this one's).
            used = sorted({i for g in self.groups if g.host == name for i in g.gpu_ids})
            await self._step(f"{name}: the last look at its GPUs", _last_look(host, used))
            await self._step(
                f"{name}: could not start its stopped services again", host.restore_foreign()
            )
            try:
                await host.close(self.options.stop_grace_s)
            except Exception as exc:  # said: what is left is on record for the next look
                self.hub.notice(
                    f"{name}: could not stop what runs there: {describe(exc)}; the next run of "
                    "these results or --cleanup stops what is left",
                    "error",
                )
        self._hosts.clear()

    async def _step(self, what: str, step: Awaitable[Any]) -> None:
        """One step of the end of a run: a failure is said, and the next step still runs (a
        host that cannot be looked at must still have its servers stopped)."""
        try:
            await step
        except Exception as exc:  # said; the shutdown goes on
            self.hub.notice(f"{what}: {describe(exc)}", "error")

    def _finish(self, storage_failed: bool) -> int:
        counts = self.state.counts
        if storage_failed:
            code = EXIT_STORAGE
        elif self.control.aborted:
            code = EXIT_INTERRUPTED
        elif counts.failed or self.state.failed_checks():
            code = EXIT_FAILED
        else:
            code = EXIT_OK
        self.exit_code = code
        self.hub.emit(
            CampaignFinished(
                campaign=self.spec.campaign.name,
                finished=counts.done,
                failed=counts.failed,
                skipped=counts.skipped,
                wall_s=round(time.time() - self._started, 3),
                exit_code=code,
            )
        )
        self._finished = True  # commands are refused from here on
        with contextlib.suppress(OSError):
            self.store.flush_telemetry(force=True)
        return code

    def _record_estimate(self) -> None:
        """The dry run's estimate for this run's plan, into the log: the report holds it
        against what the cells took (report/estimate_check.py) and needs no plan for it."""
        try:
            ev = recorded_estimate(
                self.spec,
                self.plan.prompts,
                list(self.groups),
                list(self.cells.values()),
                sim=self.ctx.simulated,
                measured=self.options.measured,
            )
        except (KeyError, ValueError) as exc:
            self.hub.notice(f"the dry-run estimate cannot be recorded: {exc}", "warning")
            return
        self.hub.emit(ev)

    async def _write_outputs(self) -> bool:
        """The views, and the report when the options have a writer for it: after
        campaign_finished, so the report knows how the campaign ended. The report is written
        by a child process a signal can stop; False when a signal stopped it or, having
        stopped the campaign, left it unwritten (what was measured is kept either way)."""
        report = self.options.report
        root = self.layout.root
        try:
            await self.store.settle_views()
            await asyncio.to_thread(self.store.write_views, self.state)  # nothing changes it now
            if report is None:
                return True
            if self._signalled is not None:
                self.hub.notice(
                    f"report not written: {self._signalled} stopped the run; what was "
                    f"measured is kept, and --report {root} writes it",
                    "warning",
                )
                return False
            self._report = asyncio.ensure_future(report(root))
            await asyncio.wait({self._report})
            if self._report.cancelled():
                self.hub.notice(
                    f"report not written: {self._signalled or 'a signal'} stopped it; what "
                    f"was measured is kept, and --report {root} writes it",
                    "warning",
                )
                return False
            written = self._report.result()
        except Exception as exc:  # a report problem must not change the exit status
            self.hub.notice(f"report not written: {exc}; retry with --report {root}", "warning")
        else:
            self.hub.notice("report: " + ", ".join(str(p) for p in written))
        finally:
            if self._report is not None and not self._report.done():
                self._report.cancel()  # this task was cancelled: the child goes with it
        return True

    def _close(self) -> None:
        self.hub.close()
        if self._control_server is not None:
            self._control_server.close()
            with contextlib.suppress(OSError):
                self.layout.control_socket.unlink()
        self.store.close()

    # -- process-level entry points ------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """SIGINT/SIGTERM abort cleanly: stop the servers, keep what was measured, exit 130;
        once the campaign has ended, they stop the report being written (and a run a signal
        stopped writes none: ``--report DIR`` does, later)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self._on_signal, sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        name = signal.Signals(sig).name
        self._signalled = self._signalled or name
        if self._report is not None and not self._report.done():
            self._report.cancel()
            return
        self._abort = asyncio.ensure_future(self.send(Command("abort", by=name)))

    async def start_engine(self) -> int:
        """For an in-process console: run the campaign inside the console's event loop."""
        return await self.run()


async def _last_look(host: Host, used: list[int]) -> None:
    """A last look at the GPUs, not a wait: GPUs still held after it are the next run's."""
    with contextlib.suppress(GpusNotFreeError):
        await host.wait_gpus_free(used, 5.0)

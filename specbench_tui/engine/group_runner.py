"""One service group from start to stop: clear its GPUs, start its server, wait until it is
healthy, run its cells, restart a server that died (within the restart policy), and always
stop the server at the end, whatever happened.

A failure to start is tried once more after the host repaired what it could (the plan's
``prepare``, e.g. the model gone from /dev/shm after a reboot). A group given up fails its
remaining cells with the reason and the server's last lines. An abort cuts any wait short and
leaves the group's cells to a resume. When the link to the group's host drops, the cell in
flight is set aside (cell_runner) and the group waits until the host is back, its server's
state known and its health checked, then runs the cell again; its cells fail only when the
host stays away past its reconnect timeout.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import Literal

from specbench_tui.bench.prompting import Prompting
from specbench_tui.engine.cell_runner import run_one
from specbench_tui.engine.checks import after_group, probe_noise_floor, probe_state_leak
from specbench_tui.engine.context import RunContext
from specbench_tui.engine.energy_watch import IDLE_FLOOR_S
from specbench_tui.engine.manifest import record_manifest
from specbench_tui.engine.run_control import AbortRequested, GroupHandle
from specbench_tui.engine.verdict import restart_allowed
from specbench_tui.engines.facts import ServerFacts
from specbench_tui.engines.inspect import inspect_server
from specbench_tui.errors import describe
from specbench_tui.hosts.backends import simulated
from specbench_tui.hosts.host import Host
from specbench_tui.hosts.running_server import RunningServer
from specbench_tui.hosts.service import HostUnreachable, Service, ServiceError
from specbench_tui.results.cells import Cell, ServiceGroup
from specbench_tui.results.events import (
    CellFailed,
    GroupFinished,
    GroupStarted,
    ServerDied,
    ServiceFailed,
    ServiceReady,
)


class ServerSlot:
    """The group's current server; whatever leaves the ``async with`` stops it. A stop that
    fails is said (``say``), never passed over: what it left is on record in the results
    (hosts/server_records.py) for the leftover check of the next run or ``--cleanup``."""

    def __init__(self, grace_s: float, say: Callable[[str], None]) -> None:
        self.grace_s = grace_s
        self.say = say
        self.service: Service | None = None

    async def __aenter__(self) -> ServerSlot:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.clear()

    async def clear(self) -> None:
        svc, self.service = self.service, None
        if svc is None:
            return
        try:
            await svc.stop(self.grace_s)
        except Exception as exc:  # whatever failed, said: the campaign goes on either way,
            # and the server stays on record (only a stop that worked drops the record)
            self.say(
                f"{svc.group.id}: could not stop its server: {describe(exc)}; what is left of it "
                "is stopped by the next run of these results or by --cleanup"
            )


class GroupRunner:
    def __init__(self, ctx: RunContext, group: ServiceGroup, host: Host) -> None:
        self.ctx = ctx
        self.group = group
        self.host = host
        self.attempt = 0
        self.facts = ServerFacts(engine=group.engine)  # what the ready server said of itself
        self.prompting: Prompting | None = None  # how its requests carry their prompts
        self.drops_seen = 0  # the server's link drops already ridden out
        self.riding: ServiceGroup | None = None  # the group riding on this server, once begun

    async def run(self) -> None:
        ctx, group = self.ctx, self.group
        handle = ctx.control.enter(group)
        restarts = 0
        try:
            say = functools.partial(ctx.hub.notice, level="error")
            async with ServerSlot(ctx.options.stop_grace_s, say) as slot:
                failure = await self._start_or_recover(slot)
                while slot.service is not None:
                    svc = slot.service
                    await ctx.control.gate()
                    if ctx.control.aborted:
                        return
                    if handle.restart:  # the operator asked for a fresh server
                        handle.restart = False
                        if group.url is not None:
                            ctx.hub.notice(
                                f"{group.id}: the server at {group.url} is not this tool's to "
                                "restart; its cells go on",
                                "warning",
                            )
                            continue
                        await slot.clear()
                        failure = await self._start_or_recover(slot)
                        continue
                    if svc.link_drops != self.drops_seen:  # the link to the host dropped
                        outcome = await self._after_outage(svc)
                        if outcome == "gone":
                            return
                        if outcome == "again":
                            continue
                        if outcome == "restart":
                            await slot.clear()
                            failure = await self._start_or_recover(slot)
                            continue
                    on, pending = group, ctx.pending(group)
                    if not pending and svc.alive():  # then the cells that ride on this server
                        on, pending = self._riding(svc)
                    if not pending:
                        if svc.alive() and not ctx.control.aborted:
                            await probe_noise_floor(ctx, group, svc, self.facts, self.prompting)
                        if svc.alive() and not ctx.control.aborted:
                            await probe_state_leak(ctx, group, svc, self.facts, self.prompting)
                        return
                    death: str | None = None
                    cell = pending[0]
                    if svc.alive():
                        death = await self._measure(cell, on, svc, handle)
                        if svc.link_drops != self.drops_seen:
                            continue  # the cell was set aside; ride the outage out first
                        if ctx.control.aborted:
                            continue
                        if death is None:
                            if svc.alive() or not ctx.pending(group):
                                continue
                            cell = None  # it died after the cell ended
                    else:
                        cell = None  # it died between cells, or while the host was away
                    # The server died: during the cell, or while the host was away.
                    why = death or svc.ended_said()
                    allowed = group.url is None and restart_allowed(
                        restarts, ctx.options.server_restarts
                    )
                    self._died(svc, why, cell, restarts + 1 if allowed else 0)
                    if group.url is not None:  # not ours to restart
                        self._fail_cells(svc.ended_said())
                        return
                    if not allowed:
                        self._fail_cells(
                            f"server died ({why}) after {restarts} restart(s); "
                            "giving up on the group",
                            svc.log_tail(20),
                        )
                        return
                    restarts += 1
                    ctx.hub.notice(
                        f"{group.id}: server died ({why}); restarting it "
                        f"({restarts}/{ctx.options.server_restarts})",
                        "warning",
                    )
                    await slot.clear()
                    failure = await self._start_or_recover(slot)
                if failure is not None and not ctx.control.aborted:
                    self._fail_cells(f"server did not start: {failure.reason}", failure.log_tail)
        finally:
            self.host.release_port(group)  # the slot stopped the server: its port is free
            ctx.control.leave(group)
            if self.riding is not None:
                ctx.control.leave(self.riding)
                ctx.hub.emit(GroupFinished(group=self.riding.id, status=self._status(self.riding)))
            ctx.hub.emit(GroupFinished(group=group.id, status=self._status()))
        if not ctx.control.aborted:
            await after_group(ctx, group.host, [group.tp])

    def _died(self, svc: Service, why: str, cell: Cell | None, restart: int) -> None:
        self.ctx.hub.emit(
            ServerDied(
                group=self.group.id,
                host=self.group.host,
                attempt=self.attempt,
                reason=why,
                cell_id=cell.id if cell else "",
                cell=cell.name if cell else "",
                exit_code=svc.exit_code,
                restart=restart,
                log_tail=svc.log_tail(20),
            )
        )

    # --- measuring: beside the host's other groups, or alone on it ----------------------------

    async def _measure(
        self, cell: Cell, on: ServiceGroup, svc: Service, handle: GroupHandle
    ) -> str | None:
        """One cell of this group, or of the group riding on its server (measured with no
        other group of the host measuring: engine/host_quiet.py); what ``run_one`` returns."""
        ctx = self.ctx
        quiet = ctx.quiet_of(self.group.host)
        gate = quiet.alone() if on is not self.group else quiet.cell()
        if on is not self.group:
            handle = ctx.control.groups.get(on.id) or ctx.control.enter(on)
        async with gate:
            if ctx.control.aborted:  # while it waited: the loop's gate ends the group
                return None
            return await run_one(ctx, cell, on, svc, handle, self.facts, self.prompting, self.host)

    def _riding(self, svc: Service) -> tuple[ServiceGroup, list[Cell]]:
        """The group riding on this server (an interference check's ``.solo``) and its
        cells still to run; it is said to start on this server the first time."""
        ctx = self.ctx
        rider = ctx.rider(self.group)
        pending = ctx.pending(rider) if rider is not None else []
        if rider is None or not pending:
            return self.group, []
        rider = replace(
            rider, gpu_ids=self.group.gpu_ids, port=self.group.port, command=self.group.command
        )
        if self.riding is None:
            self.riding = rider
            ctx.hub.emit(_started(rider))
            ctx.hub.emit(
                ServiceReady(
                    group=rider.id,
                    engine=self.facts.engine,
                    engine_version=self.facts.version,
                    served_model=self.facts.served_model,
                    speculative=self.facts.speculative,
                    algorithm=self.facts.algorithm,
                )
            )
        return self.riding, pending

    def _status(self, group: ServiceGroup | None = None) -> str:
        g = self.ctx.state.groups.get((group or self.group).id)
        states = {self.ctx.state.cells[c].status for c in (g.cells if g else [])}
        if "failed" in states:
            return "failed"
        return "done" if "done" in states else "skipped"

    # --- starting ---------------------------------------------------------------------------

    async def _start(self, slot: ServerSlot) -> ServiceFailed | None:
        """Clear the GPUs, start the server, wait until healthy; a failure is returned (and
        published) as its ServiceFailed event."""
        ctx, host = self.ctx, self.host
        self.attempt += 1
        # A running server (``url``) is on its own port, and on GPUs that are not ours.
        running = self.group.url is not None
        group, claim_failed = (self.group, None) if running else await self._claim_port()
        ctx.hub.emit(_started(group, self.attempt))
        await ctx.hub.durable()  # the log says a server starts before anything stops or starts
        svc: Service | None = None
        try:
            if claim_failed is not None:
                raise claim_failed
            svc = await self._service(group)
            slot.service = svc
            await svc.start()
            startup = await ctx.control.unless_aborted(svc.wait_ready(group.ready_timeout_s))
            facts = await ctx.control.unless_aborted(
                inspect_server(
                    group,
                    svc.base_url,
                    svc.log_tail(400),
                    rehearsal=simulated(group.host_kind),
                )
            )
            if facts.problems:
                raise ServiceError(
                    "what runs is not what the config asks for: " + "; ".join(facts.problems),
                    svc.log_tail(20),
                )
            prompting = await ctx.control.unless_aborted(ctx.templates.prompting(group, host))
        except Exception as exc:  # whatever ended the start fails this group, said; the
            # campaign goes on to the next (a bug here is a failed group, not a dead run)
            if isinstance(exc, AbortRequested):
                reason = "aborted by the operator before the server was ready"
            else:
                reason = getattr(exc, "reason", None) or describe(exc)
            tail = list(getattr(exc, "log_tail", None) or (svc.log_tail(20) if svc else []))
            failure = ServiceFailed(
                group=group.id, reason=reason, log_tail=tail, attempt=self.attempt
            )
            ctx.hub.emit(failure)
            await slot.clear()
            return failure
        self.facts = facts
        self.prompting = prompting
        self.drops_seen = svc.link_drops
        for note in facts.notes:
            ctx.hub.notice(f"{group.id}: {note}", "warning")
        ctx.hub.emit(
            ServiceReady(
                group=group.id,
                startup_s=round(startup, 3),
                attempt=self.attempt,
                engine=facts.engine,
                engine_version=facts.version,
                served_model=facts.served_model,
                speculative=facts.speculative,
                algorithm=facts.algorithm,
                chat_template=prompting.template.describe(),
            )
        )
        await self._manifest(group, facts)
        await self._idle_floor(group)
        return None

    async def _service(self, group: ServiceGroup) -> Service:
        """The group's server, not yet started: a running one (``url``) as it is; else after
        the host's rule (``stop_before`` services, and no wait it cannot verify)."""
        on_line = self.ctx.log_lines.on_line(group.id)
        if group.url is not None:
            return RunningServer(group, on_line)
        timeout = self.ctx.options.gpu_free_timeout_s
        await self.ctx.control.unless_aborted(self.host.clear_gpus(group, timeout))
        return self.host.service(group, self.ctx.layout.log_of(group.id), on_line)

    async def _idle_floor(self, group: ServiceGroup) -> None:
        """Leave the ready server alone for ``IDLE_FLOOR_S`` (counted from its ready line),
        so its GPUs' idle power is measured before any warm-up: the floor a cell's energy
        "above idle" takes off. Only where the host's GPUs are read (the wait buys nothing
        elsewhere) and not on a simulated host, whose power is made up."""
        if simulated(group.host_kind):
            return
        try:
            await self.ctx.control.unless_aborted(
                self.ctx.energy.idle_floor(group.id, IDLE_FLOOR_S)
            )
        except AbortRequested:
            return

    async def _manifest(self, group: ServiceGroup, facts: ServerFacts) -> None:
        """Record what the ready server runs on, before its first cell (a probe process on
        the host must not share a cell's measurement); a record, never a reason to stop."""
        try:
            await self.ctx.control.unless_aborted(
                record_manifest(self.ctx, group, self.host, facts, self.attempt)
            )
        except AbortRequested:
            return
        except Exception as exc:  # a record, never a reason to stop: said as a warning
            self.ctx.hub.notice(
                f"{group.id}: the run's manifest was not recorded ({describe(exc)})",
                "warning",
            )

    async def _claim_port(self) -> tuple[ServiceGroup, Exception | None]:
        """The group on the port its server takes (another of this campaign's servers on the
        same machine may hold the plan's): claimed until the group ends."""
        try:
            return await self.ctx.control.unless_aborted(self.host.claim_port(self.group)), None
        except Exception as exc:  # carried to the start, which fails the group with it, said
            return self.group, exc

    async def _start_or_recover(self, slot: ServerSlot) -> ServiceFailed | None:
        """Start the server; if that fails, let the host repair what it can and try once
        more. Returns the last failure, None once a server runs."""
        failure = await self._start(slot)
        if failure is None or self.ctx.control.aborted or self.group.url is not None:
            return failure  # a running server's host is not this tool's to repair
        try:
            recovered = await self.ctx.control.unless_aborted(self.host.recover([self.group]))
        except AbortRequested:
            return failure
        except Exception as exc:  # a repair that fails leaves the first failure to be said
            self.ctx.hub.notice(
                f"{self.group.host}: could not repair the host: {describe(exc)}", "warning"
            )
            recovered = False
        if recovered:
            failure = await self._start(slot)
        return failure

    # --- the link to the host -------------------------------------------------------------

    async def _after_outage(self, svc: Service) -> Literal["ok", "again", "restart", "gone"]:
        """The link to the server's host dropped (the cell in flight, if any, was set aside):
        wait until the host is back and the server's state is known. "ok": go on (a server
        that died meanwhile is then not alive); "restart": it runs but does not answer;
        "gone": the host stayed away past its reconnect timeout, the group's cells failed;
        "again": an abort came meanwhile."""
        ctx = self.ctx
        try:
            await ctx.control.unless_aborted(svc.after_outage())
        except AbortRequested:
            return "again"
        except HostUnreachable as exc:
            self._fail_cells(f"host unreachable: {exc.reason}")
            return "gone"
        except ServiceError as exc:
            ctx.hub.notice(f"{exc.reason}; restarting the server", "warning")
            return "restart"
        self.drops_seen = svc.link_drops
        return "ok"

    # --- giving up ----------------------------------------------------------------------------

    def _fail_cells(self, reason: str, tail: list[str] | None = None) -> None:
        rider = self.ctx.rider(self.group)
        cells = self.ctx.pending(self.group) + (self.ctx.pending(rider) if rider else [])
        for cell in cells:
            attempt = self.ctx.state.cells[cell.id].attempt + 1
            self.ctx.hub.emit(
                CellFailed(
                    cell_id=cell.id,
                    group=cell.group,
                    cell=cell.name,
                    attempt=attempt,
                    reason=reason,
                    log_tail=list(tail or []),
                )
            )


def _started(group: ServiceGroup, attempt: int = 1) -> GroupStarted:
    """A group's ``group_started``: where its server runs (GPUs, port, command, or the
    address of one already running)."""
    return GroupStarted(
        group=group.id,
        host=group.host,
        config=group.config,
        tp=group.tp,
        gpu_ids=list(group.gpu_ids),
        command=list(group.command),
        attempt=attempt,
        port=group.port,
        url=group.url,
    )

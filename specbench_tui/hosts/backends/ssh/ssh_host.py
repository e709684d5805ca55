"""A plan host reached over SSH: its servers run there (as systemd units or plain processes),
its GPUs are read there, and the benchmark client reaches each server through a port forward.

The engine sees the same ``Host`` methods as for a local or simulated host. ``preflight`` runs
once before a campaign so that an unknown host key, a missing interpreter, a model missing
from /dev/shm after a reboot or a port something else holds is said up front, in one line.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from specbench_tui.engines.registry import adapter
from specbench_tui.errors import InputError
from specbench_tui.hosts import port_claims
from specbench_tui.hosts.backends.ssh.remote_process import RemoteProcessService
from specbench_tui.hosts.backends.ssh.remote_service import (
    LaunchOwner,
    launch_mark,
    launch_owner,
    live_owner,
    mark_mismatch,
    mark_what,
    other_run,
    parse_owner,
    remote_port_holder,
    remote_port_in_use,
)
from specbench_tui.hosts.backends.ssh.systemd import (
    ForeignUnits,
    SystemdService,
    parse_systemd_version,
    systemd_error,
)
from specbench_tui.hosts.host import (
    Host,
    HostReport,
    SshSettings,
    with_port,
)
from specbench_tui.hosts.leftovers import Leftover, find_leftovers, stop_leftover
from specbench_tui.hosts.local_leftovers import records_dir
from specbench_tui.hosts.service import LineCallback, Service, ServiceError
from specbench_tui.hosts.shell import parse_read_files, quote, read_files_command, remote_path
from specbench_tui.hosts.ssh import SshAgentRunner, SshConnectError, SshConnection, SshError
from specbench_tui.hosts.telemetry import AgentRunner
from specbench_tui.results.cells import ServiceGroup
from specbench_tui.results.events import HostState

LEFTOVER_STOP_GRACE_S = 30.0
# Run on the host: a port its kernel hands out as free now.
FREE_PORT = "import socket;s=socket.socket();s.bind(('0.0.0.0',0));print(s.getsockname()[1])"


class SshHost(Host):
    kind = "ssh"

    def __init__(
        self,
        name: str,
        gpus: int,
        settings: SshSettings,
        **kw: Any,
    ) -> None:
        super().__init__(name, gpus, python="python3", **kw)
        self.settings = settings
        self.ssh = SshConnection(
            settings.destination,
            config=settings.ssh_config,
            reconnect_timeout_s=settings.reconnect_timeout_s,
            on_state=self._link_state,
        )
        self._foreign = ForeignUnits(self.ssh)
        self._unknown_gpus_said: set[str] = set()
        self._leftovers: dict[str, Leftover] = {}  # kept for their group's clear_gpus
        self._machine: str | None = None
        self._holds_lease = False  # this run claimed the campaign on the host (see _take_lease)

    def abandon_waits(self) -> None:
        """An abort while the host is away: what still needs it (a server's stop) fails at
        once instead of waiting up to ``reconnect_timeout``; the servers stay there for the
        next run, which takes them over or stops them."""
        if self.ssh.stop_waiting():
            self.events.notice(
                f"{self.name}: the host is away; its servers are left as they are (the next "
                "run of the plan takes them over or stops them)",
                "warning",
            )

    def _link_state(self, state: str, reason: str) -> None:
        """The link changed: an event for the console (the host shown as reconnecting)."""
        self.events.event(HostState(host=self.name, state=state, reason=reason))

    # --- before the campaign ------------------------------------------------------------------

    async def check(self, groups: Iterable[ServiceGroup], *, repair: bool = False) -> HostReport:
        """Connect, create the work directory, check each server's interpreter and model (with
        ``repair``, running the plan's ``prepare`` first when something is missing), that the
        ports are free, systemd where it is used, and the telemetry chain."""
        groups = list(groups)
        report = HostReport(self.name, self.kind)
        try:
            await self.ssh.connection()
        except SshConnectError as e:
            report.problems.append(e.reason)
            return report
        report.facts.append(f"connected to {self.ssh}")
        workdir = self.settings.workdir.rstrip("/") or "/"
        res = await self.ssh.run(f"mkdir -p {remote_path(workdir + '/logs')}", idempotent=True)
        if not res.ok:
            err = systemd_error(res.stderr) or f"status {res.exit_status}"
            report.problems.append(f"cannot create {self.settings.workdir}: {err}")
            return report
        report.facts.append(f"workdir {self.settings.workdir}")
        if self.settings.services == "systemd":
            res = await self.ssh.run(
                "command -v systemd-run >/dev/null && systemctl --version | head -n 1",
                idempotent=True,
            )
            version = parse_systemd_version(res.stdout) if res.ok else None
            if version is None:
                report.problems.append(
                    'systemd-run/systemctl not usable (services = "process" runs servers '
                    "without systemd)"
                )
            else:
                report.facts.append(f"systemd {version}")
        if repair:
            await self.recover(groups)
        missing = await self._missing(groups)
        if missing:
            hint = "" if self.settings.prepare else " (a prepare command in the plan can fix it)"
            report.problems += [m + hint for m in missing]
        elif groups:
            report.facts.append("server interpreters and models found")
        other = await (self._take_lease() if repair else self._lease_holder())
        if other is not None:
            report.problems.append(
                f"the campaign {self.settings.campaign} on this host is being run by another "
                f"process still going ({other.describe()}): its servers are not taken over "
                "or stopped; run this plan under another [campaign] name, or once that "
                "campaign has ended"
            )
        left = await self._find_leftovers(groups)
        for lo in left:
            owner = live_owner(lo.mark, self.owner)
            if owner is not None:
                report.problems.append(
                    f"{lo.group}'s server ({lo.describe()}) belongs to another campaign still "
                    f"running ({owner.describe()}): it is not taken over or stopped; run this "
                    "plan under another [campaign] name, or once that campaign has ended"
                )
                continue
            report.facts.append(
                f"{lo.group}: a server left running by an earlier run ({lo.describe()}); the "
                "run takes it over when it is what the plan starts and healthy, else stops it"
            )
        await _check_ports(self.ssh, groups, left, report)
        await self.add_telemetry(report)
        return report

    async def preflight(self, groups: Iterable[ServiceGroup]) -> HostReport:
        """``check`` with repairs, before a campaign: an unknown host key, a missing model or
        a taken port is one line (InputError) before anything runs."""
        await self.ssh.connection()  # host key, auth, reachability: SshConnectError is InputError
        try:
            report = await self.check(groups, repair=True)
        except InputError:
            raise
        except SshError as e:  # the link dropped for good while the host was checked
            raise InputError(f"host {self.name}: {e.reason}") from e
        if report.problems:
            raise InputError(f"host {self.name}: {report.problems[0]}")
        for warning in report.warnings:
            if warning.startswith("port "):  # the telemetry warning comes once, from the run
                self.events.notice(f"{self.name}: {warning}", "warning")
        return report

    async def recover(self, groups: Iterable[ServiceGroup]) -> bool:
        """When something a server needs is gone (the model from /dev/shm after a reboot),
        run the plan's ``prepare`` commands; True when they ran. Raises InputError when a
        prepare command fails."""
        missing = await self._missing(groups)
        if not missing or not self.settings.prepare:
            return False
        self.events.notice(f"{self.name}: {missing[0]}; running the plan's prepare", "info")
        for command in self.settings.prepare:
            try:
                res = await self.ssh.run(command, timeout_s=3600)
            except SshError as e:  # the plan's command, not known to be safe to run twice
                raise InputError(f"host {self.name}: prepare command {command!r}: {e}") from e
            if not res.ok:
                last = (res.stderr.strip().splitlines() or [f"exit {res.exit_status}"])[-1]
                raise InputError(f"host {self.name}: prepare command {command!r} failed: {last}")
        return True

    async def _missing(self, groups: Iterable[ServiceGroup]) -> list[str]:
        checks: dict[str, str] = {}
        for g in groups:
            if g.command:
                checks.setdefault(g.command[0], "interpreter")
            model = adapter(g.engine).model_path(g.command)
            if model:
                checks.setdefault(model, "model")
        out = []
        for path, what in checks.items():
            test = (
                f"command -v {quote(path)}" if what == "interpreter" else f"test -e {quote(path)}"
            )
            res = await self.ssh.run(test + " >/dev/null", idempotent=True)
            if not res.ok:
                out.append(f"{what} {path} not found")
        return out

    async def read_files(self, paths: Sequence[str]) -> dict[str, str | None]:
        """The texts of small files on the host, read in one command (None: absent or not
        UTF-8 text); a link that fails says so, as every SSH command does."""
        paths = list(paths)
        if not paths:
            return {}
        res = await self.ssh.run(read_files_command(paths), idempotent=True)
        if not res.ok:
            last = (res.stderr.strip().splitlines() or [f"exit {res.exit_status}"])[-1]
            raise SshError(f"reading {', '.join(paths)} failed: {last}")
        return parse_read_files(res.stdout, paths)

    # --- ports -------------------------------------------------------------------------------

    async def machine_key(self) -> str:
        """The network namespace the host's ports live in, asked once: two aliases of one
        machine (or an alias of this one) share their port claims. Where the host does not
        say, its destination stands for it (not remembered: asked again next time)."""
        if self._machine is None:
            try:
                res = await self.ssh.run(port_claims.NAMESPACE_PROBE, idempotent=True)
            except SshError:
                return f"ssh:{self.settings.destination}"
            key = port_claims.namespace_key(res.stdout) if res.ok else None
            if key is None:
                return f"ssh:{self.settings.destination}"
            self._machine = key
        return self._machine

    async def claim_port(self, group: ServiceGroup) -> ServiceGroup:
        """The plan's port, unless another server of this campaign on the same machine (a
        host that is another alias of it) claimed it: then a port the host's kernel says is
        free, said in a notice. Something outside the campaign on the plan's port is left to
        the start, which names it (as the preflight did)."""
        machine = await self.machine_key()
        self.release_port(group)  # after the await: no other group can slip in between
        where = group
        other = port_claims.holder(machine, group.port)
        theirs = port_claims.other_claim(machine, group.port)
        if other not in (None, group.id) or theirs:
            port = await self._free_remote_port(machine)
            whose = (
                f"{other}, a server of this campaign on the same machine"
                if other not in (None, group.id)
                else f"another campaign run from here ({theirs})"
            )
            self.events.notice(
                f"{self.name}: port {group.port} is taken by {whose}; {group.id} uses port "
                f"{port} there instead",
                "info",
            )
            where = with_port(group, port)
        if not port_claims.claim(machine, where.port, group.id):
            return await self.claim_port(group)  # taken while the host was asked: again
        self._claims[group.id] = (machine, where.port)
        return where

    async def _free_remote_port(self, machine: str) -> int:
        for _ in range(20):
            res = await self.ssh.run(["python3", "-c", FREE_PORT], idempotent=True)
            if not res.ok or not res.stdout.strip().isdigit():
                raise ServiceError(f"{self.name}: cannot find a free port: {res.stderr.strip()}")
            port = int(res.stdout.strip())
            if port_claims.holder(machine, port) is None and not port_claims.other_claim(
                machine, port
            ):
                return port
        raise ServiceError(f"{self.name}: no free port found that no server of this run claimed")

    # --- servers -------------------------------------------------------------------------------

    def service(
        self,
        group: ServiceGroup,
        log_path: str | os.PathLike[str],
        on_line: LineCallback | None = None,
    ) -> Service:
        kind = RemoteProcessService if self.settings.services == "process" else SystemdService
        svc: Service = kind(
            group,
            self.ssh,
            log_path,
            on_line,
            campaign=self.settings.campaign,
            workdir=self.settings.workdir,
            on_notice=self.service_notice,
            results=self.owner,
            records=records_dir(self.owner) if self.owner else None,
            reached_as=(self.settings.destination, self.settings.ssh_config),
        )
        self._services.append(svc)
        return svc

    # --- what an earlier run left ----------------------------------------------------------------

    async def _find_leftovers(self, groups: Iterable[ServiceGroup]) -> list[Leftover]:
        return await find_leftovers(
            self.ssh,
            services=self.settings.services,
            campaign=self.settings.campaign,
            workdir=self.settings.workdir,
            group_ids={g.id for g in groups},
        )

    # --- which run the campaign on this host belongs to ------------------------------------

    def _lease_file(self) -> str:
        base = self.settings.workdir.rstrip("/") or "/"
        return remote_path(f"{base}/.specbench-{self.settings.campaign}.owner")

    async def _lease_holder(self) -> LaunchOwner | None:
        """The other run, still going, that holds the campaign on this host (None: none)."""
        res = await self.ssh.run(
            f"cat {self._lease_file()} 2>/dev/null", timeout_s=30.0, idempotent=True
        )
        return other_run(parse_owner(res.stdout), self.owner)

    async def _take_lease(self) -> LaunchOwner | None:
        """Claim the campaign on this host for this run: a file in the workdir naming it
        (``launch_owner``), made only where none exists (noclobber), or where the run it
        names ended or was one of these results. Returns the other run, still going, that
        holds it instead. So a second campaign of the plan refuses up front, whichever of
        the first one's servers runs at that moment, or none between two groups."""
        token = launch_owner(self.owner)
        base = remote_path(self.settings.workdir.rstrip("/") or "/")
        lease = self._lease_file()
        write = f"( set -C; printf '%s\\n' {quote(token)} > {lease} ) 2>/dev/null"
        res = await self.ssh.run(
            f"mkdir -p {base} && if {write}; then echo taken; else cat {lease}; fi",
            timeout_s=30.0,
            idempotent=True,  # run again, it finds its own token: the same outcome
        )
        held = res.stdout.strip().splitlines()[-1:] or [""]
        if held[0] in ("taken", token):
            return None
        other = other_run(parse_owner(held[0]), self.owner)
        if other is not None:
            return other
        await self.ssh.run(
            f"rm -f {lease} && {write}", timeout_s=30.0, idempotent=True
        )  # the run it named ended: this one takes it over
        return None

    async def _drop_lease(self) -> None:
        token = quote(launch_owner(self.owner))
        lease = self._lease_file()
        await self.ssh.run(
            f'[ "$(cat {lease} 2>/dev/null)" = {token} ] && rm -f {lease}; true',
            timeout_s=30.0,
            idempotent=True,
        )

    async def settle_leftovers(self, keep: Collection[str]) -> None:
        """Stop the servers an earlier run left that no group of this run starts; keep the
        others for their group's ``clear_gpus``. A host that cannot be reached now is left to
        its groups (they wait for it or fail with the reason)."""
        try:
            other = await self._take_lease()
            left = await self._find_leftovers(self.groups)
        except (ServiceError, SshError) as e:
            self.events.notice(f"{self.name}: cannot look for servers left running: {e}", "warning")
            return
        if other is not None:  # taken since the preflight: its servers are left alone
            self.events.notice(
                f"{self.name}: the campaign {self.settings.campaign} on this host is being run "
                f"by another process still going ({other.describe()}); none of its servers "
                "is taken over or stopped",
                "error",
            )
        else:
            self._holds_lease = True
        for lo in left:
            owner = live_owner(lo.mark, self.owner)
            if owner is not None:  # its group's start refuses, naming the owner again
                self.events.notice(
                    f"{self.name}: {lo.group}'s server ({lo.describe()}) belongs to another "
                    f"campaign still running ({owner.describe()}): left alone",
                    "warning",
                )
                continue
            if lo.group in keep:
                self._leftovers[lo.group] = lo
                await self._claim_for_leftover(lo)
                continue
            await self._stop_leftover(lo, "no cell of this run needs it")

    async def _claim_for_leftover(self, lo: Leftover) -> None:
        """A kept server holds its group's plan port: claimed for that group at once, so a
        group of another alias of this machine is not handed the port (and refused by the
        kept server) before this group's turn takes the server over or stops it."""
        group = next((g for g in self.groups if g.id == lo.group and not g.packed), None)
        if group is None:
            return
        machine = await self.machine_key()
        if port_claims.claim(machine, group.port, group.id):
            self._claims[group.id] = (machine, group.port)

    async def _stop_leftover(self, lo: Leftover, why: str) -> None:
        try:
            await stop_leftover(self.ssh, lo, LEFTOVER_STOP_GRACE_S)
        except (ServiceError, SshError) as e:  # the next run (or --cleanup) finds it again
            self.events.notice(
                f"{self.name}: cannot stop {lo.group}'s server left running by an earlier run "
                f"({lo.describe()}): {e}",
                "error",
            )
            return
        self.events.notice(
            f"{self.name}: stopped {lo.group}'s server left running by an earlier run "
            f"({lo.describe()}): {why}",
            "info",
        )

    async def clear_gpus(self, group: ServiceGroup, timeout_s: float) -> bool:
        """As for any host; but a server an earlier run left for this very group, started
        with the same command line, holds these GPUs on purpose: the start takes it over
        (when it answers its health check) instead of waiting for them. One that differs is
        stopped first."""
        lo = self._leftovers.pop(group.id, None)
        if lo is not None:
            same = mark_what(lo.mark) == mark_what(launch_mark(self.settings.campaign, group, {}))
            if same and lo.adoptable:
                return True
            why = (
                mark_mismatch(lo.mark)
                if not same
                else "its pid file is where an older version kept it"
            )
            await self._stop_leftover(lo, why)
        return await super().clear_gpus(group, timeout_s)

    async def held_gpus(self, ours: Collection[int]) -> dict[int, str]:
        """As for any host, less the GPUs a ``stop_before`` unit is set up for (its
        CUDA_VISIBLE_DEVICES): a group that needs them stops it. When such a unit does not
        say which GPUs it takes, none is known to be beyond reach."""
        held = await super().held_gpus(ours)
        names = {u for g in self.groups for u in g.stop_before}
        if not held or not names or self.settings.services != "systemd":
            return held
        for name in sorted(names):
            gpus = await self._foreign.configured_gpus(name)
            if gpus is None:
                return {}
            for gpu in gpus:
                held.pop(gpu, None)
        return held

    def runner_for(self, python: str) -> AgentRunner:
        return SshAgentRunner(self.ssh, python, self.agent_env())

    # --- foreign services ----------------------------------------------------------------------

    async def stop_foreign(self, names: Iterable[str]) -> None:
        if self.settings.services != "systemd":
            await super().stop_foreign(names)
            return
        stopped = await self._foreign.stop(names)
        if stopped:
            self.events.notice(f"{self.name}: stopped {', '.join(stopped)} to free GPUs", "info")

    async def stop_foreign_unverified(self, group: ServiceGroup) -> None:
        """With no telemetry nothing shows whether the group's GPUs are held, so a
        ``stop_before`` service is stopped only when its unit is set up for some of the
        group's GPUs (CUDA_VISIBLE_DEVICES in its environment); one that does not say is left
        running, with a notice once, rather than stopped for nothing."""
        if not group.stop_before:
            return
        if self.settings.services != "systemd":
            await super().stop_foreign(group.stop_before)
            return
        wanted = set(group.gpu_ids)
        to_stop = []
        for name in group.stop_before:
            gpus = await self._foreign.configured_gpus(name)
            if gpus is None:
                if name not in self._unknown_gpus_said:
                    self._unknown_gpus_said.add(name)
                    self.events.notice(
                        f"{self.name}: no GPU telemetry to show whether {name} holds GPUs, "
                        "and its unit sets no CUDA_VISIBLE_DEVICES (or is not running): left "
                        "running",
                        "warning",
                    )
            elif gpus & wanted:
                to_stop.append(name)
        if not to_stop:
            return
        stopped = await self._foreign.stop(to_stop)
        if stopped:
            gpus_text = ",".join(map(str, group.gpu_ids))
            self.events.notice(
                f"{self.name}: stopped {', '.join(stopped)}: set up for GPUs of {group.id} "
                f"({gpus_text}); no telemetry to check them",
                "info",
            )

    async def restore_foreign(self) -> None:
        if not self.settings.restore_after or not self._foreign.stopped:
            return
        names = ", ".join(self._foreign.stopped)
        problems = await self._foreign.restore()
        for p in problems:
            self.events.notice(f"{self.name}: {p}", "error")
        if not problems:
            self.events.notice(f"{self.name}: started {names} again", "info")

    async def close(self, grace_s: float = 10.0) -> None:
        """Stop what runs, the servers an earlier run left that no group came to (an abort
        before their turn) included, give the campaign on the host back, then the
        connection."""
        await super().close(grace_s)
        for lo in list(self._leftovers.values()):
            await self._stop_leftover(lo, "the run ended before its group's turn")
        self._leftovers.clear()
        if self._holds_lease:
            try:
                await self._drop_lease()
            except SshError as e:  # the next run finds this run ended and takes it over
                self.events.notice(f"{self.name}: could not give the campaign back: {e}", "info")
            self._holds_lease = False
        with contextlib.suppress(SshError, OSError):  # the link is given up either way
            await self.ssh.close()


async def _check_ports(
    ssh: SshConnection, groups: list[ServiceGroup], left: list[Leftover], report: HostReport
) -> None:
    """Each group's port on the host: free, held by a server an earlier run left (settled
    when the run starts), by a ``stop_before`` service, or by something to stop."""
    left_ports = {g.port for g in groups if any(lo.group == g.id for lo in left)}
    stop_before = {u for g in groups for u in g.stop_before}
    for port in sorted({g.port for g in groups}):
        if not await remote_port_in_use(ssh, port):
            report.ports.append(f"{port} free")
            continue
        holder = await remote_port_holder(ssh, port)
        what = f"{port} in use by {holder.describe()}"
        report.ports.append(what)
        if port in left_ports or any(holder.unit == lo.unit for lo in left if lo.unit):
            continue  # the earlier run's server: settled when the run starts
        if holder.unit in stop_before:
            report.warnings.append(
                f"port {what}, a stop_before service: a group that starts while it runs "
                "fails on the port"
            )
        elif holder.unit and holder.unit.startswith("specbench-"):
            report.problems.append(
                f"port {what} (left from an earlier run?); stop it with "
                f"`systemctl stop {holder.unit}` or change the plan's port"
            )
        else:
            report.problems.append(f"port {what}; stop it or change the plan's port")

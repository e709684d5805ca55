"""One plan host as the engine sees it: run a group's server, read its GPUs, clear the way.

The engine holds one ``Host`` per ``[hosts.NAME]`` and never asks what kind it is. Local and
simulated hosts run servers as child processes; an SSH host runs them there as systemd units
or detached processes (``ssh_host.py``).

GPU telemetry is chosen once per host (``telemetry_mode``): NVML through the first of the
servers' interpreters (then ``python3``) that imports pynvml, else nvidia-smi, else none. With
none, ``clear_gpus`` cannot see the GPUs: it waits until the previous server's processes and
port are gone, records that the GPUs were not verified (a ``gpus_unverified`` event) and lets
the group start. "No telemetry" never reads as "busy".
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from specbench_tui.durations import format_duration
from specbench_tui.engines.registry import adapter
from specbench_tui.errors import describe
from specbench_tui.hosts import port_claims
from specbench_tui.hosts.local_leftovers import (
    SERVER_MARK_ENV,
    find_local_leftovers,
    records_dir,
    server_mark,
    stop_local_leftover,
)
from specbench_tui.hosts.process import ProcessService, describe_port_holder, port_in_use
from specbench_tui.hosts.service import LineCallback, Service, ServiceError
from specbench_tui.hosts.telemetry import (
    AgentProcess,
    AgentRunner,
    GpusNotFreeError,
    LocalAgentRunner,
    NoTelemetryError,
    ProblemCallback,
    SampleCallback,
    TelemetryMode,
    TelemetryReader,
    gpu_state,
    probe_telemetry,
    wait_gpus_free,
)
from specbench_tui.results.cells import ServiceGroup
from specbench_tui.results.events import Event, GpusUnverified, GpusWaiting, TelemetryChosen

FAKE_NVML_PATH = Path(__file__).resolve().parent.parent / "sim" / "fake_nvml.py"
FALLBACK_PYTHON = "python3"
#: A group waiting for its GPUs to be freed says what holds them this far into the wait
#: (within the 5 s an operator should wait to know why nothing starts), then this often.
GPU_WAIT_FIRST_S = 2.0
GPU_WAIT_EVERY_S = 60.0
_PYTHON_NAME = re.compile(r"^python[0-9.]*$")


class HostEvents(Protocol):
    """What a host tells the campaign: notices the operator must read (level "info",
    "warning" or "error") and events it observed itself (the telemetry mode, GPUs started on
    unverified, the link's state). The engine's hub implements it (``engine.host_events``);
    a host made for a check alone tells nobody."""

    def notice(self, text: str, level: str = "info") -> None: ...

    def event(self, ev: Event) -> None: ...


class NoEvents:
    """Tells nobody: a host made for a preflight or a test that does not listen."""

    def notice(self, text: str, level: str = "info") -> None:
        return None

    def event(self, ev: Event) -> None:
        return None


def _read_local_files(paths: Sequence[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for path in paths:
        try:
            out[path] = Path(path).expanduser().read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            out[path] = None
    return out


def server_pythons(groups: Iterable[ServiceGroup]) -> list[str]:
    """The interpreters that run the servers (a launch's first word named ``python*``), in
    plan order, then ``python3``: where to look for pynvml, which a GPU host usually has only
    in the serving venv."""
    found = [
        g.command[0] for g in groups if g.command and _PYTHON_NAME.match(Path(g.command[0]).name)
    ]
    return list(dict.fromkeys([*found, FALLBACK_PYTHON]))


def with_port(group: ServiceGroup, port: int) -> ServiceGroup:
    """The group on another port: the plan's port in its command line replaced (a word of its
    own, or the value of ``--port=...``)."""
    old = str(group.port)
    command = tuple(
        str(port) if a == old else a[: -len(old)] + str(port) if a.endswith("=" + old) else a
        for a in group.command
    )
    return dataclasses.replace(group, port=port, command=command)


def pick_free_port(machine: str | None = None) -> int:
    """A port the kernel says is free here; with ``machine``, also one no server of this
    process claimed there."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if machine is None or (
            port_claims.holder(machine, port) is None
            and port_claims.other_claim(machine, port) is None
        ):
            return port


@dataclass
class HostReport:
    """What a preflight found on one host, for ``--dry-run --check`` and the campaign's start:
    facts (one line each), the telemetry mode, the port checks, warnings, and problems (each
    of which stops the campaign before anything runs)."""

    host: str
    kind: str
    facts: list[str] = field(default_factory=list)
    telemetry: TelemetryMode | None = None
    ports: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"host {self.host} ({self.kind})"]
        out += [f"  {f}" for f in self.facts]
        if self.telemetry is not None:
            out.append(f"  GPU telemetry: {self.telemetry.describe()}")
        out += [f"  port {p}" for p in self.ports]
        out += [f"  warning: {w}" for w in self.warnings]
        out += [f"  PROBLEM: {p}" for p in self.problems]
        return out

    def to_json(self) -> dict[str, Any]:
        mode = self.telemetry
        return {
            "host": self.host,
            "kind": self.kind,
            "facts": self.facts,
            "telemetry": None
            if mode is None
            else dataclasses.asdict(mode) | {"text": mode.describe()},
            "ports": self.ports,
            "warnings": self.warnings,
            "problems": self.problems,
        }


class _ModeRunner(AgentRunner):
    """Starts the agent with the host's chosen source and interpreter, once chosen; with no
    telemetry it raises NoTelemetryError so the reader ends instead of retrying."""

    def __init__(self, host: Host) -> None:
        self.host = host

    async def start(self, args: list[str]) -> AgentProcess:
        mode = await self.host.telemetry_mode()
        if not mode.available:
            raise NoTelemetryError(mode.describe())
        assert mode.python is not None
        return await self.host.runner_for(mode.python).start([*args, *mode.agent_args()])


class Host:
    """A host whose servers run as local child processes (``local = true``).

    ``groups`` are the plan's service groups on this host (their interpreters are where
    telemetry looks for pynvml first); ``events`` hears the host's notices and the events it
    publishes itself (the telemetry mode, GPUs started on unverified). ``owner`` names the
    run's results (its directory): every server started here carries it in its environment,
    so a later run of the same results finds the servers a crashed run left.
    """

    kind: str = "local"  # the backend it was built as (hosts/backends/__init__.py)

    def __init__(
        self,
        name: str,
        gpus: int,
        *,
        gpu_ids: Iterable[int] | None = None,
        events: HostEvents | None = None,
        telemetry_interval_s: float = 1.0,
        python: str = sys.executable,
        groups: Iterable[ServiceGroup] = (),
        owner: str = "",
    ) -> None:
        self.name = name
        self.owner = owner
        self.gpus = gpus
        self.gpu_ids = list(gpu_ids) if gpu_ids is not None else list(range(gpus))
        self.events: HostEvents = events or NoEvents()
        self.telemetry_interval_s = telemetry_interval_s
        self.python = python
        self.groups = list(groups)
        self._reader: TelemetryReader | None = None
        self._services: list[Service] = []
        self._mode: TelemetryMode | None = None
        self._mode_lock = asyncio.Lock()
        self._ports: dict[int, int] = {}  # plan port -> the free port taken instead
        self._claims: dict[str, tuple[str, int]] = {}  # group id -> (machine, port) claimed
        self._cannot_stop_said: set[str] = set()

    # --- servers ------------------------------------------------------------------------

    def service_env(self) -> dict[str, str]:
        """Environment added to every server on this host, after the group's own."""
        return {}

    def service(
        self,
        group: ServiceGroup,
        log_path: str | os.PathLike[str],
        on_line: LineCallback | None = None,
    ) -> Service:
        """The group's server, not started yet (on a free port if the plan's is taken)."""
        where = self.on_free_port(group)
        mark = {SERVER_MARK_ENV: server_mark(self.owner, self.name, where.id)}
        svc = ProcessService(
            where,
            log_path,
            on_line,
            extra_env=self.service_env() | mark,
            records=records_dir(self.owner) if self.owner else None,
        )
        self._services.append(svc)
        return svc

    def service_notice(self, level: str, text: str) -> None:
        """A notice from one of this host's services, which take a (level, text) callback."""
        self.events.notice(text, level)

    async def read_files(self, paths: Sequence[str]) -> dict[str, str | None]:
        """The texts of small files on this host (a model's tokenizer files), by path; None
        where a file is not there or is not UTF-8 text."""
        return await asyncio.to_thread(_read_local_files, paths)

    # --- ports --------------------------------------------------------------------------

    async def machine_key(self) -> str:
        """The network namespace this host's ports live in (see ``port_claims``)."""
        return port_claims.local_machine()

    async def claim_port(self, group: ServiceGroup) -> ServiceGroup:
        """The group on the port its server will take here, claimed for it until
        ``release_port``: no other server of this campaign on the same machine (another
        host's included) is handed that port meanwhile."""
        machine = await self.machine_key()
        self.release_port(group)  # after the await: no other group can slip in between
        for _ in range(20):
            where = self.on_free_port(group)  # no await from the check to the claim
            if port_claims.claim(machine, where.port, group.id):
                self._claims[group.id] = (machine, where.port)
                return where
            # another campaign claimed it since the check: the next check sees its claim
        raise ServiceError(f"{self.name}: no port found that no other server has claimed")

    def release_port(self, group: ServiceGroup) -> None:
        """The group's server stopped: its port may go to another."""
        claimed = self._claims.pop(group.id, None)
        if claimed is not None:
            port_claims.release(*claimed, group.id)

    def on_free_port(self, group: ServiceGroup) -> ServiceGroup:
        """The group as it will run here: when something outside the campaign holds the
        plan's port, or another server of the campaign on this machine claimed it, on a free
        one instead, said once per port in a notice."""
        machine = port_claims.local_machine()

        def ours(port: int) -> str | None:
            other = port_claims.holder(machine, port)
            return other if other not in (None, group.id) else None

        def taken_by(port: int) -> str | None:
            """Whose claim holds the port: another server of this campaign, or another
            campaign's (another process on this machine)."""
            other = ours(port)
            if other is not None:
                return f"{other}, a server of this campaign on the same machine"
            theirs = port_claims.other_claim(machine, port)
            return f"another campaign on this machine ({theirs})" if theirs else None

        taken = self._ports.get(group.port)
        if taken is not None and not taken_by(taken) and not port_in_use(taken):
            return with_port(group, taken)
        other = taken_by(group.port)
        if other is None and not port_in_use(group.port):
            return group
        new = pick_free_port(machine)
        if other is not None:
            self.events.notice(
                f"{self.name}: port {group.port} is taken by {other}; servers on this host "
                f"use port {new} instead",
                "info",
            )
        else:
            holder = describe_port_holder(group.port)
            self.events.notice(
                f"{self.name}: port {group.port} is in use by {holder}; servers on this host "
                f"use port {new} instead",
                "warning",
            )
        self._ports[group.port] = new
        return with_port(group, new)

    # --- telemetry ----------------------------------------------------------------------

    def agent_env(self) -> dict[str, str]:
        return {}

    def runner_for(self, python: str) -> AgentRunner:
        """The agent through one interpreter: a local process here, over SSH on an SSH host."""
        return LocalAgentRunner(python, self.agent_env())

    def agent_runner(self) -> AgentRunner:
        """The agent as the reader runs it: through the chosen source and interpreter."""
        return _ModeRunner(self)

    def telemetry_pythons(self) -> list[str]:
        return server_pythons(self.groups)

    async def choose_telemetry(self) -> TelemetryMode:
        """Walk the chain now (no caching, no announcement): the preflight's view."""
        return await probe_telemetry(self.runner_for, self.telemetry_pythons())

    async def telemetry_mode(self) -> TelemetryMode:
        """The host's telemetry mode, chosen on first use and announced once: a
        ``telemetry_chosen`` event, and with no telemetry one warning saying what the GPU
        waits will do instead."""
        async with self._mode_lock:
            if self._mode is None:
                try:
                    mode = await self.choose_telemetry()
                except Exception as e:  # a probe must never stop a campaign: said as the mode
                    mode = TelemetryMode("none", None, f"probe failed: {describe(e)}")
                self._mode = mode
                self.events.event(
                    TelemetryChosen(
                        host=self.name,
                        source=mode.source,
                        python=mode.python or "",
                        detail=mode.detail,
                        text=mode.describe(),
                        driver=mode.driver or "",
                        gpus=mode.gpus,
                    )
                )
                if not mode.available:
                    self.events.notice(
                        f"{self.name}: no GPU telemetry ({mode.detail or 'nothing found'}); "
                        "GPU memory cannot be checked before a server starts: the campaign "
                        "waits only until the previous server's processes and port are gone "
                        "(install nvidia-ml-py into a server's python for NVML)",
                        "warning",
                    )
            return self._mode

    def telemetry(
        self,
        on_sample: SampleCallback | None = None,
        on_problem: ProblemCallback | None = None,
    ) -> TelemetryReader:
        """This host's telemetry reader, started on first use (one per host).

        Callbacks given on a later call replace the earlier ones. Problems go to the host's
        notices unless ``on_problem`` is given. With no telemetry the reader ends at once
        and delivers nothing.
        """
        if self._reader is None:
            self._reader = TelemetryReader(
                self.name,
                self.agent_runner(),
                interval_s=self.telemetry_interval_s,
                gpus=self.gpu_ids,
            )
            self._reader.on_problem = self._telemetry_problem
        if on_sample is not None:
            self._reader.on_sample = on_sample
        if on_problem is not None:
            self._reader.on_problem = on_problem
        self._reader.start()
        return self._reader

    def _telemetry_problem(self, text: str) -> None:
        self.events.notice(f"{self.name}: telemetry: {text}", "warning")

    async def wait_gpus_free(
        self, gpu_ids: Iterable[int], timeout_s: float, idle_mem_mib: float = 1024
    ) -> bool:
        """True once the GPUs hold no compute process and idle memory; raises
        GpusNotFreeError naming the GPU, its memory and the process holding it. False, at
        once, when this host has no telemetry, or when the agent stays down: then nothing
        can be verified."""
        mode = await self.telemetry_mode()
        if not mode.available:
            return False
        reader = self.telemetry()
        try:
            return await wait_gpus_free(
                reader.latest,
                gpu_ids,
                timeout_s,
                idle_mem_mib,
                host=self.name,
                telemetry_down=lambda: reader.last_error or reader.unavailable,
            )
        except GpusNotFreeError as e:
            if reader.last_error:
                e.reason += f" (telemetry: {reader.last_error})"
                e.args = (e.reason,)
            raise

    async def clear_gpus(self, group: ServiceGroup, timeout_s: float) -> bool:
        """Before a group's server starts: wait until its GPUs are free; when something holds
        them and the plan names foreign services (``stop_before``), stop those first. True
        when the GPUs were seen free; False when they could not be checked (no telemetry),
        recorded as a ``gpus_unverified`` event. Raises GpusNotFreeError (or ServiceError)
        when the GPUs stay held."""
        mode = await self.telemetry_mode()
        if not mode.available:
            await self.wait_released(timeout_s)
            await self.stop_foreign_unverified(group)
            self._unverified(group, "no GPU telemetry")  # the why is in telemetry_chosen
            return False
        watch = asyncio.create_task(self._say_gpu_wait(group))
        try:
            try:
                verified = await self.wait_gpus_free(group.gpu_ids, 10.0)
            except GpusNotFreeError:
                if group.stop_before:
                    await self.stop_foreign(group.stop_before)
                verified = await self.wait_gpus_free(group.gpu_ids, timeout_s)
        finally:
            watch.cancel()
            said = await asyncio.gather(watch, return_exceptions=True)
        if said and said[0] is True and verified:
            self.events.event(
                GpusWaiting(
                    host=self.name,
                    group=group.id,
                    gpu_ids=list(group.gpu_ids),
                    waited_s=round(time.monotonic() - self._gpu_wait_began, 1),
                )
            )
        if not verified:
            reader = self.telemetry()
            why = reader.last_error or reader.unavailable or "no fresh reading"
            await self.wait_released(timeout_s)
            self._unverified(group, f"telemetry down: {why}")
        return verified

    async def _say_gpu_wait(self, group: ServiceGroup) -> bool:
        """While ``clear_gpus`` waits: ``GPU_WAIT_FIRST_S`` in, and every ``GPU_WAIT_EVERY_S``
        after, say what holds the group's GPUs (memory used, the holder's pid and name),
        so a wait on a foreign process is never silent. Returns (when cancelled, as the
        wait ends) whether it said anything, so that the end of the wait is said too."""
        self._gpu_wait_began = began = time.monotonic()
        said = False
        try:
            await asyncio.sleep(GPU_WAIT_FIRST_S)
            while True:
                latest = self.telemetry().latest()
                held = []
                for gpu in group.gpu_ids:
                    why = gpu_state(latest.get(gpu), 1024)
                    if why is not None:
                        held.append(f"GPU {gpu}: {why}")
                if held:
                    said = True
                    self.events.event(
                        GpusWaiting(
                            host=self.name,
                            group=group.id,
                            gpu_ids=list(group.gpu_ids),
                            held=held,
                            waited_s=round(time.monotonic() - began, 1),
                        )
                    )
                await asyncio.sleep(GPU_WAIT_EVERY_S if held else 1.0)
        except asyncio.CancelledError:
            return said

    async def held_gpus(self, ours: Collection[int]) -> dict[int, str]:
        """GPUs of this host, other than ``ours``, that something outside the campaign holds
        now (the latest telemetry reading) and no ``stop_before`` can free: GPU -> what holds
        it. Empty without telemetry: nothing is known to be held. Here nothing can be
        stopped, so whatever holds a GPU keeps it."""
        mode = await self.telemetry_mode()
        if not mode.available:
            return {}
        latest = self.telemetry().latest()
        held = {}
        for gpu in self.gpu_ids:
            sample = latest.get(gpu)
            why = gpu_state(sample, 1024) if sample is not None else None
            if gpu not in ours and why is not None:
                held[gpu] = why
        return held

    def _unverified(self, group: ServiceGroup, reason: str) -> None:
        self.events.event(
            GpusUnverified(
                host=self.name, group=group.id, gpu_ids=list(group.gpu_ids), reason=reason
            )
        )

    async def wait_released(self, timeout_s: float, poll_s: float = 0.2) -> None:
        """Until nothing of this host's earlier servers is left (processes, ports): what a
        GPU wait can still check without telemetry. Raises ServiceError naming what stays."""
        deadline = time.monotonic() + timeout_s
        for svc in list(self._services):
            while not await svc.released():
                if time.monotonic() >= deadline:
                    raise ServiceError(
                        f"{self.name}: the earlier server {svc.group.id} still has processes "
                        f"or port {svc.group.port} after {format_duration(timeout_s)}"
                    )
                await asyncio.sleep(poll_s)
            if not svc.alive():
                self._services.remove(svc)

    async def settle_leftovers(self, keep: Collection[str]) -> None:
        """Before this host's first group of a run: deal with servers an earlier run left
        running (this tool was killed). On an SSH host those of groups in ``keep`` (the
        groups this run will start) wait for their group's ``clear_gpus``, which takes one
        over or stops it; the rest are stopped. Here a server dies with the tool, but its
        workers, or a server started in the instant the tool died, may not: every one is
        stopped, since its output went to the tool that died and cannot be followed."""
        for lo in find_local_leftovers(self.owner, self.name):
            code = await stop_local_leftover(lo, LOCAL_LEFTOVER_GRACE_S)
            if code is None:
                self.events.notice(
                    f"{self.name}: stopped {lo.group}'s server left running by an earlier "
                    f"run ({lo.describe()}): its output went to the run that ended, so it "
                    "cannot be taken over",
                    "info",
                )
            else:
                self.events.notice(
                    f"{self.name}: cannot stop {lo.group}'s server left running by an earlier "
                    f"run ({lo.describe()}): {code}",
                    "error",
                )

    def abandon_waits(self) -> None:
        """The run is aborted: stop waiting for anything that only the host's return could
        end (a link that is down). Nothing waits so here."""
        return None

    async def recover(self, groups: Iterable[ServiceGroup]) -> bool:
        """Repair what a failed start may have lost (an SSH host runs its ``prepare``);
        True when something was done and a new start is worth trying."""
        return False

    # --- before the campaign ------------------------------------------------------------

    def _check_commands(self, groups: list[ServiceGroup], report: HostReport) -> None:
        """The servers' interpreters and models, on this machine (a simulated host runs the
        simulator, whose interpreter is this process's)."""
        check_local_commands(groups, report)

    async def check(self, groups: Iterable[ServiceGroup], *, repair: bool = False) -> HostReport:
        """What a campaign on this host would meet: the servers' interpreters, the ports,
        the telemetry mode. Touches nothing."""
        groups = list(groups)
        report = HostReport(self.name, self.kind)
        self._check_commands(groups, report)
        for port in sorted({g.port for g in groups}):
            if port_in_use(port):
                report.ports.append(
                    f"{port} in use by {describe_port_holder(port)}; the servers take a free "
                    "port instead (said when they start)"
                )
            else:
                report.ports.append(f"{port} free")
        await self.add_telemetry(report)
        return report

    async def add_telemetry(self, report: HostReport) -> None:
        """The telemetry mode into a check's report, warned about when there is none (every
        kind of host says it the same way)."""
        report.telemetry = await self.choose_telemetry()
        if not report.telemetry.available:
            report.warnings.append(
                "no GPU telemetry: GPU freedom is not verified before servers start"
            )

    async def preflight(self, groups: Iterable[ServiceGroup]) -> HostReport:
        """``check`` before a campaign runs; raises InputError on the first problem."""
        from specbench_tui.errors import InputError

        report = await self.check(groups, repair=True)
        if report.problems:
            raise InputError(f"host {self.name}: {report.problems[0]}")
        return report

    # --- foreign services ----------------------------------------------------------------

    async def stop_foreign(self, names: Iterable[str]) -> None:
        """Stop services outside the campaign that hold GPUs (``stop_before``).

        Only a systemd host can; here it is a notice, and the GPU wait that follows will name
        whatever still holds the GPUs.
        """
        names = [n for n in names if n not in self._cannot_stop_said]
        if names:
            self._cannot_stop_said.update(names)  # once per service, not once per group
            self.events.notice(
                f"{self.name}: cannot stop {', '.join(names)} on a {self.kind} host "
                "(stop_before needs a systemd host); skipped",
                "warning",
            )

    async def stop_foreign_unverified(self, group: ServiceGroup) -> None:
        """``stop_before`` with no telemetry to show that the group's GPUs are held: only a
        systemd host can tell which GPUs a service is set up for, so here nothing is stopped
        (said once by ``stop_foreign``'s notice)."""
        if group.stop_before:
            await self.stop_foreign(group.stop_before)

    async def restore_foreign(self) -> None:
        """Start again what ``stop_foreign`` stopped; nothing was stopped here."""
        return None

    # --- end ------------------------------------------------------------------------------

    async def close(self, grace_s: float = 10.0) -> None:
        """Stop the telemetry and any server still running (an aborted campaign must not
        leave a server holding GPUs behind)."""
        for svc in self._services:
            if svc.alive():
                try:
                    await svc.stop(grace_s)
                except Exception as exc:  # whatever failed, said; its record stays for the
                    # leftover check (a stop never drops the record of a server it left)
                    self.events.notice(
                        f"{self.name}: could not stop {svc.group.id}'s server: {describe(exc)}; "
                        "what is left of it is stopped by the next run of these results or by "
                        "--cleanup",
                        "error",
                    )
        self._services.clear()
        for group_id, claimed in list(self._claims.items()):
            port_claims.release(*claimed, group_id)
        self._claims.clear()
        if self._reader is not None:
            await self._reader.stop()
            self._reader = None


LOCAL_LEFTOVER_GRACE_S = 10.0
SIM_STATE_PREFIX = "specbench-sim-"


def remove_stale_sim_state() -> list[Path]:
    """Delete the simulated GPU state a crashed campaign left in the temp directory (its
    directory names the pid that made it; a live pid's is left alone). Returns what went."""
    removed = []
    for d in Path(tempfile.gettempdir()).glob(f"{SIM_STATE_PREFIX}*"):
        pid = d.name[len(SIM_STATE_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit() or not d.is_dir():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
        except PermissionError:
            pass  # someone else's live process
    return removed


class SimHost(Host):
    """The embedded simulated host: simulated servers write GPU state files into a state
    directory, and the telemetry agent reads them back through the fake NVML."""

    kind = "sim"

    def _check_commands(self, groups: list[ServiceGroup], report: HostReport) -> None:
        """Nothing to find: every group runs the simulator, in this process's interpreter."""

    def __init__(
        self,
        name: str,
        gpus: int,
        *,
        state_dir: str | os.PathLike[str] | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(name, gpus, **kw)
        self._owns_state = state_dir is None
        if state_dir is None:
            remove_stale_sim_state()
            prefix = f"{SIM_STATE_PREFIX}{os.getpid()}-{name}-"
            self.state_dir = Path(tempfile.mkdtemp(prefix=prefix))
        else:
            self.state_dir = Path(state_dir)
            self.state_dir.mkdir(parents=True, exist_ok=True)

    @property
    def sim_gpu_count(self) -> int:
        """GPUs the simulated machine has: enough for the highest physical id used."""
        return max([self.gpus, *(g + 1 for g in self.gpu_ids)])

    def service_env(self) -> dict[str, str]:
        return {
            "SPECBENCH_SIM_STATE": str(self.state_dir),
            "SPECBENCH_SIM_GPUS": str(self.sim_gpu_count),
        }

    def agent_env(self) -> dict[str, str]:
        return {
            "SPECBENCH_SIM_NVML": str(self.state_dir),
            "SPECBENCH_SIM_NVML_MODULE": str(FAKE_NVML_PATH),
            "SPECBENCH_SIM_GPUS": str(self.sim_gpu_count),
        }

    async def choose_telemetry(self) -> TelemetryMode:
        """The simulator's fake NVML, read by this interpreter: nothing to probe."""
        return TelemetryMode(
            "sim", self.python, "simulated GPUs", self.sim_gpu_count, energy_gpus=self.sim_gpu_count
        )

    async def close(self, grace_s: float = 10.0) -> None:
        await super().close(grace_s)
        if self._owns_state:
            shutil.rmtree(self.state_dir, ignore_errors=True)


@dataclass(frozen=True)
class SshSettings:
    """What the plan says about an SSH host, beyond its GPUs."""

    destination: str
    campaign: str
    services: Literal["systemd", "process"] = "systemd"
    workdir: str = "~/specbench"
    prepare: tuple[str, ...] = ()
    restore_after: bool = True
    ssh_config: str | None = None  # like ``ssh -F``; None: ~/.ssh/config
    reconnect_timeout_s: float = 600.0  # how long the host may stay away before work fails


def check_local_commands(groups: list[ServiceGroup], report: HostReport) -> None:
    """Each server's interpreter and model on this machine (relative paths from here, where
    local servers start). A model path (``/``, ``.`` or ``~`` first) that is missing is a
    problem; any other name that is not here is what engines take as a model id
    (``Qwen/Qwen3-8B``, ``gpt2``) and may download, so it is said, not refused."""
    for python in dict.fromkeys(g.command[0] for g in groups if g.command):
        if shutil.which(python) is None:
            report.problems.append(f"interpreter {python} not found")
        else:
            report.facts.append(f"server command {python} found")
    for model in dict.fromkeys(m for g in groups if (m := adapter(g.engine).model_path(g.command))):
        if Path(model).expanduser().exists():
            report.facts.append(f"model {model} found")
        elif model.startswith(("/", ".", "~")):
            report.problems.append(f"model {model} not found")
        else:
            report.warnings.append(
                f"model {model} is no path here: the server takes it as a model id (and "
                "may download it)"
            )

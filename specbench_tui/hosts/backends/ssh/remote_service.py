"""What every server on an SSH host shares, however it is supervised (plain process or
systemd unit): the connection, the port checks done on the host, the forward that lets the
client here reach it, the background tasks that follow it, the mark that tells a server of
ours from any other, and what to do when the link to the host comes back after a drop."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import socket
import time
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specbench_tui.durations import format_duration
from specbench_tui.hosts.server_records import (
    RemoteRecord,
    boot_id,
    drop_record,
    proc_stat,
    same_process,
    write_record,
)
from specbench_tui.hosts.service import HostUnreachable, LineCallback, Service, ServiceError
from specbench_tui.hosts.ssh import PortForward, SshConnection, SshError
from specbench_tui.results.cells import ServiceGroup

# Exit 1 when something listens on (or holds) the port: the same bind test as port_in_use.
PORT_CHECK = (
    "import errno,socket,sys\n"
    "s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
    "try: s.bind(('0.0.0.0',int(sys.argv[1])))\n"
    "except OSError as e: sys.exit(1 if e.errno==errno.EADDRINUSE else 0)\n"
)
NoticeCallback = Callable[[str, str], None]  # (level, text), as a host's notices
ADOPT_HEALTH_S = 15.0  # a server found running must answer its health check within this
AFTER_OUTAGE_HEALTH_S = 60.0  # after the link came back, the server must answer within this


def launch_mark(
    campaign: str, group: ServiceGroup, extra_env: dict[str, str], owner: str = ""
) -> str:
    """``specbench:<campaign>:<group>:<hash>[:<owner>]``: names a server we start, on the host
    (a process's ``$0``, a unit's description). The hash covers the command line and the
    environment, so a server found running later (after a lost reply or a crash of this tool)
    is taken over only when it is exactly what this group would start now. The owner
    (``launch_owner``) says which run started it, so no other campaign takes it over or
    stops it while that run goes on."""
    env = sorted({**dict(group.env), **extra_env}.items())
    blob = json.dumps([list(group.command), env], separators=(",", ":"))
    digest = hashlib.sha256(blob.encode()).hexdigest()[:16]
    base = f"specbench:{campaign}:{group.id}:{digest}"
    return f"{base}:{owner}" if owner else base


def mark_what(mark: str) -> str:
    """The mark without its owner: what runs, whoever started it."""
    return ":".join(mark.split(":", 4)[:4])


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _machine_id() -> str:
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        with contextlib.suppress(OSError):
            found = Path(path).read_text().strip()
            if found:
                return found
    return socket.gethostname()


def launch_owner(results: str) -> str:
    """This run's part of a launch mark: the machine the tool runs on (its machine id and
    boot), the tool process (pid and start time), and the results directory it writes."""
    me = proc_stat(os.getpid())
    ticks = me.start_ticks if me else 0
    where = " ".join(results.split())  # one line, whatever the path holds
    return f"{_short(_machine_id())}.{_short(boot_id())}.{os.getpid()}.{ticks}@{where}"


@dataclass(frozen=True)
class LaunchOwner:
    """The run a launch mark names."""

    machine: str
    boot: str
    pid: int
    ticks: int
    results: str

    @property
    def here(self) -> bool:
        """Started by a tool on this machine (since its last boot or before)."""
        return self.machine == _short(_machine_id())

    def runs(self) -> bool:
        """Whether that run may still go on: its tool process lives here, or it ran on
        another machine, where nothing here can tell that it ended."""
        if not self.here:
            return True
        return self.boot == _short(boot_id()) and same_process(self.pid, self.ticks)

    def describe(self) -> str:
        where = "" if self.here else " on another machine"
        return f"results {self.results}, pid {self.pid}{where}"


def mark_owner(mark: str) -> LaunchOwner | None:
    parts = mark.split(":", 4)
    if len(parts) < 5:
        return None
    return parse_owner(parts[4])


def parse_owner(token: str) -> LaunchOwner | None:
    """A ``launch_owner`` token read back; None when it is not one."""
    ident, _, results = token.strip().partition("@")
    f = ident.split(".")
    if len(f) != 4 or not (f[2].isdigit() and f[3].isdigit()):
        return None
    return LaunchOwner(f[0], f[1], int(f[2]), int(f[3]), results)


def live_owner(mark: str, results: str) -> LaunchOwner | None:
    """The other run, still going, that a server marked so belongs to; None when it is this
    run's to take over or stop: started by a run of the same results (a resume: the results'
    lock says no other engine has them), by a run that ended, or by a tool that set no owner."""
    return other_run(mark_owner(mark), results)


def other_run(owner: LaunchOwner | None, results: str) -> LaunchOwner | None:
    """``owner`` when it is another run than one of ``results`` and may still go on."""
    if owner is None or owner.results == " ".join(results.split()):
        return None
    return owner if owner.runs() else None


def foreign_refusal(group: str, what: str, where: object, owner: LaunchOwner) -> ServiceError:
    """The start of a group whose server another campaign still runs: refused, that server
    neither taken over nor stopped."""
    return ServiceError(
        f"{group}: {what} on {where} belongs to another campaign still running "
        f"({owner.describe()}): not taken over or stopped; run this plan under another "
        "[campaign] name, or once that campaign has ended"
    )


def mark_mismatch(mark: str) -> str:
    """Why a server found running under a group's name is not taken over."""
    if not mark:
        return "it carries no launch mark (an older version of the tool started it)"
    return "its command line or environment differs from what the plan starts now"


async def remote_port_in_use(ssh: SshConnection, port: int, python: str = "python3") -> bool:
    """Whether something on the host listens on (or holds) ``port``: the bind test of
    ``port_in_use``, run there."""
    res = await ssh.run([python, "-c", PORT_CHECK, str(port)], timeout_s=30.0, idempotent=True)
    return res.exit_status == 1


@dataclass(frozen=True)
class PortHolder:
    """What listens on a port of a host, as far as ``ss`` shows it (the process is only
    visible to its owner or root) and the systemd unit its cgroup names."""

    text: str  # ss's line, squeezed: users:(("python3",pid=1234,fd=3)) ...
    pid: int | None = None
    unit: str | None = None

    def describe(self) -> str:
        who = f"{self.unit}, " if self.unit else ""
        return f"{who}{self.text}" if self.text else (self.unit or "an unknown process")


async def remote_port_holder(ssh: SshConnection, port: int) -> PortHolder:
    with contextlib.suppress(SshError):
        res = await ssh.run(
            f"ss -ltnpH 'sport = :{int(port)}' 2>/dev/null", timeout_s=10.0, idempotent=True
        )
        line = " ".join(res.stdout.split())
        users = re.search(r"users:\(\(.*\)\)", line)
        text = (users.group(0) if users else line)[:200]
        m = re.search(r"pid=(\d+)", text)
        if m is None:
            return PortHolder(text)
        pid = int(m.group(1))
        res = await ssh.run(f"cat /proc/{pid}/cgroup 2>/dev/null", timeout_s=10.0, idempotent=True)
        units = re.findall(r"/([^/\s]+\.service)(?:/|$)", res.stdout, flags=re.M)
        return PortHolder(text, pid, units[-1] if units else None)
    return PortHolder("")


def listeners_script(port: int) -> str:
    """Shell: each socket listening on ``port`` (``L<TAB>ss line``), then each process holding
    it (``P<TAB>pid<TAB>pgid<TAB>sid<TAB>cgroup lines``)."""
    return (
        f"ss -ltnpH 'sport = :{int(port)}' 2>/dev/null | while IFS= read -r l; do "
        r"""printf 'L\t%s\n' "$l"; """
        r"""for p in $(printf '%s\n' "$l" | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do """
        r"""s=$(cat /proc/$p/stat 2>/dev/null) || continue; set -- ${s##*)}; """
        r"""printf 'P\t%s\t%s\t%s\t%s\n' "$p" "$3" "$4" """
        r""""$(tr '\n' ' ' < /proc/$p/cgroup 2>/dev/null)"; done; done"""
    )


@dataclass(frozen=True)
class RemoteHolder:
    """One process holding a listening socket on a host: its process group, session and
    cgroup (which names the systemd unit it runs in)."""

    pid: int
    pgid: int
    sid: int
    cgroup: str


@dataclass(frozen=True)
class RemoteListener:
    text: str  # ss's line, squeezed
    holders: tuple[RemoteHolder, ...]

    def describe(self) -> str:
        users = re.search(r"users:\(\(.*\)\)", self.text)
        who = users.group(0) if users else "a process this login cannot see"
        units = {u for h in self.holders for u in re.findall(r"/([^/\s]+\.service)", h.cgroup)}
        return f"{', '.join(sorted(units))}, {who}" if units else who


def parse_listeners(stdout: str) -> list[RemoteListener]:
    out: list[tuple[str, list[RemoteHolder]]] = []
    for line in stdout.splitlines():
        kind, _, rest = line.partition("\t")
        if kind == "L":
            out.append((" ".join(rest.split())[:300], []))
        elif kind == "P" and out:
            f = rest.split("\t", 3)
            if len(f) >= 3 and all(x.isdigit() for x in f[:3]):
                out[-1][1].append(
                    RemoteHolder(int(f[0]), int(f[1]), int(f[2]), f[3] if len(f) > 3 else "")
                )
    return [RemoteListener(text, tuple(h)) for text, h in out]


class RemoteService(Service):
    """Base of the SSH-host services. ``python`` runs the port check on the host;
    ``campaign`` and ``results`` (with this process) go into the launch mark; ``on_notice``
    hears what the operator must know about a start (a server taken over or stopped, a lost
    reply)."""

    def __init__(
        self,
        group: ServiceGroup,
        ssh: SshConnection,
        log_path: str | os.PathLike[str],
        on_line: LineCallback | None = None,
        *,
        campaign: str = "",
        cwd: str | None = None,
        extra_env: dict[str, str] | None = None,
        python: str = "python3",
        port_free_timeout_s: float = 30.0,
        poll_s: float = 0.5,
        on_notice: NoticeCallback | None = None,
        results: str = "",
        records: Path | None = None,
        reached_as: tuple[str, str | None] | None = None,
    ) -> None:
        super().__init__(group, on_line)
        self.on_notice = on_notice or (lambda _level, _text: None)
        self.results = results  # the run's results directory: its launches carry it
        # Where the server goes on record (the results' servers/) and how its host is reached
        # (the plan's destination, the SSH config): what --cleanup needs to stop it later.
        self.records = records
        self.reached_as = reached_as
        self._record_path: Path | None = None
        self.ssh = ssh
        self.log_path = Path(log_path)
        self.campaign = campaign
        self.cwd = cwd
        self.extra_env = dict(extra_env or {})
        self.python = python
        self.port_free_timeout_s = port_free_timeout_s
        self.poll_s = poll_s
        self.mark = launch_mark(
            campaign, group, self.extra_env, launch_owner(results) if results else ""
        )
        self.adopted = False  # the last start took over a server already running
        self._exit_code: int | None = None
        self._exited = asyncio.Event()
        self._forward: PortForward | None = None
        self._tail_task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None

    @property
    def exit_code(self) -> int | None:
        return self._exit_code

    @property
    def link_drops(self) -> int:
        return self.ssh.drops

    async def _port_in_use(self) -> bool:
        return await remote_port_in_use(self.ssh, self.group.port, self.python)

    async def _describe_port_holder(self) -> str:
        holder = await remote_port_holder(self.ssh, self.group.port)
        return f" ({holder.describe()})" if holder.text or holder.unit else ""

    def _refuse_foreign(self, what: str, mark: str) -> None:
        """A server found under this group's name that another campaign still runs."""
        owner = live_owner(mark, self.results)
        if owner is not None:
            raise foreign_refusal(self.group.id, what, self.ssh, owner)

    async def _refuse_taken_port(self) -> None:
        if await self._port_in_use():
            holder = await self._describe_port_holder()
            raise ServiceError(
                f"{self.group.id}: port {self.group.port} already in use on {self.ssh}{holder}; "
                "stop it or change the plan's port"
            )

    async def _wait_port_free(self) -> None:
        deadline = time.monotonic() + self.port_free_timeout_s
        while await self._port_in_use():
            if time.monotonic() >= deadline:
                holder = await self._describe_port_holder()
                raise ServiceError(
                    f"{self.group.id}: port {self.group.port} on {self.ssh} still in use after "
                    f"the server stopped{holder}",
                    self.log_tail(),
                )
            await asyncio.sleep(0.2)

    async def _open_forward(self) -> None:
        self._forward = PortForward(self.ssh, self.group.port)
        try:
            local = await self._forward.open()
        except SshError as e:
            raise ServiceError(f"{self.group.id}: {e.reason}") from e
        self._base_url = f"http://127.0.0.1:{local}"

    async def _answers(self, timeout_s: float) -> bool:
        """Whether the server answers its health check within ``timeout_s`` (a server we did
        not just start: it must already be up)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if await self.check_health():
                return True
            if time.monotonic() >= deadline or not self.alive():
                return False
            await asyncio.sleep(0.5)

    def _owns(self, holder: RemoteHolder) -> bool:
        """Whether a process listening on the group's port is one of this server's."""
        return False

    def _on_record(self) -> dict[str, object]:
        """How the server is found again: its process group or its unit."""
        return {}

    @abstractmethod
    async def _start(self) -> None:
        """Launch the server, or take over or follow the one of this group that runs."""

    @abstractmethod
    async def _stop(self, grace_s: float) -> None:
        """Stop it; raise ServiceError when something of it stays."""

    async def start(self) -> None:
        """Start (or take over) the server, then put it on record in the results."""
        await self._start()
        if self.records is not None and self.reached_as is not None:
            rec = RemoteRecord(
                host=self.group.host,
                group=self.group.id,
                destination=self.reached_as[0],
                ssh_config=self.reached_as[1],
                mark=self.mark,
                started_at=time.time(),
                **self._on_record(),  # type: ignore[arg-type]
            )
            try:
                self._record_path = write_record(self.records, rec)
            except OSError as e:  # the next run still finds it by its mark on the host
                self.on_notice("warning", f"{self.group.id}: cannot put the server on record: {e}")

    async def stop(self, grace_s: float = 30.0) -> None:
        await self._stop(grace_s)
        drop_record(self._record_path)
        self._record_path = None

    async def prove_own_port(self) -> None:
        """Raise ServiceError, naming the holder, unless every socket listening on the
        group's port on the host belongs to this server (its session, or its unit's cgroup):
        a health check through the forward answers for whatever holds the port."""
        res = await self.ssh.run(listeners_script(self.group.port), timeout_s=30.0, idempotent=True)
        for sock in parse_listeners(res.stdout):
            if not any(self._owns(h) for h in sock.holders):
                raise ServiceError(
                    f"{self.group.id}: port {self.group.port} on {self.ssh} answers for another "
                    f"process, not this server: {sock.describe()}; not measured",
                    self.log_tail(),
                )

    async def wait_ready(self, timeout_s: float | None = None) -> float:
        """As for any server, then the proof that what answers on the port is this server;
        a start-up that timed out while the host was away says so."""
        try:
            ready = await super().wait_ready(timeout_s)
            await self.prove_own_port()
            return ready
        except ServiceError as e:
            if self.ssh.down_since is None:
                raise
            raise HostUnreachable(
                f"{e.reason}; the link to {self.ssh} has been down for "
                f"{format_duration(time.monotonic() - self.ssh.down_since)}",
                e.log_tail,
            ) from e

    async def _refresh(self) -> None:
        """Read the server's state on the host once (did it end while we could not look?)."""

    async def after_outage(self) -> None:
        """The link to the host dropped: wait until it is back (``HostUnreachable`` when the
        host stays away past the connection's reconnect timeout), until the forward is
        re-created, then read the server's state afresh. A server that ended meanwhile is
        then not ``alive()``; one that runs must answer its health check, else
        ``ServiceError``."""
        try:
            await self.ssh.connection()
        except SshError as e:
            raise HostUnreachable(e.reason) from e
        if self._forward is not None and not await self._forward.wait_live(30.0):
            raise ServiceError(
                f"{self.group.id}: the port forward to {self.ssh} did not come back after the "
                "reconnect"
            )
        await self._refresh()
        if not self.alive():
            return
        if not await self._answers(AFTER_OUTAGE_HEALTH_S):
            raise ServiceError(
                f"{self.group.id}: the server runs but does not answer its health check "
                f"{format_duration(AFTER_OUTAGE_HEALTH_S)} after the host came back "
                f"({self._last_health or 'no answer'})",
                self.log_tail(20),
            )

    async def _stop_background(self) -> None:
        for task in (self._watch_task, self._tail_task):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._watch_task = self._tail_task = None
        if self._forward is not None:
            await self._forward.close()
            self._forward = None

"""A group's server as a transient systemd unit on an SSH host (``services = "systemd"``).

systemd is the better supervisor on a GPU host: the unit's cgroup holds every TP worker,
so ``systemctl stop`` leaves nothing behind; the server survives our SSH connection and even
our crash; the journal keeps its output. We start it with ``systemd-run`` (no unit file to
install or clean up: ``--collect`` unloads it once it ends) and ``Type=exec``, so a bad
ExecStart (a wrong interpreter path) fails the start itself instead of a later health
timeout.

Reading state: ``systemctl show`` in its ``KEY=VALUE`` form, because with ``--value`` the
values come in systemd's order, not the order asked for. A collected unit no longer exists
once it has failed, so the exit status is taken from systemd's own journal line ("Main
process exited, code=exited, status=1/FAILURE"), which ``journalctl -u`` includes.

The log is followed with ``journalctl -u UNIT -o json -n all --all --after-cursor C -f``,
keeping the last cursor, so a reconnect resumes exactly where it stopped. Both flags matter on
a real journald: without ``-n all`` a follower shows at most 10 of the entries after the
cursor (a server that crashed while the link was down came back with 9 of its 30 lines, no
traceback), and without ``--all`` a field over 4096 bytes is ``null`` (a server's
printed arguments, long tracebacks). journald writes MESSAGE as a list of byte values when
the text is not printable UTF-8 (colour codes, a stray byte), and as a list of values when an
entry carries the field more than once; all forms are read.

The unit runs the command line the plan gives, as process mode does: systemd expands ``$VAR``
in ExecStart arguments, so each ``$`` is sent as ``$$`` (or, from systemd 254 on,
``--expand-environment=no``). Its environment is the SSH login's ``HOME`` and ``PATH``, the
group's ``env``, and its working directory is the host's workdir, so caches and relative paths
behave as when the operator starts the command by hand over SSH.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shlex
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncssh

from specbench_tui.errors import describe
from specbench_tui.hosts.backends.ssh.remote_service import (
    ADOPT_HEALTH_S,
    RemoteHolder,
    RemoteService,
    mark_mismatch,
    mark_what,
)
from specbench_tui.hosts.lines import CUT_MARK
from specbench_tui.hosts.service import LineCallback, ServiceError, describe_stop
from specbench_tui.hosts.shell import quote_command, remote_path
from specbench_tui.hosts.ssh import SshConnection, SshError, SshResultLost
from specbench_tui.results.cells import ServiceGroup

log = logging.getLogger(__name__)

UNIT_PART = re.compile(r"^[A-Za-z0-9_.-]+$")
EXPAND_ENV_OPTION_SINCE = 254  # systemd-run --expand-environment=
# systemd-run's own lines on stderr; a shell rc file on the host may print others before them
_SYSTEMD_SAYS = re.compile(r"^(Failed to |Job for |Unit \S+ |Invalid |Unknown |Assignment )")
ACTIVE_STATES = ("active", "activating", "deactivating", "reloading", "refreshing")
SHOW_KEYS = (
    "ActiveState",
    "SubState",
    "Result",
    "ExecMainStatus",
    "ExecMainPID",
    "LoadState",
    "Description",
)
_MAIN_EXITED = re.compile(r"Main process exited, code=(\w+), status=(\d+)")


def unit_name(campaign: str, group_id: str) -> str:
    """``specbench-<campaign>-<group>.service``; refuses characters systemd would escape
    (the plan allows none, so one here is a bug, not something to mangle silently)."""
    for part in (campaign, group_id):
        if not UNIT_PART.match(part):
            raise ValueError(f"{part!r} cannot be part of a systemd unit name")
    name = f"specbench-{campaign}-{group_id}.service"
    if len(name) > 255:
        raise ValueError(f"unit name too long ({len(name)} > 255): {name}")
    return name


def parse_show(text: str, keys: Iterable[str] = SHOW_KEYS) -> dict[str, str]:
    """``systemctl show`` output: ``KEY=VALUE`` lines; bare values (``--value``) are taken
    in the order of ``keys`` as a fallback."""
    out: dict[str, str] = {}
    bare: list[str] = []
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key and key.isidentifier():
            out[key] = value
        else:
            bare.append(line)
    if not out and bare:
        out = dict(zip(keys, bare, strict=False))
    return out


def _field_value(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, list):
        try:
            return bytes(int(b) & 0xFF for b in value).decode("utf-8", errors="replace")
        except (TypeError, ValueError):
            return None
    return str(value)


_CUT_TEXT = CUT_MARK.decode()


def journal_message(entry: Mapping[str, Any]) -> str | None:
    """The MESSAGE of a journald JSON entry: a string, a list of byte values, null (a field
    over 4096 bytes read without ``--all``), or, when the entry has the field several
    times, a list of those (strings or byte lists), joined here with newlines."""
    msg = entry.get("MESSAGE")
    if isinstance(msg, list) and msg and all(isinstance(v, str | list) for v in msg):
        parts = [p for p in (_field_value(v) for v in msg) if p is not None]
        return "\n".join(parts) if parts else None
    return _field_value(msg)


def escape_dollars(arg: str) -> str:
    """An ExecStart argument systemd passes on as given (``$$`` is its literal ``$``)."""
    return arg.replace("$", "$$")


def systemd_error(stderr: str) -> str:
    """systemd-run's own error line ("Failed to find executable ...", "Job for ... failed"),
    not whatever a login rc file printed to stderr before it; else the last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if _SYSTEMD_SAYS.match(line):
            return line
    return lines[-1] if lines else ""


def parse_systemd_version(text: str) -> int | None:
    """``systemctl --version``'s first line, "systemd 252 (252.39-1~deb12u2)", as 252."""
    m = re.match(r"\s*systemd (\d+)", text)
    return int(m.group(1)) if m else None


def parse_cuda_devices(value: str) -> set[int] | None:
    """CUDA_VISIBLE_DEVICES as GPU indices; None when they are not plain indices (UUIDs,
    MIG names), since then nothing can be concluded from it."""
    value = value.strip()
    if not value:
        return set()
    try:
        return {int(x) for x in value.split(",") if x.strip()}
    except ValueError:
        return None


@dataclass(frozen=True)
class LoginFacts:
    """What a unit needs from the SSH login: its HOME and PATH, the absolute workdir (systemd
    wants an absolute path), and the systemd version (which decides the ``$`` handling)."""

    home: str
    path: str
    workdir: str
    systemd: int | None


async def login_facts(ssh: SshConnection, workdir: str) -> LoginFacts:
    """One round trip; the work directory is created if missing. Values are NUL-separated:
    a path may hold a newline."""
    wd = remote_path(workdir)
    script = (
        'printf \'home=%s\\0path=%s\\0\' "$HOME" "$PATH"; '
        "printf 'systemd=%s\\0' \"$(systemctl --version 2>/dev/null | head -n 1)\"; "
        f"mkdir -p {wd} && cd {wd} && printf 'workdir=%s\\0' \"$PWD\""
    )
    res = await ssh.run(script, timeout_s=30.0, idempotent=True)
    got: dict[str, str] = {}
    for part in res.stdout.split("\0"):
        key, sep, value = part.partition("=")
        if sep:  # a login rc file may print before the first key
            got[key.rsplit("\n", 1)[-1]] = value
    if not res.ok or not got.get("workdir"):
        err = systemd_error(res.stderr) or f"status {res.exit_status}"
        raise ServiceError(f"{ssh}: cannot read the login environment or create {workdir}: {err}")
    return LoginFacts(
        home=got.get("home", ""),
        path=got.get("path", ""),
        workdir=got["workdir"],
        systemd=parse_systemd_version(got.get("systemd", "")),
    )


def main_exit_status(message: str) -> int | None:
    """systemd's "Main process exited, code=exited|killed, status=N/NAME" as a return code
    (negative for a signal, like Popen)."""
    m = _MAIN_EXITED.search(message)
    if not m:
        return None
    code = int(m.group(2))
    return code if m.group(1) == "exited" else -code


async def show_unit(ssh: SshConnection, unit: str) -> dict[str, str]:
    """A unit's state (an unknown unit reads as inactive, LoadState=not-found)."""
    res = await ssh.run(
        ["systemctl", "show", "-p", ",".join(SHOW_KEYS), unit], timeout_s=30.0, idempotent=True
    )
    return parse_show(res.stdout)


async def wait_unit_inactive(ssh: SshConnection, unit: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if (await show_unit(ssh, unit)).get("ActiveState") not in ACTIVE_STATES:
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.2)


async def stop_unit(
    ssh: SshConnection,
    unit: str,
    grace_s: float,
    say: Callable[[str], None] | None = None,
    kill_wait_s: float = 10.0,
) -> tuple[str, ...]:
    """``systemctl stop``, SIGKILL to the unit after ``grace_s``; returns once it is inactive, with
    the signals it sent (systemd's stop is a SIGTERM; none: already ended). Every step is a
    check or a request systemd takes twice as once, so each survives a dropped link (the
    connection waits for the host). A unit still active ``kill_wait_s`` after SIGKILL raises
    ServiceError: the caller keeps it on record, never takes it for stopped."""
    say = say or (lambda _line: None)
    if (await show_unit(ssh, unit)).get("ActiveState") not in ACTIVE_STATES:
        return ()
    say(f"----- stopping {unit} (grace {grace_s:g}s)")
    await ssh.run(["systemctl", "stop", "--no-block", unit], timeout_s=30, idempotent=True)
    if not await wait_unit_inactive(ssh, unit, grace_s):
        say(f"----- {unit} did not stop; sending SIGKILL")
        await ssh.run(["systemctl", "kill", "--signal=KILL", unit], timeout_s=30.0, idempotent=True)
        if not await wait_unit_inactive(ssh, unit, kill_wait_s):
            raise ServiceError(f"{unit} on {ssh}: still active after SIGKILL")
        return ("SIGTERM", "SIGKILL")
    return ("SIGTERM",)


class SystemdService(RemoteService):
    """The group's command as the transient unit ``specbench-<campaign>-<group>.service``.

    ``cwd`` is the server's working directory (default: ``workdir``, created if missing);
    ``python`` is used on the host for the port check. The unit's description is the launch
    mark: a unit of this name found running is taken over only when it matches and answers
    its health check, and stopped otherwise; a ``systemd-run`` whose reply was lost is not
    sent again before the unit's state says nothing came up.
    """

    def __init__(
        self,
        group: ServiceGroup,
        ssh: SshConnection,
        log_path: str | os.PathLike[str],
        on_line: LineCallback | None = None,
        *,
        campaign: str,
        workdir: str = "~/specbench",
        **kw: Any,
    ) -> None:
        super().__init__(group, ssh, log_path, on_line, campaign=campaign, **kw)
        self.unit = unit_name(campaign, group.id)
        self.workdir = workdir
        self.facts: LoginFacts | None = None  # read at each start
        self.main_pid: int | None = None
        self.cursor: str | None = None  # the last journal entry read
        self._started = False
        self._journal_exit: int | None = None

    # --- Service --------------------------------------------------------------------------

    def alive(self) -> bool:
        """From the last poll (every ``poll_s``): no round trip here."""
        return self._started and not self._exited.is_set()

    def _on_record(self) -> dict[str, object]:
        return {"unit": self.unit}

    def _owns(self, holder: RemoteHolder) -> bool:
        """Every process of the unit lives in its cgroup, named after the unit."""
        return re.search(rf"/{re.escape(self.unit)}(/|\s|$)", holder.cgroup) is not None

    async def show(self) -> dict[str, str]:
        """The unit's state (an unknown unit reads as inactive, LoadState=not-found)."""
        return await show_unit(self.ssh, self.unit)

    async def _start(self) -> None:
        if self.alive():
            raise ServiceError(f"{self.group.id}: {self.unit} already running on {self.ssh}")
        if not self.group.command:
            raise ServiceError(f"{self.group.id}: the service group has no command")
        await self._stop_background()
        self._reset_for_start()
        self.adopted = False
        state = await self.show()
        if state.get("ActiveState") in ACTIVE_STATES:
            mark = state.get("Description", "")
            self._refuse_foreign(self.unit, mark)
            same = mark_what(mark) == mark_what(self.mark)
            if same and await self._adopt():
                return
            if not same:
                self.on_notice(
                    "warning",
                    f"{self.group.id}: stopped {self.unit}, left running on {self.ssh} by an "
                    f"earlier run: {mark_mismatch(mark if mark.startswith('specbench:') else '')}",
                )
            await stop_unit(self.ssh, self.unit, 30.0, self._write_log)
            await self._wait_port_free()
        await self._refuse_taken_port()
        for _ in range(2):  # a start whose reply was lost and that did not come up: once more
            if await self._launch():
                return
        raise ServiceError(
            f"{self.group.id}: cannot start {self.unit} on {self.ssh}: the connection dropped "
            "during the start twice and the unit did not come up"
        )

    def _new_run(self) -> None:
        self._exited = asyncio.Event()
        self._exit_code = self._journal_exit = None
        self.main_pid = None
        self._started = False

    async def _launch(self) -> bool:
        """Start the unit; False when the reply was lost and no unit came up."""
        self._new_run()
        # a failed earlier unit of the same name would block the new one
        await self.ssh.run(
            ["systemctl", "reset-failed", self.unit], timeout_s=30.0, idempotent=True
        )
        self.cursor = await self._journal_end()
        self._open_log()
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        self._write_log(
            f"----- {stamp} starting {self.group.id} as {self.unit} on {self.ssh}: "
            f"{quote_command(self.group.command)}"
        )
        try:
            self.facts = facts = await login_facts(self.ssh, self.workdir)
            res = await self.ssh.run(self.run_command(facts), timeout_s=120.0)
        except SshResultLost as e:
            log.info("%s: %s", self.group.id, e.reason)
            return await self._after_lost_start()
        except ServiceError as e:
            self._close_log()
            raise ServiceError(f"{self.group.id}: cannot start {self.unit}: {e.reason}") from e
        self._tail_task = asyncio.create_task(self._follow_journal(), name=f"journal-{self.unit}")
        if not res.ok:
            err = systemd_error(res.stderr) or f"status {res.exit_status}"
            await asyncio.sleep(0.3)  # let the tail fetch systemd's lines on the failure
            await self._stop_background()
            self._close_log()
            raise ServiceError(
                f"{self.group.id}: systemd-run failed for {self.unit} on {self.ssh}: {err} "
                f"(ExecStart: {self.group.command[0]})",
                self.log_tail(),
            )
        await self._attach()
        return True

    async def _after_lost_start(self) -> bool:
        """The reply to ``systemd-run`` was lost: follow the unit if it came up (a start that
        was under way when the link dropped shows within moments), else report nothing."""
        state: dict[str, str] = {}
        for _ in range(3):
            state = await self.show()
            if state.get("ActiveState") in ACTIVE_STATES:
                break
            await asyncio.sleep(1.0)
        if state.get("ActiveState") not in ACTIVE_STATES:
            self._write_log(f"----- the reply to the start was lost and {self.unit} is not running")
            self.on_notice(
                "warning",
                f"{self.group.id}: the link to {self.ssh} dropped during the start and "
                f"{self.unit} did not come up; starting it again",
            )
            return False
        if state.get("Description") != self.mark:  # not ours after all: make way, try again
            self._refuse_foreign(self.unit, state.get("Description", ""))
            await stop_unit(self.ssh, self.unit, 30.0, self._write_log)
            return False
        self._write_log(f"----- the reply to the start was lost; {self.unit} runs: following it")
        self.on_notice(
            "warning",
            f"{self.group.id}: the link to {self.ssh} dropped during the start; {self.unit} "
            "runs: following it, not starting another",
        )
        self._tail_task = asyncio.create_task(self._follow_journal(), name=f"journal-{self.unit}")
        await self._attach()
        return True

    async def _attach(self) -> None:
        """Follow the running unit: its main pid, the forward, the state watch."""
        self._started = True
        state = await self.show()
        with contextlib.suppress(ValueError):
            self.main_pid = int(state.get("ExecMainPID", "0")) or None
        await self._open_forward()
        self._watch_task = asyncio.create_task(self._watch(), name=f"watch-{self.unit}")

    async def _adopt(self) -> bool:
        """Take over this group's unit found running (left by an earlier run of the tool):
        its journal followed from now on, kept only if it answers its health check."""
        self._new_run()
        self.cursor = await self._journal_end()
        self._open_log()
        self._tail_task = asyncio.create_task(self._follow_journal(), name=f"journal-{self.unit}")
        await self._attach()
        if await self._answers(ADOPT_HEALTH_S):
            self.adopted = True
            self._write_log(f"----- {self.group.id}: took over {self.unit}, already running")
            self.on_notice(
                "info",
                f"{self.group.id}: took over {self.unit}, left running on {self.ssh} by an "
                "earlier run: same command line, healthy",
            )
            return True
        why = f"does not answer its health check ({self._last_health or 'no answer'})"
        self._write_log(f"----- {self.group.id}: {self.unit}, already running, {why}")
        self.on_notice(
            "warning",
            f"{self.group.id}: stopped {self.unit}, left running on {self.ssh} by an earlier "
            f"run: it {why}; starting a new one",
        )
        await self._stop_background()
        self._started = False
        return False

    def run_command(self, facts: LoginFacts) -> list[str]:
        """The ``systemd-run`` argv: the login's HOME and PATH under the group's env, the
        workdir as cwd, the launch mark as description, and the command's ``$`` kept literal
        (systemd would expand it)."""
        env = {"HOME": facts.home, "PATH": facts.path, **dict(self.group.env), **self.extra_env}
        env.setdefault("PYTHONUNBUFFERED", "1")
        command = list(self.group.command)
        if facts.systemd is not None and facts.systemd >= EXPAND_ENV_OPTION_SINCE:
            literal = ["--expand-environment=no"]
        else:
            # argv[0] is also the executable systemd-run looks up, so it is left as it is
            literal = []
            command[1:] = [escape_dollars(a) for a in command[1:]]
        return [
            "systemd-run",
            f"--unit={self.unit}",
            f"--description={self.mark}",
            "--property=Type=exec",
            "--collect",
            "--quiet",
            *literal,
            *(f"--setenv={k}={v}" for k, v in env.items()),
            f"--working-directory={self.cwd or facts.workdir}",
            "--",
            *command,
        ]

    async def released(self) -> bool:
        if (await self.show()).get("ActiveState") in ACTIVE_STATES:
            return False
        return not await self._port_in_use()

    async def wait_exit(self) -> int | None:
        if not self._started:
            return None
        await self._exited.wait()
        return self._exit_code

    async def _stop(self, grace_s: float) -> None:
        try:
            if self._started:
                sent = await stop_unit(self.ssh, self.unit, grace_s, self._write_log)
                await self._settle_exit()
                await asyncio.sleep(0.2)  # systemd's last journal lines
                self._write_log(f"----- {self.unit} {describe_stop(self._exit_code, sent)}")
        finally:  # a stop that failed still ends the journal and the log; its record stays
            await self._stop_background()
            self._close_log()
        if self._started:
            await self._wait_port_free()

    # --- internals -------------------------------------------------------------------------

    async def _settle_exit(self) -> None:
        """Record the end: the journal's exit line if seen (a collected unit keeps no
        status), else what ``systemctl show`` still says."""
        if self._exited.is_set():
            return
        for _ in range(10):  # the journal line may trail the state change a little
            if self._journal_exit is not None:
                break
            await asyncio.sleep(0.05)
        code = self._journal_exit
        if code is None:
            state = await self.show()
            if state.get("LoadState") != "not-found" and state.get("Result") != "success":
                with contextlib.suppress(ValueError):
                    code = int(state.get("ExecMainStatus", ""))
        self._exit_code = code
        self._exited.set()

    async def _refresh(self) -> None:
        if not self._started or self._exited.is_set():
            return
        if (await self.show()).get("ActiveState") not in ACTIVE_STATES:
            await self._settle_exit()

    async def _watch(self) -> None:
        while not self._exited.is_set():
            try:
                state = await self.show()
            except SshError as e:
                log.info("%s: cannot poll %s: %s", self.group.id, self.unit, e)
                await asyncio.sleep(self.poll_s * 4)
                continue
            if state.get("ActiveState") not in ACTIVE_STATES:
                await self._settle_exit()
                return
            await asyncio.sleep(self.poll_s)

    async def _journal_end(self) -> str | None:
        """The cursor of the unit's newest journal entry (None when it has none), so the tail
        starts after it and a previous run of the same unit name is not shown again.

        The cursor must be one of the unit's own entries: given a cursor that ``-u UNIT`` does
        not match (the newest entry of the whole journal, say), journalctl 252 drops the
        first matching entry after it, sometimes the server's first line."""
        res = await self.ssh.run(
            ["journalctl", "-u", self.unit, "-n", "1", "-o", "json", "--no-pager"],
            idempotent=True,
        )
        for line in reversed(res.stdout.splitlines()):
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict) and entry.get("__CURSOR"):
                    return str(entry["__CURSOR"])
        return None

    def journal_command(self) -> list[str]:
        """``-n all``: every entry after the cursor, not the last 10; ``--all``: long fields
        in full instead of null."""
        argv = ["journalctl", "-u", self.unit, "-o", "json", "--no-pager", "-n", "all", "--all"]
        if self.cursor:
            argv += [f"--after-cursor={self.cursor}"]
        return [*argv, "-f"]

    async def _follow_journal(self) -> None:
        """Follow the unit's journal; after a drop resume after the last cursor read."""
        while True:
            try:
                async for line in self.ssh.stream_lines(self.journal_command()):
                    self._handle_entry(line)
            except SshError as e:
                log.info("%s: journal: %s", self.unit, e)
                await asyncio.sleep(2.0)
                continue
            except (asyncssh.Error, OSError) as e:  # a channel that failed to open or broke
                log.info("%s: journal: %s", self.unit, describe(e))
            await asyncio.sleep(0.5)

    def _handle_entry(self, line: str) -> None:
        try:
            entry = json.loads(line)
        except ValueError:
            if line.endswith(_CUT_TEXT):  # journald's LineMax raised past 1 MiB: say it
                self._write_log(f"----- a journal entry of {self.unit} over 1 MiB was left out")
            return
        if not isinstance(entry, dict):
            return
        if entry.get("__CURSOR"):
            self.cursor = str(entry["__CURSOR"])
        msg = journal_message(entry)
        if msg is None:
            return
        if entry.get("UNIT") == self.unit or entry.get("_PID") == "1":  # systemd about the unit
            code = main_exit_status(msg)
            if code is not None:
                self._journal_exit = code
                if self._exited.is_set() and self._exit_code is None:
                    self._exit_code = code  # the line came after the state poll settled
        for part in msg.split("\n"):
            if "\r" in part:
                parts = [p for p in part.split("\r") if p.strip()]
                part = parts[-1] if parts else ""
            self._write_log(part)
            self._emit_line(part)


class ForeignUnits:
    """Services outside the campaign stopped to free GPUs (``stop_before``), and started
    again at the end (``restore_after``). Only those that were active are restarted."""

    def __init__(self, ssh: SshConnection) -> None:
        self.ssh = ssh
        self.stopped: list[str] = []

    async def stop(self, names: Iterable[str], timeout_s: float = 120.0) -> list[str]:
        """Stop each active unit; returns the ones stopped now. Raises ServiceError when a
        stop fails (the GPU wait would otherwise blame the wrong thing)."""
        now: list[str] = []
        for name in names:
            if not UNIT_PART.match(name):
                raise ServiceError(f"{self.ssh}: {name!r} is not a systemd unit name")
            res = await self.ssh.run(
                ["systemctl", "is-active", name], timeout_s=30.0, idempotent=True
            )
            if res.stdout.strip() not in ACTIVE_STATES:
                continue
            res = await self.ssh.run(
                ["systemctl", "stop", name], timeout_s=timeout_s, idempotent=True
            )
            if not res.ok:
                err = (res.stderr.strip().splitlines() or [f"status {res.exit_status}"])[-1]
                raise ServiceError(f"{self.ssh}: cannot stop {name}: {err}")
            if name not in self.stopped:
                self.stopped.append(name)
            now.append(name)
        return now

    async def configured_gpus(self, name: str) -> set[int] | None:
        """The GPUs an active unit is set up to use, from CUDA_VISIBLE_DEVICES in its
        Environment= or, failing that, in its main process's environment; None when it says
        nothing (it may then use any GPU) or the unit is not active."""
        if not UNIT_PART.match(name):
            raise ServiceError(f"{self.ssh}: {name!r} is not a systemd unit name")
        res = await self.ssh.run(
            ["systemctl", "show", "-p", "ActiveState,MainPID,Environment", name],
            timeout_s=30.0,
            idempotent=True,
        )
        state = parse_show(res.stdout)
        if state.get("ActiveState") not in ACTIVE_STATES:
            return None
        with contextlib.suppress(ValueError):
            for word in shlex.split(state.get("Environment", "")):
                if word.startswith("CUDA_VISIBLE_DEVICES="):
                    return parse_cuda_devices(word.split("=", 1)[1])
        pid = state.get("MainPID", "0")
        if pid.isdigit() and int(pid) > 0:
            res = await self.ssh.run(
                f"tr '\\0' '\\n' < /proc/{int(pid)}/environ 2>/dev/null",
                timeout_s=30.0,
                idempotent=True,
            )
            for line in res.stdout.splitlines():
                if line.startswith("CUDA_VISIBLE_DEVICES="):
                    return parse_cuda_devices(line.split("=", 1)[1])
        return None

    async def restore(self, timeout_s: float = 120.0) -> list[str]:
        """Start again what ``stop`` stopped; returns problems, one line each (restoring
        is best effort: one unit that fails must not keep the others down)."""
        problems: list[str] = []
        for name in list(self.stopped):
            try:
                res = await self.ssh.run(
                    ["systemctl", "start", name], timeout_s=timeout_s, idempotent=True
                )
            except SshError as e:
                problems.append(f"cannot start {name} again: {e.reason}")
                continue
            if res.ok:
                self.stopped.remove(name)
            else:
                err = (res.stderr.strip().splitlines() or [f"status {res.exit_status}"])[-1]
                problems.append(f"cannot start {name} again: {err}")
        return problems


__all__ = [
    "ForeignUnits",
    "LoginFacts",
    "SystemdService",
    "escape_dollars",
    "journal_message",
    "login_facts",
    "main_exit_status",
    "parse_cuda_devices",
    "parse_show",
    "parse_systemd_version",
    "show_unit",
    "stop_unit",
    "systemd_error",
    "unit_name",
]

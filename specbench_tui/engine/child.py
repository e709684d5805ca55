"""A campaign run by a console, in a process of its own.

The console draws in its own process; the campaign runs headless in a child, and the console
follows it through the control socket like any attached console. Measuring in the process
that also renders the console cost the client its timing (the render loop holds the
interpreter: every cell of a demo run in-process came out flagged as lagged), so the two
never share an interpreter.

For the console the child looks like an in-process campaign: ``start_engine()`` returns the
campaign's exit status when it ends, and quitting the console aborts it (through the socket),
so what the operator sees and decides is the same either way. The child's printed lines go to
``engine.log`` in the results directory; a run that fails before its socket is up (bad input,
a host that cannot be reached) is one clear error here, with the child's own message.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import ClassVar

from specbench_tui.engine.commands import ChildEngine, Command, Reply
from specbench_tui.engine.control_socket import AttachedControl, ShortPath
from specbench_tui.errors import InputError
from specbench_tui.hosts.options import HostOptions
from specbench_tui.results.events import Event
from specbench_tui.results.layout import ResultsLayout

#: How long a child may take from its start to serving its socket (host checks included).
START_TIMEOUT_S = 600.0


class EngineProcess:
    """``specbench-tui PLAN --headless ...`` as a child process of this one."""

    def __init__(self, argv: Sequence[str], layout: ResultsLayout) -> None:
        self.argv = [sys.executable, "-m", "specbench_tui", *argv, "--headless"]
        self.layout = layout
        self.proc: subprocess.Popen[bytes] | None = None
        self._ready = False
        self._offset = 0
        self._deadline = 0.0

    def spawn(self) -> None:
        """Start the child and return at once (its socket comes up later: ``ready``)."""
        self.layout.root.mkdir(parents=True, exist_ok=True)
        log_path = self.layout.engine_log
        self._offset = log_path.stat().st_size if log_path.exists() else 0
        self._deadline = time.monotonic() + START_TIMEOUT_S
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                # Its own session: a terminal's Ctrl-C or hang-up is the console's to handle,
                # and a console that leaves (detaches) leaves it running.
                start_new_session=True,
            )

    def start(self) -> OwnedControl:
        """Start the campaign and return once its socket answers; raises InputError with the
        child's message when it ends first (an error before anything ran). Blocking: call it
        before the console's loop runs, or in a thread."""
        self.spawn()
        while not self._poll_ready(_answers(self.layout.control_socket, self.pid)):
            time.sleep(0.05)
        return OwnedControl(self.layout.control_socket, self)

    def launch(self) -> OwnedControl:
        """Start the campaign and return its control at once, before its socket is up: the
        console draws its first frame while the child loads and checks its hosts, and the
        control's ``ready`` says when it answers (or raises the child's error)."""
        self.spawn()
        return OwnedControl(self.layout.control_socket, self)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def _poll_ready(self, answers: bool) -> bool:
        """One look at a starting child: True once it answers; raises when it ended first
        or took longer than ``START_TIMEOUT_S``."""
        assert self.proc is not None
        code = self.proc.poll()
        if code is not None:
            raise _failed_start(self.layout.engine_log, self._offset, code)
        if answers:
            self._ready = True
            return True
        if time.monotonic() > self._deadline:
            self.proc.kill()
            raise InputError(
                f"the campaign did not start within {START_TIMEOUT_S:.0f} s; "
                f"see {self.layout.engine_log}"
            )
        return False

    async def ready(self) -> None:
        """Wait (without blocking the loop) until the child's socket answers."""
        while not self._ready:
            answers = await _answers_async(self.layout.control_socket, self.pid)
            if not self._poll_ready(answers):
                await asyncio.sleep(0.05)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def wait(self) -> int:
        """The child's exit status, polled: a thread blocked in ``wait()`` would be joined
        when the console's interpreter exits, holding the terminal until the child ended
        (its report written) though the operator had already left."""
        assert self.proc is not None
        while (code := self.proc.poll()) is None:
            await asyncio.sleep(0.1)
        return code


def _answers(path: Path, pid: int) -> bool:
    """Whether the socket at ``path`` is this child's (its ping names the pid)."""
    if not path.exists():
        return False
    with ShortPath(path) as p, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2.0)
        try:
            s.connect(p)
            s.sendall(b'{"op": "ping"}\n')
            reply = s.recv(4096)
        except OSError:
            return False
    return f"pid {pid}".encode() in reply


async def _answers_async(path: Path, pid: int) -> bool:
    """``_answers`` on the event loop."""
    if not path.exists():
        return False
    try:
        with ShortPath(path) as p:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(p), 2.0)
        try:
            writer.write(b'{"op": "ping"}\n')
            await writer.drain()
            reply = await asyncio.wait_for(reader.readline(), 2.0)
        finally:
            writer.close()
    except (OSError, TimeoutError):
        return False
    return f"pid {pid}".encode() in reply


def _failed_start(log_path: Path, offset: int, code: int) -> InputError:
    with open(log_path, "rb") as f:
        f.seek(offset)
        lines = f.read().decode("utf-8", "replace").strip().splitlines()
    said = [x.removeprefix("specbench-tui: ") for x in lines if x.strip()]
    err = InputError(said[-1] if said else f"the campaign exited with status {code}")
    err.exit_code = code if code else 1
    return err


class OwnedControl(AttachedControl):
    """The socket of a campaign this console started: quitting the console ends it (an
    abort, sent before the console leaves; the child then writes its views and report on
    its own), detaching leaves it running for ``--attach``."""

    detached: ClassVar[bool] = False
    owns_engine: ClassVar[bool] = True

    def __init__(self, path: Path, process: EngineProcess) -> None:
        super().__init__(path)
        self.process = process

    @property
    def engine_pid(self) -> int:
        return self.process.pid

    def child_engine(self) -> ChildEngine | None:
        return self if self.process.running else None

    async def send_now(self, command: Command) -> Reply:
        return await super().send(command)

    async def subscribe(self) -> AsyncIterator[Event]:
        await self.process.ready()
        async for ev in super().subscribe():
            yield ev

    async def send(self, command: Command) -> Reply:
        await self.process.ready()
        return await super().send(command)

    async def start_engine(self) -> int:
        """The campaign runs already; this returns its exit status when it ends (and
        raises InputError with the child's message when it failed before it ran)."""
        await self.process.ready()
        return await self.process.wait()


def engine_argv(
    plan: Path,
    results_root: Path,
    *,
    sim: bool = False,
    only: str | None = None,
    rerun_failed: bool = False,
    rerun: Sequence[str] = (),
    hosts: HostOptions | None = None,
    estimate_from: Path | None = None,
) -> list[str]:
    """The command line of a child run, from what the console was asked for."""
    argv = [str(plan), "--results", str(results_root)]
    if estimate_from is not None:
        argv += ["--estimate-from", str(estimate_from)]
    if sim:
        argv.append("--sim")
    if only:
        argv += ["--only", only]
    if rerun_failed:
        argv.append("--rerun-failed")
    if rerun:
        argv += ["--rerun", ",".join(rerun)]
    if hosts is not None:
        argv += hosts.argv()
    return argv

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
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from specbench_tui.engine.control_socket import AttachedControl, ShortPath
from specbench_tui.errors import InputError
from specbench_tui.results.layout import ResultsLayout

#: How long a child may take from its start to serving its socket (host checks included).
START_TIMEOUT_S = 600.0


class EngineProcess:
    """``specbench-tui PLAN --headless ...`` as a child process of this one."""

    def __init__(self, argv: Sequence[str], layout: ResultsLayout) -> None:
        self.argv = [sys.executable, "-m", "specbench_tui", *argv, "--headless"]
        self.layout = layout
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OwnedControl:
        """Start the campaign and return once its socket answers; raises InputError with the
        child's message when it ends first (an error before anything ran). Blocking: call it
        before the console's loop runs, or in a thread."""
        self.layout.root.mkdir(parents=True, exist_ok=True)
        log_path = self.layout.engine_log
        offset = log_path.stat().st_size if log_path.exists() else 0
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                # Its own session: a terminal's Ctrl-C or hang-up is the console's to handle.
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            code = self.proc.poll()
            if code is not None:
                raise _failed_start(log_path, offset, code)
            if _answers(self.layout.control_socket, self.proc.pid):
                return OwnedControl(self.layout.control_socket, self)
            if time.monotonic() > deadline:
                self.proc.kill()
                raise InputError(
                    f"the campaign did not start within {START_TIMEOUT_S:.0f} s; see {log_path}"
                )
            time.sleep(0.05)

    async def wait(self) -> int:
        assert self.proc is not None
        return await asyncio.to_thread(self.proc.wait)


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


def _failed_start(log_path: Path, offset: int, code: int) -> InputError:
    with open(log_path, "rb") as f:
        f.seek(offset)
        lines = f.read().decode("utf-8", "replace").strip().splitlines()
    said = [x.removeprefix("specbench-tui: ") for x in lines if x.strip()]
    err = InputError(said[-1] if said else f"the campaign exited with status {code}")
    err.exit_code = code if code else 1
    return err


class OwnedControl(AttachedControl):
    """The socket of a campaign this console started: leaving the console ends it."""

    detached: ClassVar[bool] = False
    owns_engine: ClassVar[bool] = True

    def __init__(self, path: Path, process: EngineProcess) -> None:
        super().__init__(path)
        self.process = process

    async def start_engine(self) -> int:
        """The campaign runs already; this returns its exit status when it ends."""
        return await self.process.wait()


def engine_argv(
    plan: Path,
    results_root: Path,
    *,
    sim: bool = False,
    only: str | None = None,
    rerun_failed: bool = False,
    rerun: Sequence[str] = (),
    ssh_config: str | None = None,
) -> list[str]:
    """The command line of a child run, from what the console was asked for."""
    argv = [str(plan), "--results", str(results_root)]
    if sim:
        argv.append("--sim")
    if only:
        argv += ["--only", only]
    if rerun_failed:
        argv.append("--rerun-failed")
    if rerun:
        argv += ["--rerun", ",".join(rerun)]
    if ssh_config:
        argv += ["--ssh-config", ssh_config]
    return argv

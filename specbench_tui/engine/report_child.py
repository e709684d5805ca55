"""The report a campaign writes when it ends, in a child process that a signal can stop.

Laying out a report's tables and running TeX take seconds, and minutes on a hostile plan; in a
thread nothing can stop them, so a SIGTERM or ctrl-c went unheard until they ended. The child
(``python -m specbench_tui.report DIR``) runs in a session of its own: cancelling
:func:`write_report` ends it and the TeX engine under it together, within ``STOP_GRACE_S``,
and what was measured stays as it was, for ``--report DIR`` to render later.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

from specbench_tui.errors import InputError

#: How long the child has after SIGTERM before SIGKILL.
STOP_GRACE_S = 2.0


class ReportFailed(InputError):
    """The report child ended without writing the report; says its last words."""


def _kill_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def write_report(root: Path) -> list[Path]:
    """Render the report of ``root`` in a child process; returns the paths written and, on
    cancellation, stops the child's whole process group before passing the cancellation on.
    What the child said on stderr (a PDF that could not be built, say) ends a failure's
    message; on success it is left to the report's own notes."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "specbench_tui.report",
        str(root),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = await proc.communicate()
    except asyncio.CancelledError:
        _kill_group(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
        except TimeoutError:
            _kill_group(proc.pid, signal.SIGKILL)
            await proc.wait()
        _kill_group(proc.pid, signal.SIGKILL)  # whatever the child left in its group (TeX)
        raise
    if proc.returncode != 0:
        said = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip()]
        why = said[-1] if said else f"the report process exited with code {proc.returncode}"
        raise ReportFailed(why)
    return [Path(ln) for ln in out.decode(errors="replace").splitlines() if ln.strip()]

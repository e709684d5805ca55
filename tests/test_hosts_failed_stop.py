"""A server stop that fails is said, naming the server and the error, and the server stays on
record, so the leftover check of the next run (or ``--cleanup``) finds it; a stop never
reports success for a server it could not end (a group or unit still there after SIGKILL)."""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from specbench_tui.engine.group_runner import ServerSlot
from specbench_tui.hosts.backends.ssh.remote_process import stop_process_group
from specbench_tui.hosts.backends.ssh.systemd import stop_unit
from specbench_tui.hosts.local_leftovers import (
    find_local_leftovers,
    records_dir,
    results_owner,
    stop_local_leftover,
)
from specbench_tui.hosts.process import ProcessService
from specbench_tui.hosts.server_records import ServerRecord
from specbench_tui.hosts.service import ServiceError
from specbench_tui.results.cells import ServiceGroup


class _Undying:
    """An SSH link to a host where what is stopped never ends (signals go nowhere)."""

    def __init__(self, show: str = "") -> None:
        self.sent: list[str] = []
        self.show = show

    async def run(self, command: object, **_: object) -> SimpleNamespace:
        self.sent.append(command if isinstance(command, str) else " ".join(map(str, command)))
        return SimpleNamespace(exit_status=0, ok=True, stdout=self.show, stderr="")

    def __str__(self) -> str:
        return "gpu1"


async def test_a_process_group_that_outlives_sigkill_is_not_taken_for_stopped() -> None:
    ssh = _Undying()
    said: list[str] = []
    with pytest.raises(ServiceError, match=r"gpu1\.ar\.tp1 on gpu1: still running after SIGKILL"):
        await stop_process_group(ssh, 4242, 0.1, said.append, "gpu1.ar.tp1", kill_wait_s=0.2)  # type: ignore[arg-type]
    assert any("kill -TERM -4242" in c for c in ssh.sent)
    assert any("kill -KILL -4242" in c for c in ssh.sent)
    assert said[-1] == "----- gpu1.ar.tp1 ignored SIGTERM; sending SIGKILL"


async def test_a_unit_still_active_after_sigkill_is_not_taken_for_stopped() -> None:
    ssh = _Undying(show="ActiveState=active\n")
    with pytest.raises(ServiceError, match=r"specbench-c-g\.service on gpu1: still active"):
        await stop_unit(ssh, "specbench-c-g.service", 0.1, kill_wait_s=0.2)  # type: ignore[arg-type]
    assert any("--signal=KILL" in c for c in ssh.sent)


def _group(port: int) -> ServiceGroup:
    return ServiceGroup(
        id="local.ar.tp1",
        host="local",
        host_kind="local",
        config="ar",
        label="ar",
        tp=1,
        gpu_ids=(0,),
        port=port,
        command=("sleep", "600"),
        env=(),
        api="sglang",
        ready_timeout_s=30.0,
        speculative=False,
    )


async def test_a_stop_that_raises_is_said_and_the_leftover_check_finds_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = results_owner(tmp_path / "res")
    svc = ProcessService(_group(39517), tmp_path / "server.log", records=records_dir(owner))
    await svc.start()
    pid = svc.pid
    assert pid is not None

    async def refused(_sig: signal.Signals) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(svc, "_kill_group", refused)
    said: list[str] = []
    slot = ServerSlot(0.1, said.append)
    slot.service = svc
    try:
        await slot.clear()  # never raises: the campaign goes on
        assert len(said) == 1
        assert said[0].startswith("local.ar.tp1: could not stop its server: PermissionError: ")
        assert "--cleanup" in said[0]
        os.kill(pid, 0)  # it still runs
        # The run that started it ends; the next one's leftover check looks at its records.
        monkeypatch.setattr(ServerRecord, "tool_alive", lambda _self: False)
        (found,) = find_local_leftovers(owner, "local")
        assert found.group == "local.ar.tp1" and pid in found.pids and found.records
        assert await stop_local_leftover(found, 5.0) is None
        assert find_local_leftovers(owner, "local") == []
    finally:
        monkeypatch.undo()
        await svc.stop(5.0)

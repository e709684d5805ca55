"""The rule for remote commands, against a real sshd whose sessions a test kills from the
server side: a command whose result is lost raises (never an exit status of None), only a
command marked idempotent runs again once the link is back, the link comes back by itself
within the reconnect timeout and is declared unreachable after it, and a host key that
changed while the link was down ends the reconnecting at once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from sshd_fixture import Sshd, killable_sshd  # noqa: F401 (the fixture)

from specbench_tui.hosts.ssh import SshConnection, SshError, SshResultLost

pytestmark = pytest.mark.system


def connection(sshd: Sshd, states: list[tuple[str, str]], **kw: object) -> SshConnection:
    args = {
        **sshd.connect_args(),
        "reconnect_backoff_s": (0.2, 0.5),
        "reconnect_timeout_s": 20.0,
        "on_state": lambda s, r: states.append((s, r)),
        **kw,
    }
    return SshConnection("sbtest", **args)  # type: ignore[arg-type]


async def drop_soon(sshd: Sshd, after_s: float) -> None:
    await asyncio.sleep(after_s)
    await asyncio.to_thread(sshd.drop_sessions)


async def test_lost_result_raises_and_only_idempotent_commands_run_again(
    killable_sshd: Sshd,  # noqa: F811
    tmp_path: Path,
) -> None:
    states: list[tuple[str, str]] = []
    ssh = connection(killable_sshd, states)
    ran = tmp_path / "ran"
    try:
        assert (await ssh.run("true")).ok
        # not idempotent: the result is lost, and it is not sent again
        drop = asyncio.create_task(drop_soon(killable_sshd, 0.5))
        with pytest.raises(SshResultLost, match="its result is lost"):
            await ssh.run(f"echo once >> {ran}; sleep 3; echo done")
        await drop
        await asyncio.sleep(3.5)  # the command itself went on over there: it ran once
        assert ran.read_text() == "once\n"
        # idempotent: run again on the new link, and its result comes back
        ran.unlink()
        drop = asyncio.create_task(drop_soon(killable_sshd, 0.5))
        res = await ssh.run(f"echo again >> {ran}; sleep 2; echo done", idempotent=True)
        await drop
        assert res.ok and res.stdout == "done\n"
        assert ran.read_text().count("again") == 2
        assert ssh.drops == 2 and ssh.reconnects == 2
        assert [s for s, _ in states] == ["reconnecting", "connected"] * 2
        assert "dropped" in states[0][1] and "127.0.0.1 port" in states[0][1]
    finally:
        await ssh.close()


async def test_away_past_the_reconnect_timeout_is_unreachable_then_back(
    killable_sshd: Sshd,  # noqa: F811
) -> None:
    states: list[tuple[str, str]] = []
    ssh = connection(killable_sshd, states, reconnect_timeout_s=3.0)
    try:
        assert (await ssh.run("true")).ok
        killable_sshd.kill()
        t0 = time.monotonic()
        with pytest.raises(
            SshError, match=r"unreachable for 3\.\ds \(connection refused: nothing listens"
        ):
            await ssh.run("true", idempotent=True)
        assert 2.5 < time.monotonic() - t0 < 10
        assert [s for s, _ in states] == ["reconnecting", "unreachable"]
        # given up: the next use tries once and fails at once
        t0 = time.monotonic()
        with pytest.raises(SshError, match="still unreachable"):
            await ssh.run("true", idempotent=True)
        assert time.monotonic() - t0 < 2
        killable_sshd.start()
        assert (await ssh.run("echo back", idempotent=True)).stdout == "back\n"
        assert states[-1] == ("connected", "reachable again")
    finally:
        await ssh.close()


@pytest.mark.timing
async def test_host_key_changed_while_away_stops_reconnecting_at_once(
    killable_sshd: Sshd,  # noqa: F811
) -> None:
    states: list[tuple[str, str]] = []
    ssh = connection(killable_sshd, states, reconnect_timeout_s=60.0)
    try:
        assert (await ssh.run("true")).ok
        killable_sshd.kill()
        killable_sshd.new_host_key()
        killable_sshd.start()
        t0 = time.monotonic()
        with pytest.raises(SshError, match="HOST KEY CHANGED for sbtest"):
            await ssh.run("true", idempotent=True)
        assert time.monotonic() - t0 < 15  # not the 60 s window
        assert states[-1][0] == "unreachable" and "HOST KEY CHANGED" in states[-1][1]
        print(f"\n[message] {states[-1][1]}")
    finally:
        await ssh.close()

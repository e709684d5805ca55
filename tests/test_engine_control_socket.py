"""The control socket against what a misbehaving client sends: every malformed message gets
an error reply on the same connection, which stays usable; nothing reaches the campaign's
stderr as a traceback; the socket is gone when the campaign ends."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from specbench_tui.engine.commands import Command
from specbench_tui.engine.control_socket import REQUEST_LIMIT, serve_control
from specbench_tui.results.events import Event


class _Campaign:
    """A campaign as the socket sees it: replies to commands, a short event stream."""

    def __init__(self) -> None:
        self.sent: list[Command] = []

    async def subscribe(self):
        for _ in range(2):
            yield Event()

    async def send(self, command: Command):
        from specbench_tui.engine.commands import Reply

        self.sent.append(command)
        return Reply(True, f"did {command.action}")


HOSTILE: list[tuple[bytes, str]] = [
    (b"not json at all", "not JSON"),
    (b"[1, 2, 3]", "JSON object"),
    (b"null", "JSON object"),
    (b'"a string"', "JSON object"),
    (b"\xff\xfe\x00garbage", "not UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000, "longer than"),
    (b"[" * 20_000 + b"]" * 20_000, "nested too deeply"),
    (b'{"op": "fly"}', "unknown op"),
    (b'{"op": "command", "action": "explode"}', "unknown command"),
    (b'{"op": "command", "action": null}', "unknown command"),
    (b'{"op": "command", "action": "skip", "target": ["a"]}', "target must be"),
    (b'{"op": "command", "action": "skip", "by": {"x": 1}}', "by must be"),
    (b"x" * (REQUEST_LIMIT * 4), "longer than"),
]


async def _ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, line: bytes) -> dict:
    writer.write(line + b"\n")
    await writer.drain()
    answer = await asyncio.wait_for(reader.readline(), 10)
    return json.loads(answer)


async def test_malformed_requests_get_an_error_and_the_connection_lives_on(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    campaign = _Campaign()
    sock = tmp_path / "control.sock"
    server = await serve_control(campaign, sock)
    try:
        reader, writer = await asyncio.open_unix_connection(str(sock), limit=1 << 20)
        for line, expected in HOSTILE:
            reply = await _ask(reader, writer, line)
            assert reply["ok"] is False and expected in reply["text"], (line[:40], reply)
        # The same connection still takes a good command, then a ping.
        reply = await _ask(reader, writer, b'{"op": "command", "action": "pause", "by": "t"}')
        assert reply == {"ok": True, "text": "did pause"}
        assert (await _ask(reader, writer, b'{"op": "ping"}'))["ok"] is True
        writer.close()
        # A subscription streams the events, then the connection ends.
        reader, writer = await asyncio.open_unix_connection(str(sock))
        writer.write(b'{"op": "subscribe"}\n')
        lines = [await reader.readline() for _ in range(3)]
        assert [json.loads(x)["event"] for x in lines[:2]] == ["event", "event"]
        assert lines[2] == b""
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
    assert [c.action for c in campaign.sent] == ["pause"]
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err

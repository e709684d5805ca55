"""A server that went away is told from one that answered badly: the client's errors over
real HTTP (a replay server speaking vLLM 0.32's bytes after its engine core was killed, a port
nothing listens on), the engine's own "dead" answer, and how a death is confirmed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from specbench_tui.bench.client import BenchClient, went_away
from specbench_tui.engine.cell_runner import DeathWatch, confirm_death
from specbench_tui.engines.registry import engine_dead
from specbench_tui.hosts.service import Service
from specbench_tui.results.cells import ServiceGroup
from specbench_tui.results.records import RequestRecord
from tests.conftest import free_port
from tests.support.replay import Replay, serve

# What vLLM 0.32 sends a stream in flight once its engine core is gone: an error event, with
# the HTTP status already 200, before [DONE] (no finish_reason, no usage chunk).
DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."


def _chunk(text: str) -> bytes:
    doc = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "tiny",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


ERROR_EVENT = {
    "error": {"message": DEAD, "type": "InternalServerError", "param": None, "code": 500}
}
DEAD_STREAM = (
    _chunk("Hello")
    + _chunk(" there")
    + b"data: "
    + json.dumps(ERROR_EVENT).encode()
    + b"\n\n"
    + b"data: [DONE]\n\n"
)


@pytest.fixture
async def replay() -> AsyncIterator[str]:
    r = Replay()
    r.stream("/dead", DEAD_STREAM)
    runner, url = await serve(r)
    try:
        yield url
    finally:
        await runner.cleanup()


def _record(error: str | None) -> RequestRecord:
    return RequestRecord(error=error)


async def test_a_vllm_engine_death_mid_stream_is_the_engines_own_answer(replay: str) -> None:
    async with BenchClient(replay + "/dead", "openai", model="tiny") as client:
        done = await client.generate("hi", max_tokens=16, timeout_s=10)
    assert done.error is not None and DEAD[:30] in done.error
    assert engine_dead("vllm", done.error) == "its engine core is gone (EngineDeadError)"
    assert engine_dead("sglang", done.error) is None  # another engine's words mean nothing
    assert not went_away(done.error)  # the server answered: not the transport's sign
    watch = DeathWatch("vllm")
    watch.see(_record(done.error))
    assert watch.sign == done.error and watch.engine_said is not None
    # The same text as a plain HTTP 500 (a request sent after the death) says the same.
    assert engine_dead("vllm", f"HTTP 500: {DEAD}") is not None


async def test_nothing_listening_is_a_server_gone_not_an_answer() -> None:
    async with BenchClient(f"http://127.0.0.1:{free_port()}", "openai") as client:
        done = await client.generate("hi", max_tokens=4, timeout_s=10)
    assert done.error == "connection refused" and went_away(done.error)
    watch = DeathWatch("sglang")
    watch.see(_record("HTTP 400: bad request"))  # an answer, however bad
    watch.see(_record("timeout after 600 s"))  # slow, not gone
    assert watch.sign is None
    watch.see(_record(done.error))
    watch.see(_record("server closed the stream early"))  # the first sign is kept
    assert watch.sign == "connection refused" and watch.engine_said is None


class _Server(Service):
    """A server whose life the test sets: alive or exited, healthy or not."""

    def __init__(self, *, alive: bool, healthy: bool, exits_after_s: float | None = None) -> None:
        group = ServiceGroup(
            id="h.c.tp1",
            host="h",
            host_kind="local",
            config="c",
            label="c",
            tp=1,
            gpu_ids=(0,),
            port=1,
            command=(),
            env=(),
            api="openai",
            ready_timeout_s=60,
            speculative=False,
            engine="vllm",
        )
        super().__init__(group)
        self._alive, self.healthy = alive, healthy
        self._code: int | None = None if alive else 0
        self._exits_after_s = exits_after_s
        self.drops = 0

    async def start(self) -> None:
        return None

    def alive(self) -> bool:
        return self._alive

    @property
    def exit_code(self) -> int | None:
        return self._code

    async def wait_exit(self) -> int | None:
        if self._exits_after_s is None:
            await asyncio.sleep(3600)
        await asyncio.sleep(self._exits_after_s or 0)
        self._alive, self._code = False, 0
        return 0

    async def stop(self, grace_s: float = 30.0) -> None:
        return None

    @property
    def link_drops(self) -> int:
        return self.drops

    async def check_health(self, client: Any = None) -> bool:
        self._last_health = "GET /health 200" if self.healthy else "GET /health HTTP 503"
        return self.healthy


async def test_a_death_is_confirmed_by_the_exit_the_engine_or_the_health_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("specbench_tui.engine.cell_runner.DEATH_SETTLE_S", 0.2)
    no_link_drop = lambda: False  # noqa: E731

    def watch(error: str | None, engine: str = "vllm") -> DeathWatch:
        w = DeathWatch(engine)
        w.see(_record(error))
        return w

    # the process exited (code 0, as vLLM's API server does after its engine died)
    gone = _Server(alive=False, healthy=False)
    assert await confirm_death(gone, watch(None), no_link_drop) == "it exited with code 0"
    # alive, but the engine said it is dead: no doubt left, whatever its health says
    said = await confirm_death(_Server(alive=True, healthy=True), watch(DEAD), no_link_drop)
    assert said is not None and "the engine answered that it is dead" in said
    # a lost connection, then the process goes within the settle time
    going = _Server(alive=True, healthy=True, exits_after_s=0.05)
    why = await confirm_death(going, watch("connection refused"), no_link_drop)
    assert why == "it exited with code 0 (connection refused)"
    # a lost connection, the process stays but fails its health check
    sick = _Server(alive=True, healthy=False)
    why = await confirm_death(sick, watch("server closed the stream early"), no_link_drop)
    assert why is not None and "health check fails (GET /health HTTP 503)" in why
    # a lost connection on a server that answers its health check: not dead (the rows judge)
    fine = _Server(alive=True, healthy=True)
    assert await confirm_death(fine, watch("connection refused"), no_link_drop) is None
    # no sign and alive: nothing to confirm
    assert await confirm_death(fine, watch("HTTP 400: bad"), no_link_drop) is None
    # the link to the host dropped: not the server's doing, whatever else is seen
    assert await confirm_death(gone, watch(DEAD), lambda: True) is None

"""The load generator's transport: SSE events cut right at any read boundary, and a real
vLLM stream (captured bytes, replayed over a socket in its captured pieces) read whole."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from specbench_tui.bench.client import BenchClient
from specbench_tui.bench.transport import SseSplitter

STREAM = (
    b": a comment\n"
    b'data: {"a": 1}\n\n'
    b"event: message\r\n"
    b'data:{"b": 2}\r\n\r\n'
    b"data: first line\n"
    b"data: second line\n\n"
    b"id: 7\n\n"  # an event without data is no payload
    b"data: [DONE]\n\n"
)
EXPECTED = [b'{"a": 1}', b'{"b": 2}', b"first line\nsecond line", b"[DONE]"]


def split(chunks: list[bytes]) -> list[tuple[bytes, int]]:
    """The payloads and the read that completed each."""
    got: list[tuple[bytes, int]] = []
    s = SseSplitter(lambda payload, _t, read: got.append((payload, read)))
    for chunk in chunks:
        s.feed(chunk)
    s.close()
    return got


def test_events_survive_every_read_boundary() -> None:
    assert [p for p, _ in split([STREAM])] == EXPECTED
    for cut in range(1, len(STREAM)):
        assert [p for p, _ in split([STREAM[:cut], STREAM[cut:]])] == EXPECTED, cut
    assert [p for p, _ in split([bytes([b]) for b in STREAM])] == EXPECTED


def test_an_event_names_the_read_that_completed_it() -> None:
    got = split([b"data: x", b"yz\n", b"\n", b"data: w\n\ndata: v\n\n"])
    assert got == [(b"xyz", 3), (b"w", 4), (b"v", 4)]  # w and v came in one read


def test_each_event_is_stamped_as_it_is_cut_out() -> None:
    ticks = iter(range(100, 200))
    got: list[tuple[bytes, int, int]] = []
    s = SseSplitter(lambda p, t, read: got.append((p, t, read)), clock=lambda: next(ticks))
    s.feed(b"data: a\n\ndata: b\n\n")
    s.feed(b"data: c\n\n")
    assert got == [(b"a", 100, 1), (b"b", 101, 1), (b"c", 102, 2)]


def test_long_line_in_many_reads_and_a_stream_without_final_blank_line() -> None:
    line = b"data: " + b"x" * 400_000 + b"\n\n"
    pieces = [line[i : i + 8192] for i in range(0, len(line), 8192)]
    assert [len(p) for p, _ in split(pieces)] == [400_000]
    assert split([b'data: {"last": 1}']) == [(b'{"last": 1}', 1)]


# --- real vLLM bytes over a real socket ------------------------------------------------------

FIXTURES = Path(__file__).parent / "fixtures" / "vllm-0.32-cpu"


async def replay(name: str) -> tuple[str, asyncio.AbstractServer]:
    """Serve the captured response, cut into the pieces its recv() calls returned, a moment
    apart, to any request."""
    raw = (FIXTURES / f"{name}.raw").read_bytes()
    recvs = json.loads((FIXTURES / f"{name}.timing.json").read_text())["recvs"]

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        for _, size, offset in recvs:
            writer.write(raw[offset : offset + size])
            await writer.drain()
            await asyncio.sleep(0.002)
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return f"http://127.0.0.1:{port}", server


@pytest.mark.parametrize(
    ("name", "tokens", "chunks"),
    [("spec_summary.chat_stream_512", 512, 131), ("nospec.chat_stream_64", 64, 64)],
)
async def test_a_real_vllm_stream_arrives_whole(name: str, tokens: int, chunks: int) -> None:
    url, server = await replay(name)
    async with server, BenchClient(url, "openai") as client:
        done = await client.generate("Explain speculative decoding.", max_tokens=tokens)
    assert done.error is None, done.error
    assert (done.output_tokens, done.prompt_tokens, done.chunks) == (tokens, 27, chunks)
    assert len(done.itl_s) == chunks - 1 and all(g >= 0 for g in done.itl_s)
    assert done.finish_reason == "length"
    assert done.decode_tok_s is not None and done.e2e_tok_s is not None
    # vLLM sends no running count: tokens per chunk are known only without speculation.
    assert done.chunk_tokens == ([] if chunks < tokens else [1] * tokens)

"""SSE framing of the load generator's transport: events cut right at any read boundary."""

from __future__ import annotations

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
    got: list[tuple[bytes, int]] = []
    s = SseSplitter(lambda payload, t: got.append((payload, t)))
    for i, chunk in enumerate(chunks):
        s.feed(chunk, i)
    s.close(len(chunks))
    return got


def test_events_survive_every_read_boundary() -> None:
    assert [p for p, _ in split([STREAM])] == EXPECTED
    for cut in range(1, len(STREAM)):
        assert [p for p, _ in split([STREAM[:cut], STREAM[cut:]])] == EXPECTED, cut
    assert [p for p, _ in split([bytes([b]) for b in STREAM])] == EXPECTED


def test_an_event_is_stamped_with_the_read_that_completed_it() -> None:
    got = split([b"data: x", b"yz\n", b"\n", b"data: w\n\n"])
    assert got == [(b"xyz", 2), (b"w", 3)]


def test_long_line_in_many_reads_and_a_stream_without_final_blank_line() -> None:
    line = b"data: " + b"x" * 400_000 + b"\n\n"
    pieces = [line[i : i + 8192] for i in range(0, len(line), 8192)]
    assert [len(p) for p, _ in split(pieces)] == [400_000]
    assert split([b'data: {"last": 1}']) == [(b'{"last": 1}', 1)]

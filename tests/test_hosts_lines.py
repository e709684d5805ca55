"""Server output split into lines: the same lines as a plain split wherever they are short,
each line cut at 1 MiB with a mark (the rest of it dropped up to its end of line), and work
linear in the bytes whatever the chunking."""

from __future__ import annotations

import random
import time

import pytest

from specbench_tui.hosts.lines import CUT_MARK, MAX_LINE, LineSplitter


def _split(data: bytes, chunk: int, limit: int = MAX_LINE) -> tuple[list[bytes], bytes | None]:
    s = LineSplitter(limit)
    out: list[bytes] = []
    for i in range(0, len(data), chunk):
        out += s.feed(data[i : i + chunk])
    return out, s.end()


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 4096])
def test_short_lines_come_out_as_a_plain_split_gives_them(chunk: int) -> None:
    rng = random.Random(chunk)
    data = (
        b"".join(rng.choice([b"", b"a", b"bc", b"\r", b"x" * 50]) + b"\n" for _ in range(300))
        + b"tail without newline"
    )
    lines, rest = _split(data, chunk)
    *want, last = data.split(b"\n")
    assert lines == want and rest == last


@pytest.mark.parametrize("chunk", [1, 5, 16, 1000])
def test_a_long_line_is_cut_once_and_its_rest_dropped(chunk: int) -> None:
    data = b"short\n" + b"y" * 95 + b"\nnext\n" + b"z" * 40
    lines, rest = _split(data, chunk, limit=10)
    # The unended tail too is past the limit: given out cut, nothing left at the end.
    assert lines == [b"short", b"y" * 10 + CUT_MARK, b"next", b"z" * 10 + CUT_MARK]
    assert rest is None


def test_a_line_exactly_at_the_limit_is_whole() -> None:
    lines, rest = _split(b"a" * 10 + b"\n" + b"b" * 11 + b"\n", 4, limit=10)
    assert lines == [b"a" * 10, b"b" * 10 + CUT_MARK] and rest is None


def test_a_cut_line_comes_out_before_its_end_arrives() -> None:
    """A line that never ends (a runaway print) is shown once it passes the limit."""
    s = LineSplitter(8)
    assert s.feed(b"abcdefghij") == [b"abcdefgh" + CUT_MARK]
    assert s.feed(b"klmnop" * 100) == []
    assert s.feed(b"q\nnew") == []
    assert s.end() == b"new"


@pytest.mark.timing
def test_a_50_mb_line_without_newline_costs_linear_time() -> None:
    """In 64 KiB reads, as the followers read: the old split took the square (36 s for 50 MB
    over SSH); a linear pass is well under a second even at a load of 10."""
    piece = b"x" * 65536
    s = LineSplitter()
    out: list[bytes] = []
    t0 = time.process_time()
    for _ in range(50_000_000 // len(piece)):
        out += s.feed(piece)
    took = time.process_time() - t0
    assert out == [b"x" * MAX_LINE + CUT_MARK]
    assert s.feed(b"\nafter\n") == [b"after"]
    assert took < 1.0, f"{took:.2f} s of CPU for 50 MB"

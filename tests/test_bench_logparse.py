"""The server-log parser on lines in the formats SGLang builds actually print."""

from __future__ import annotations

import time

import pytest

from specbench_tui.bench.logparse import LogParser
from specbench_tui.errors import InputError

DECODE = (
    "[2026-01-01 12:00:00 TP0] Decode batch, #running-req: 1, #token: 1536, token usage: 0.01, "
    "accept len: 3.42, accept rate: 0.21, cuda graph: True, gen throughput (token/s): 121.87, "
    "#queue-req: 0,"
)
OLD_DECODE = (
    "[2025-01-01 12:00:00 TP0] Decode batch. #running-req: 1, #token: 63, token usage: 0.00, "
    "gen throughput (token/s): 7.86, #queue-req: 0"
)
HYBRID_DECODE = (
    "[2026-01-01 12:00:00 TP0] Decode batch, #running-req: 2, #full token: 4100, "
    "full token usage: 0.03, mamba usage: 0.02, accept len: 5.10, accept rate: 0.32, "
    "cuda graph: False, gen throughput (token/s): 210.50, #queue-req: 3,"
)
SLOT_DECODE = (
    "[2026-01-01 12:00:00 DP1 TP3 EP3] Decode batch [120], #running-req: 4, #token: 9000, "
    "token usage: 0.07, #mamba-slot: 3/100, mamba usage: 0.03, "
    "gen throughput (token/s): 480.00, #queue-req: 0"
)
PREFILL = (
    "[2026-01-01 12:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 512, "
    "token usage: 0.00, #running-req: 0, #queue-req: 0,"
)
READY = "[2026-01-01 12:00:02] The server is fired up and ready to roll!"


def test_decode_line() -> None:
    stats = LogParser().parse(DECODE)
    assert stats == {
        "decode": 1.0,
        "running_req": 1.0,
        "token": 1536.0,
        "token_usage": 0.01,
        "accept_len": 3.42,
        "accept_rate": 0.21,
        "cuda_graph": 1.0,
        "gen_throughput": 121.87,
        "queue_req": 0.0,
    }


def test_old_format() -> None:
    stats = LogParser().parse(OLD_DECODE)
    assert stats is not None
    assert stats["running_req"] == 1.0 and stats["token"] == 63.0
    assert stats["gen_throughput"] == 7.86 and "accept_len" not in stats


def test_hybrid_formats() -> None:
    stats = LogParser().parse(HYBRID_DECODE)
    assert stats is not None
    assert stats["full_token"] == 4100.0 and stats["token"] == 4100.0
    assert stats["full_token_usage"] == 0.03 and stats["token_usage"] == 0.03
    assert stats["mamba_usage"] == 0.02 and stats["accept_len"] == 5.10
    assert stats["cuda_graph"] == 0.0 and stats["queue_req"] == 3.0
    slots = LogParser().parse(SLOT_DECODE)
    assert slots is not None
    assert slots["mamba_slot"] == 3.0 and slots["mamba_slot_total"] == 100.0
    assert slots["running_req"] == 4.0 and slots["token"] == 9000.0


def test_prefill_line() -> None:
    stats = LogParser().parse(PREFILL)
    assert stats is not None
    assert stats["prefill"] == 1.0 and "decode" not in stats
    assert stats["new_seq"] == 1.0 and stats["new_token"] == 6.0
    assert stats["cached_token"] == 512.0


def test_ready_line() -> None:
    assert LogParser.is_ready(READY)
    assert not LogParser.is_ready(DECODE)
    assert LogParser().parse(READY) is None


@pytest.mark.parametrize(
    "line",
    [
        "",
        "Decode batch",
        "Decode batch, #running-req: lots, #token: ?,",
        "Prefill batch,,,,:::,",
        "some batch of things: a, b: c",
        "\x00\xff\ufffd garbage \u202e",
        'INFO:     127.0.0.1:51234 - "POST /generate HTTP/1.1" 200 OK',
        "Traceback (most recent call last):",
    ],
)
def test_garbage_gives_none(line: str) -> None:
    assert LogParser().parse(line) is None


def test_custom_patterns() -> None:
    parser = LogParser(
        {
            "ddtree": r"DDTree.*accept[_ ]len(?:gth)?[=:] *(?P<ddtree_accept_len>[0-9.]+)",
            "oom": r"CUDA out of memory",
            "steps": r"draft steps=(\d+)",
        }
    )
    assert parser.parse("[TP0] DDTree stats: accept_len=4.75 budget=64") == {
        "ddtree_accept_len": 4.75
    }
    assert parser.parse("torch.OutOfMemoryError: CUDA out of memory.") == {"oom": 1.0}
    assert parser.parse("draft steps=7") == {"steps": 7.0}
    both = parser.parse(DECODE + " DDTree accept len: 2.5")
    assert both is not None and both["ddtree_accept_len"] == 2.5 and both["token"] == 1536.0


def test_bad_pattern_is_an_input_error() -> None:
    with pytest.raises(InputError, match=r"\[logs\] broken"):
        LogParser({"broken": "(unclosed"})


@pytest.mark.timing
def test_fast_enough() -> None:
    """20,000 log lines in well under a second of this process's CPU: CPU time, not the
    wall clock, so a loaded machine (two suites side by side) does not fail it."""
    parser = LogParser()
    lines = [DECODE, "INFO: GET /health 200", PREFILL, "loading weights 50%"] * 5000
    t0 = time.process_time()
    parsed = sum(1 for line in lines if parser.parse(line) is not None)
    took = time.process_time() - t0
    assert parsed == 10000
    assert took < 1.0, f"{took:.2f} s of CPU for 20,000 lines"


def test_parse_line_names_the_plan_patterns_that_matched() -> None:
    from specbench_tui.results.events import LogLine
    from specbench_tui.tui.log_text import PATTERN_MARK, display_line

    parser = LogParser(
        {"ddtree": r"DDTree.*accept[_ ]len(?:gth)?[=:] *(?P<ddtree_accept_len>[0-9.]+)"}
    )
    line = "[2026-01-01 12:00:00 TP0] DDTree stats: budget=16, tree nodes=16, accept_len=4.12"
    stats, matches = parser.parse_line(line)
    assert stats == {"ddtree_accept_len": 4.12} and matches == ["ddtree"]
    decode = "[2026-01-01 12:00:00 TP0] Decode batch, #running-req: 1, accept len: 3.10,"
    assert parser.parse_line(decode)[1] == []
    assert display_line(LogLine(group="g", line=line, stats=stats, matches=matches)).startswith(
        PATTERN_MARK
    )
    assert not display_line(LogLine(group="g", line=decode)).startswith(PATTERN_MARK)


def test_a_backtracking_pattern_is_refused_up_front() -> None:
    with pytest.raises(InputError, match="catastrophic backtracking"):
        LogParser({"slow": r"(x+x+)+y"})


async def test_a_slow_pattern_costs_its_line_not_the_event_loop() -> None:
    """A pattern that gets through the probe lines but not a line the server prints: the
    line is parsed without it, in the worker thread, and the operator is told once."""
    import asyncio

    import regex

    from specbench_tui.engine.log_lines import LogLineWorker
    from specbench_tui.results.events import LogLine, Notice

    parser = LogParser()
    # One that backtracks on a line the probes did not try (set directly: the plan check
    # would refuse this very pattern).
    parser._patterns = [("picky", regex.compile(r"^(?:q+q+)+r(?P<n>[0-9]+)"))]
    seen: list[object] = []
    worker = LogLineWorker(parser, seen.append)
    worker.start()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    for _ in range(3):
        worker.submit("g", "q" * 4000)  # backtracks: the pattern times out on it
    worker.submit("g", "qqr7 Decode batch, #running-req: 2, accept len: 3.5,")
    ticks = 0
    while not any(isinstance(e, LogLine) and e.stats and "n" in e.stats for e in seen):
        await asyncio.sleep(0.01)
        ticks += 1
        assert loop.time() - t0 < 20
    await worker.stop()
    assert ticks > 0  # the loop kept turning while the thread parsed
    notices = [e for e in seen if isinstance(e, Notice)]
    assert len(notices) == 1 and "[logs] picky" in notices[0].text
    lines = [e for e in seen if isinstance(e, LogLine)]
    assert len(lines) == 4 and lines[-1].stats["accept_len"] == 3.5
    assert parser.timeouts["picky"] == 3

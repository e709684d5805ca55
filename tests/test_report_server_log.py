"""The server's log figures: a line counts for a cell only when the stretch it describes lies
inside the cell, on a server clock measured at start, and a cell's lines are pooled by the
tokens and steps behind each, never averaged as lines."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from specbench_tui.bench.logparse import LogParser
from specbench_tui.engines.registry import log_window
from specbench_tui.report.server_log import Window, assign, read_log

T = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def sglang_stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


def vllm_stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%m-%d %H:%M:%S")


def decode(t: float, *, running: int = 1, accept: float = 3.0, gen: float = 150.0) -> str:
    return (
        f"[{sglang_stamp(t)} TP0] Decode batch, #running-req: {running}, #token: 700, token "
        f"usage: 0.01, accept len: {accept:.2f}, accept rate: 0.40, cuda graph: True, gen "
        f"throughput (token/s): {gen:.2f}, #queue-req: 0, \n"
    )


def spec(t: float, accepted: int, mean: float) -> str:
    return (
        f"(APIServer pid=7) INFO {vllm_stamp(t)} [metrics.py:120] SpecDecoding metrics: Mean "
        f"acceptance length: {mean:.2f}, Accepted throughput: 10.00 tokens/s, Drafted "
        f"throughput: 12.00 tokens/s, Accepted: {accepted} tokens, Drafted: {accepted + 9} "
        "tokens, Per-position acceptance rate: 0.900, 0.800, Avg Draft acceptance rate: 90.0%\n"
    )


def header(t: float) -> str:
    return f"----- {datetime.fromtimestamp(t, UTC).isoformat()} starting g: python -m x\n"


def test_a_line_counts_for_a_cell_only_when_its_whole_stretch_lies_inside(tmp_path: Path) -> None:
    # Cell a runs 10-20 s, cell b 20-40 s after the start. The server logs every 4 s: the line
    # at 22 s describes 18-22 s, half of it a's: it belongs to neither (it did to b before).
    log = tmp_path / "g.log"
    text = header(T) + f"[{sglang_stamp(T + 1)} TP0] The server is fired up and ready to roll!\n"
    for s in (10, 14, 18, 22, 26, 30, 34, 38):
        text += decode(T + s, gen=100.0 + s)
    log.write_text(text)
    lines = read_log(log, LogParser().parse, ready_at=[T + 1.5])
    assert [ln.at - T for ln in lines] == [10, 14, 18, 22, 26, 30, 34, 38]
    assert lines[0].since is None and lines[1].since == T + 10  # the first has no stretch
    wins = [Window("a", "single", T + 10, T + 20), Window("b", "single", T + 20, T + 40)]
    got = {(w.cell_id, ln.at - T) for w, ln in assign(lines, wins)}
    # a: 14 (10-14) and 18 (14-18), the stamp's second inside too; b: 26, 30, 34 (38 ends at
    # 39 at the latest, inside; 22 began in a).
    assert got == {("a", 14), ("a", 18), ("b", 26), ("b", 30), ("b", 34), ("b", 38)}


def test_the_server_clock_is_measured_at_start(tmp_path: Path) -> None:
    # The server's clock: two hours ahead (its zone) and 37 s fast. Its ready line at its
    # 1 s is seen by the campaign's ready event at 1.4 s on the UTC clock.
    ahead = 7200.0 + 37.0
    log = tmp_path / "g.log"
    text = header(T) + f"[{sglang_stamp(T + 0.2 + ahead)} TP0] Load weight begin.\n"
    text += f"[{sglang_stamp(T + 1 + ahead)} TP0] The server is fired up and ready to roll!\n"
    text += decode(T + 10 + ahead) + decode(T + 14 + ahead)
    log.write_text(text)
    lines = read_log(log, LogParser().parse, ready_at=[T + 1.4])
    assert [round(ln.at - T) for ln in lines] == [10, 14]
    # Within what a stamp to the second and a health poll can tell, no skew is assumed.
    text = header(T) + f"[{sglang_stamp(T + 0.2 + 7200)} TP0] Load weight begin.\n"
    text += f"[{sglang_stamp(T + 1 + 7200)} TP0] The server is fired up and ready to roll!\n"
    log.write_text(text + decode(T + 10 + 7200))
    (line,) = read_log(log, LogParser().parse, ready_at=[T + 2.4])
    assert line.at == T + 10


def test_log_windows_pool_by_the_steps_and_tokens_behind_each_line() -> None:
    parse = LogParser().parse
    # vLLM: 300 accepted at a mean of 4.00 is 100 steps; 10 accepted at 2.00 is 10 steps.
    a, b = parse(spec(T, 300, 4.0)), parse(spec(T + 10, 10, 2.0))
    assert a is not None and b is not None
    wa, wb = log_window("vllm", a, 10.0), log_window("vllm", b, 10.0)
    assert wa is not None and wb is not None
    assert (wa.steps, wa.tokens) == (pytest.approx(100.0), pytest.approx(400.0))
    pooled = (wa.tokens + wb.tokens) / (wa.steps + wb.steps)  # type: ignore[operator]
    assert pooled == pytest.approx(1 + 310 / 110)  # what vLLM's counters give
    assert pooled != pytest.approx((4.0 + 2.0) / 2)  # the old plain mean of the lines
    # vLLM's engine line: tokens are its throughput over the stretch between the stamps.
    eng = parse(
        "(APIServer pid=7) INFO 12-01 08:13:20 [loggers.py:335] Engine 000: Avg prompt "
        "throughput: 26.2 tokens/s, Avg generation throughput: 235.7 tokens/s, Running: 1 reqs, "
        "Waiting: 0 reqs, CPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%"
    )
    assert eng is not None
    we = log_window("vllm", eng, 10.0)
    assert we is not None and we.tokens == pytest.approx(2357.0) and we.steps is None
    # SGLang: a line every 40 decode iterations, one step per running request in each: a
    # line of 4 running requests weighs four times one of a single request.
    one, four = parse(decode(T, running=1, accept=2.0)), parse(decode(T, running=4, accept=4.0))
    assert one is not None and four is not None
    w1, w4 = log_window("sglang", one, 1.0), log_window("sglang", four, 1.0)
    assert w1 is not None and w4 is not None
    assert (w1.tokens + w4.tokens) / (w1.steps + w4.steps) == pytest.approx(18 / 5)  # type: ignore[operator]


def test_a_real_sglang_log_of_two_starts_keeps_each_start_on_its_own_clock(
    tmp_path: Path,
) -> None:
    """A real SGLang 0.5.23 prints its web server's 'Application startup complete.' (another
    engine's ready line) seconds before its own: read as a ready line too, one start used up
    both starts' ready events and the first start's lines moved an hour late. Two starts an
    hour apart, the log of each the real one."""
    from specbench_tui.engines.registry import adapter
    from tests.support.replay import FIXTURES

    real = (FIXTURES / "sglang-0.5.23-cpu" / "inc" / "server.log").read_text()
    later = real.replace("[2026-12-07 04:", "[2026-12-07 05:")
    start = datetime(2026, 12, 7, 4, 13, 0, tzinfo=UTC).timestamp()
    ready = datetime(2026, 12, 7, 4, 14, 18, tzinfo=UTC).timestamp() + 0.5
    log = tmp_path / "g.log"
    log.write_text(header(start) + real + header(start + 3600) + later)
    parse = LogParser().parse
    own = adapter("sglang").ready_line
    lines = read_log(log, parse, ready_at=[ready, ready + 3600], ready_line=own)
    assert len(lines) >= 4
    first, second = lines[: len(lines) // 2], lines[len(lines) // 2 :]
    assert all(start < ln.at < start + 3600 for ln in first), [ln.at - start for ln in first]
    assert all(start + 3600 < ln.at < start + 7200 for ln in second)
    # Any engine's ready line, as before: the first start's lines an hour out.
    shifted = read_log(log, parse, ready_at=[ready, ready + 3600])
    assert any(ln.at > start + 3600 for ln in shifted[: len(shifted) // 2])

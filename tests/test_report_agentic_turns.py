"""The agentic section's decode rate per turn is token-weighted over the sessions, as a
cell's is: one turn that reached the client in a burst does not flatten the chart."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbench_tui.report.frames import subset
from specbench_tui.report.inputs import load_inputs
from specbench_tui.report.sections.agentic import _turns
from tests.support.results_builder import ResultsBuilder

KEYS = ("host", "tp", "workload", "config", "kind", "turn", "cell_id", "unit")


def test_a_burst_turn_does_not_outweigh_the_others(tmp_path: Path) -> None:
    b = ResultsBuilder(tmp_path / "syn")
    b.cell("a1", "ar", 1, "agent", "agentic", prompt_set=None)
    # Three sessions, turn 2: two decode 64 tokens in 1.0 s; one read them all in 0.5 ms.
    rows = []
    for session, e2e in ((0, 1.1), (1, 1.1), (2, 0.1005)):
        for turn in (1, 2):
            rows.append(
                {
                    "prompt_id": "p",
                    "session": session,
                    "turn": turn,
                    "repeat": 0,
                    "output_tokens": 65,
                    "ttft_s": 0.1,
                    "e2e_s": e2e if turn == 2 else 1.1,
                }
            )
    b.finished("a1", rows)
    inp = load_inputs(b.write())
    df = subset(
        inp,
        [*KEYS, "decode_tok_s", "prompt_tokens", "cached_tokens"],
    )
    turns = {
        t["turn"]: t["mean"].mean for t in _turns(df, "decode_tok_s")[("sim", 1, "agent", "ar")]
    }
    assert turns[1] == pytest.approx(64.0)
    # 192 tokens over 2.0005 s, not the mean of 64, 64 and 128000 tok/s.
    assert turns[2] == pytest.approx(192 / 2.0005)

"""Greedy equivalence: at temperature 0 a lossless speculative config must reproduce the
baseline's output exactly. A divergence is located, not just detected, because where it
starts (the first token, or deep into a long answer) points at different bugs."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from specbench_tui.results.cells import Cell


@dataclass(frozen=True)
class Divergence:
    char: int  # offset of the first differing character
    word: int  # index of the whitespace-separated word it falls in
    ours: str  # a few characters of each text from a little before that point
    theirs: str

    def describe(self) -> str:
        return f"word {self.word} (char {self.char}): {self.ours!r} vs baseline {self.theirs!r}"


def first_difference(ours: str, theirs: str, context: int = 24) -> Divergence | None:
    """Where two outputs stop agreeing; None when they are identical."""
    if ours == theirs:
        return None
    n = min(len(ours), len(theirs))
    i = next((k for k in range(n) if ours[k] != theirs[k]), n)
    start = max(0, i - context // 3)
    return Divergence(
        char=i,
        word=len(ours[:i].split()) - (0 if i == 0 or ours[i - 1].isspace() else 1),
        ours=ours[start : i + context],
        theirs=theirs[start : i + context],
    )


def greedy_warnings(
    cell: Cell,
    finished: Iterable[Cell],
    baseline: str,
    texts_of: Callable[[str], dict[str, str]],
) -> list[str]:
    """When a temperature-0 single-stream cell finishes, compare it with its counterpart
    (same host, TP, workload, prompt set, max_tokens): the baseline's if it is another config,
    every other config's if it is the baseline. One line per pair that differs, naming the
    first differing prompt and where it differs, so a lossy config shows up during the
    campaign rather than in the report. ``texts_of(cell_id)`` gives outputs by prompt id."""
    if cell.kind != "single" or cell.temperature != 0:
        return []
    key = (cell.host, cell.tp, cell.workload, cell.prompt_set, cell.max_tokens)
    twins = [
        c
        for c in finished
        if c.id != cell.id and (c.host, c.tp, c.workload, c.prompt_set, c.max_tokens) == key
    ]
    if cell.config == baseline:
        pairs = [(c, cell) for c in twins if c.config != baseline]
    else:
        pairs = [(cell, c) for c in twins if c.config == baseline]
    out = []
    for other, base in pairs:
        ours, theirs = texts_of(other.id), texts_of(base.id)
        diffs = [
            (pid, d)
            for pid in sorted(ours.keys() & theirs.keys())
            if (d := first_difference(ours[pid], theirs[pid])) is not None
        ]
        if diffs:
            pid, d = diffs[0]
            more = f" (and {len(diffs) - 1} more prompts)" if len(diffs) > 1 else ""
            out.append(
                f"greedy outputs differ: {other.config} vs {base.config} at {other.name}, "
                f"prompt {pid}, {d.describe()}{more}"
            )
    return out

"""Greedy equivalence: at temperature 0 a lossless speculative config must reproduce the
baseline's output exactly. A divergence is located, not just detected, because where it
starts (the first token, or deep into a long answer) points at different bugs."""

from __future__ import annotations

from dataclasses import dataclass


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

"""Prefix caching, approximated at block granularity.

The engine's radix cache reuses the KV of the longest previously seen token prefix. Without a
tokenizer we hash the text in fixed 64-character blocks (16 simulated tokens), each hash
chained to its predecessor so that a block only matches in the same position after the same
history, and refine the match inside the first block that differs. Lookups cost one hash
per block, which keeps a long agentic context cheap to check on the event loop. Agentic
turns re-send prompt + answer + tool output, so inserting each finished request's prompt
*and* output is what makes their cache hits grow turn by turn.
"""

from __future__ import annotations

from collections import OrderedDict

from specbench_tui.sim.textgen import CHARS_PER_TOKEN

BLOCK_CHARS = 64
BLOCK_TOKENS = BLOCK_CHARS // CHARS_PER_TOKEN


class PrefixCache:
    """Chained block hashes of everything seen, evicting least recently used beyond a capacity.

    Besides the set of full-block hashes, each block remembers the text that followed it (the
    latest one seen), so a match can extend into a partial block at token granularity: a
    repeated prompt is then cached up to its last token, as with a page size of 1.
    """

    def __init__(self, capacity_blocks: int = 200_000) -> None:
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self._next: dict[int, str] = {}
        self._capacity = capacity_blocks

    def match(self, text: str) -> int:
        """Cached tokens for a prompt: its longest cached prefix, never the whole prompt
        (the last token is always recomputed to produce logits)."""
        blocks = self._blocks
        matched = 0
        h = 0
        for start in range(0, len(text), BLOCK_CHARS):
            piece = text[start : start + BLOCK_CHARS]
            if len(piece) == BLOCK_CHARS:
                nh = hash((h, piece))
                if nh in blocks:
                    blocks.move_to_end(nh)
                    matched += BLOCK_CHARS
                    h = nh
                    continue
            seen = self._next.get(h)
            if seen:
                matched += _common_prefix_len(piece, seen)
            break
        total = max(1, (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN)
        return min(matched // CHARS_PER_TOKEN, total - 1)

    def insert(self, text: str) -> None:
        """Remember ``text`` (a prompt, or a prompt plus its output)."""
        blocks = self._blocks
        follow = self._next
        h = 0
        for start in range(0, len(text), BLOCK_CHARS):
            piece = text[start : start + BLOCK_CHARS]
            known = follow.get(h)
            if known is None or not known.startswith(piece):
                follow[h] = piece
            if len(piece) < BLOCK_CHARS:
                break
            h = hash((h, piece))
            blocks[h] = None
            blocks.move_to_end(h)
        while len(blocks) > self._capacity:
            old, _ = blocks.popitem(last=False)
            follow.pop(old, None)

    def __len__(self) -> int:
        return len(self._blocks)


def _common_prefix_len(a: str, b: str) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)

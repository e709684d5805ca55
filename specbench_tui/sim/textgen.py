"""Deterministic output text, and the token arithmetic the simulator uses instead of a tokenizer.

Greedy decoding must be lossless under speculation, so the words depend on the prompt only,
never on the config: every config returns the same text for the same prompt at temperature 0,
and a campaign's greedy-equivalence check passes unless ``--sim-fault diverge`` breaks it on
purpose. One token is one word (with its leading space); prompts count ~4 characters a token.
"""

from __future__ import annotations

import hashlib
import random

CHARS_PER_TOKEN = 4
EOS_TOKEN_ID = 151645  # Qwen's <|im_end|>: what the engine reports as the matched stop token

_VOCABULARY = """
    the of and to in is that for it as with was on be by this are or an at from which have not
    but can all we will one has more if their there other when so some what would about into
    than its only also them value function return result state model token step tree draft
    verify accept length batch cache server request client stream chunk time memory layer
    attention kernel graph output input prompt number sum total first second next last new
    code test case list map key node path file line error check run build data table row column
    answer because therefore then each every both between while after before over under most
"""
_WORDS = tuple(_VOCABULARY.split())
_N_WORDS = len(_WORDS)


def count_tokens(text: str) -> int:
    """Prompt length in tokens, approximated as one token per four characters."""
    return max(1, (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN)


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def prompt_seed(text: str) -> int:
    """A stable 64-bit seed for everything the simulator derives from the prompt alone."""
    return int.from_bytes(_digest(text)[:8], "big")


def natural_length(text: str) -> int | None:
    """Where the model would emit EOS for this prompt; None for 'longer than any budget'.

    About a third of prompts end on their own, so benchmarks see both finish reasons.
    """
    d = _digest(text)
    if d[8] >= 85:
        return None
    return 24 + int.from_bytes(d[9:11], "big") % 1500


class TokenStream:
    """The words one request produces, generated lazily in order.

    Words come from one PRNG consumed strictly in sequence, so how steps group them into
    chunks never changes the text.
    """

    def __init__(
        self,
        prompt: str,
        *,
        temperature: float,
        seed: int,
        nonce: int,
        diverge: bool,
        diverge_at: int | None = None,
    ) -> None:
        base = prompt_seed(prompt)
        self._sampled = temperature > 0
        if self._sampled:
            base = hash((base, seed, nonce)) & 0xFFFF_FFFF_FFFF_FFFF
        self._rng = random.Random(base)
        self._alt_seed = base ^ 0x5EED_D1FF
        self._diverge_at = 8 + _digest(prompt)[12] % 40 if diverge else diverge_at
        self.position = 0
        self.ids: list[int] = []  # token ids so far, as the engine's output_ids

    def next_words(self, n: int) -> list[str]:
        """The next ``n`` tokens' text (their ids are appended to ``ids``)."""
        out: list[str] = []
        ids = self.ids
        getrandbits = self._rng.getrandbits
        for _ in range(n):
            if self.position == self._diverge_at:
                self._rng = random.Random(self._alt_seed)
                getrandbits = self._rng.getrandbits
            r = getrandbits(32)
            word = _WORDS[r % _N_WORDS]
            mark = (r >> 20) % 64
            if mark < 4:
                word += "."
            elif mark < 6:
                word += ","
            elif mark == 6:
                word += ".\n\n"
            out.append(" " + word)
            ids.append(r % _N_WORDS * 64 + mark)
            self.position += 1
        return out

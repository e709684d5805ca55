"""A small byte-level BPE tokenizer for AIPerf and its mock server, trained on the shipped
prompt sets (both need a Hugging Face tokenizer; no hub is needed for this one).

Run with a python that has ``tokenizers`` and ``transformers`` (the mock server's venv has
both): python bench/make_tokenizer.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PROMPTS = Path(__file__).resolve().parent.parent / "specbench_tui" / "prompts"


def main() -> None:
    out = Path(sys.argv[1])
    texts = [
        json.dumps(json.loads(line))
        for f in sorted(PROMPTS.glob("*.jsonl"))
        for line in f.read_text().splitlines()
        if line.strip()
    ]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2048,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    fast.save_pretrained(out)
    print(f"{len(fast)} tokens -> {out}")


if __name__ == "__main__":
    main()

"""Build a tiny random-weight Qwen3 model that a real vLLM engine can serve on a CPU.

Run it with the interpreter of the engine's venv (it needs ``transformers`` and ``tokenizers``,
which vLLM brings), never the project's: ``<vllm-venv>/bin/python -m
specbench_tui.engines.tiny_model DIR``. Nothing is downloaded: the byte-level BPE tokenizer is
trained on the shipped prompt sets and the weights are random under a fixed seed, so two builds
give the same model. Random weights repeat themselves, which makes n-gram drafting accept
often; that is what lets a CPU test see real speculative decoding.

Only the standard library and the engine venv's packages are imported, so this module must not
import the rest of the project.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 2048
# vLLM's chat endpoint refuses a model without a chat template. This one is written for the
# tool's tests in the shape of the Qwen3 family's: ChatML turns, a generation prompt that opens
# the reasoning (``<think>\n``) unless ``enable_thinking`` is false (then an empty reasoning
# block), and earlier assistant turns with their reasoning dropped.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{%- set content = message['content'] %}"
    "{%- if '</think>' in content %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}"
    "{%- endif %}"
    "{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}"
    "{{- '<think>\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)


def _corpus() -> list[str]:
    prompts = Path(__file__).resolve().parent.parent / "prompts"
    texts: list[str] = []
    for path in sorted(prompts.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                texts.append(str(json.loads(line).get("prompt", "")))
    if not texts:
        raise SystemExit(f"no prompt sets under {prompts} to train the tokenizer on")
    return texts


def build(out: Path, seed: int = 0) -> Path:
    """Write tokenizer and model files into ``out``; returns ``out``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(fast),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        torch_dtype="bfloat16",
        eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=fast.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None,
    )
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path, help="where the model is written")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    build(args.dir, args.seed)
    print(args.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A conversation as the raw prompt text of an API that takes text, not messages.

The engines' chat APIs apply the model's own chat template; SGLang's native ``/generate``
takes text, so the client renders it. Every adapter reaches this through
``EngineAdapter.render_prompt``, so the rendering has one place to change (the model's own
template, one day) and every engine gets the same text.
"""

from __future__ import annotations

from typing import Literal

PromptFormat = Literal["chatml", "plain"]


def render_prompt(messages: list[dict[str, str]], fmt: PromptFormat = "chatml") -> str:
    """Turn a conversation into raw prompt text.

    ChatML (the Qwen family's format) makes a chat model answer as it would behind a chat API,
    which is what decides a drafter's acceptance; ``plain`` sends a single user prompt verbatim
    and joins a longer conversation with role headers. Either way the rendering of a prefix
    never changes when turns are appended, so the server's prefix cache sees a growing shared
    prefix.
    """
    if fmt == "chatml":
        parts = [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
        parts.append("<|im_start|>assistant\n")
        return "".join(parts)
    if len(messages) == 1 and messages[0]["role"] == "user":
        return messages[0]["content"]
    parts = [f"{m['role'].capitalize()}: {m['content']}\n\n" for m in messages]
    parts.append("Assistant:")
    return "".join(parts)

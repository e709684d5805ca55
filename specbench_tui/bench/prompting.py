"""How a conversation becomes what a request carries, the same way on every engine.

By default the client renders the model's chat template (plan/chat_template.py) with the plan's
kwargs and sends the text: SGLang's ``/generate`` and the OpenAI ``/v1/completions`` route then
continue exactly the same string, whichever engine serves it. ``chat_template_on = "server"``
sends the messages to ``/v1/chat/completions`` with the same kwargs instead, for a plan that
means to measure the server's own rendering.

One difference is the engine's and is kept here: a text route that tokenizes with special
tokens (SGLang's) adds the model's BOS itself, so a BOS the template wrote at the start is taken
off the text, and the server sees one BOS, as after its own chat rendering.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from specbench_tui.plan.chat_template import ChatTemplate, fallback_template

TemplateOn = Literal["client", "server"]
TextPrompt = Literal["adds_bos", "verbatim"]


@dataclass(frozen=True)
class Prompting:
    """The template, its kwargs, who renders it, and what the engine's text route does."""

    template: ChatTemplate
    kwargs: tuple[tuple[str, Any], ...] = ()
    on: TemplateOn = "client"
    text_prompt: TextPrompt = "adds_bos"

    @property
    def kwargs_dict(self) -> dict[str, Any]:
        return dict(self.kwargs)

    @property
    def kwargs_json(self) -> str:
        """The kwargs as a request row records them (sorted keys: one spelling per value)."""
        return json.dumps(
            self.kwargs_dict, sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )

    @property
    def template_sha256(self) -> str | None:
        """The hash a request row records: the template that rendered its prompt (unknown
        where the server rendered it with a template this tool could not read)."""
        if self.on == "server" and self.template.fallback:
            return None
        return self.template.sha256

    def render(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The whole conversation as the model sees it, ending in the assistant's turn."""
        return self.template.render(messages, self.kwargs_dict)

    def text(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """What a text route receives: the rendering, less a leading BOS the engine adds."""
        out = self.render(messages)
        bos = self.template.bos_token
        if (
            self.text_prompt == "adds_bos"
            and self.template.add_bos_token is not False
            and bos
            and out.startswith(bos)
        ):
            out = out[len(bos) :]
        return out

    def with_kwargs(self, kwargs: Mapping[str, Any]) -> Prompting:
        """The same template with a cell's own kwargs (already merged over the config's)."""
        return Prompting(self.template, tuple(sorted(kwargs.items())), self.on, self.text_prompt)


#: Where no template was looked for (unit tests, a client made by hand): ChatML.
DEFAULT_PROMPTING = Prompting(fallback_template("no template given to the client"))

#: The messages to ``/v1/chat/completions``, for the client benchmarks that measure the chat
#: route against other tools' clients.
CHAT = Prompting(DEFAULT_PROMPTING.template, on="server")

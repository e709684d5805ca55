"""How a conversation becomes what a request carries, the same way on every engine.

By default the client renders the model's chat template (plan/chat_template.py) with the plan's
kwargs and sends the text: a native text route and the OpenAI ``/v1/completions`` route then
continue exactly the same string, whichever engine serves it. ``chat_template_on = "server"``
sends the messages to ``/v1/chat/completions`` with the same kwargs instead, for a plan that
means to measure the server's own rendering.

One difference is the engine's (its adapter's ``text_prompt``) and is kept: a text route that
tokenizes with special tokens (``"adds_bos"``) adds the model's BOS itself, so a BOS the template
wrote at the start is taken off the text, and the server sees one BOS, as after its own chat
rendering; an engine that takes the text as it is (``"verbatim"``, asked
``add_special_tokens: false``) gets the whole rendering.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from specbench_tui.plan.chat_template import ChatTemplate, fallback_template

TemplateOn = Literal["client", "server"]


@dataclass(frozen=True)
class Prompting:
    """The template, its kwargs, and who renders it."""

    template: ChatTemplate
    kwargs: tuple[tuple[str, Any], ...] = ()
    on: TemplateOn = "client"

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

    def text(self, messages: Sequence[Mapping[str, Any]], *, bos_added: bool = True) -> str:
        """What a text route receives: the rendering, less a leading BOS where the engine's
        tokenizer adds one (``bos_added``) and the model's tokenizer config does not say it
        adds none."""
        out = self.render(messages)
        bos = self.template.bos_token
        if bos_added and self.template.add_bos_token is not False and bos and out.startswith(bos):
            out = out[len(bos) :]
        return out

    def with_kwargs(self, kwargs: Mapping[str, Any]) -> Prompting:
        """The same template with a cell's own kwargs (already merged over the config's)."""
        return Prompting(self.template, tuple(sorted(kwargs.items())), self.on)


#: Where no template was looked for (unit tests, a client made by hand): ChatML.
DEFAULT_PROMPTING = Prompting(fallback_template("no template given to the client"))

#: The messages to ``/v1/chat/completions``, for the client benchmarks that measure the chat
#: route against other tools' clients.
CHAT = Prompting(DEFAULT_PROMPTING.template, on="server")

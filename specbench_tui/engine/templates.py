"""The chat template a service group's prompts are rendered with, found once per model.

The template is the model directory's own, read on the host the model lives on (through the
host's transport, as every host file is read), unless the plan names a file; the special tokens
come from the model directory either way. A model without a template is rendered as ChatML,
and the campaign says so once per model, naming the fallback, rather than once per group.
"""

from __future__ import annotations

from pathlib import Path

from specbench_tui.bench.prompting import Prompting
from specbench_tui.engine.hub import EventHub
from specbench_tui.errors import InputError
from specbench_tui.hosts.backends import simulated
from specbench_tui.hosts.host import Host
from specbench_tui.plan.chat_template import (
    MODEL_FILES,
    TEMPLATE_FILE,
    TOKENIZER_CONFIG,
    ChatTemplate,
    fallback_template,
    template_from_file,
    template_from_files,
)
from specbench_tui.results.cells import ServiceGroup


class GroupTemplates:
    """Templates by (host, model, plan template file), for the groups of one run."""

    def __init__(self, hub: EventHub) -> None:
        self.hub = hub
        self._found: dict[tuple[str, str, str | None], ChatTemplate] = {}

    async def prompting(self, group: ServiceGroup, host: Host) -> Prompting:
        """How the group's requests carry their prompts. Raises for a template that cannot
        be used (a model file that is not JSON, a plan file gone since the plan was
        checked): the group cannot measure what the plan asks."""
        key = (group.host, group.model, group.chat_template)
        template = self._found.get(key)
        if template is None:
            template = await self._find(group, host)
            self._found[key] = template
        return Prompting(template, on=group.chat_template_on)

    async def _find(self, group: ServiceGroup, host: Host) -> ChatTemplate:
        model = group.model.rstrip("/")
        files: dict[str, str | None] = {}
        if model:
            got = await host.read_files([f"{model}/{name}" for name in MODEL_FILES])
            files = {name: got.get(f"{model}/{name}") for name in MODEL_FILES}
        if group.chat_template is not None:
            try:
                text = Path(group.chat_template).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise InputError(f"chat template {group.chat_template}: {exc}") from exc
            return template_from_file(text, group.chat_template, files, model)
        found = template_from_files(files, model) if model else None
        if found is not None:
            return found
        if not model:
            why = "the plan names no model directory"
        else:
            why = (
                f"{group.host}:{model} has neither {TEMPLATE_FILE} nor a {TOKENIZER_CONFIG} "
                "chat_template"
            )
        if group.chat_template_on != "server":  # where the server renders, it is its own
            self.hub.notice(
                f"{why}; prompts are rendered as ChatML (the fallback). Name the model's "
                'template with chat_template = "PATH" in [server] or the config',
                "info" if simulated(group.host_kind) else "warning",
            )
        return fallback_template(why)

"""The dry run's view of the prompts: each set's first prompt as the servers will receive it.

A template is shown rendered where this machine can read it without touching a host: a file
the plan names, or the model directory of a local or simulated host. A model on a remote or
batch host is read when its first group starts; the dry run says so instead of guessing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbench_tui.errors import InputError
from specbench_tui.hosts.backends import on_this_machine
from specbench_tui.plan.chat_template import (
    MODEL_FILES,
    ChatTemplate,
    fallback_template,
    template_from_file,
    template_from_files,
)
from specbench_tui.plan.document import Plan
from specbench_tui.plan.prompt_sets import PromptLibrary, SetInfo, sample_prompts
from specbench_tui.results.cells import Cell, ServiceGroup

SHOWN_LINES = 8
SHOWN_WIDTH = 100


@dataclass(frozen=True)
class Shown:
    """One set's first prompt under one template and kwargs (``text`` None: not rendered
    here; ``template`` then says where it will be read)."""

    prompt_set: str
    prompt_id: str
    template: str
    kwargs: dict[str, Any]
    configs: tuple[str, ...]
    text: str | None


def _local_files(model: str) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in MODEL_FILES:
        try:
            out[name] = (Path(model).expanduser() / name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            out[name] = None
    return out


def group_template(group: ServiceGroup) -> ChatTemplate | str:
    """The template a group's prompts will be rendered with, where it can be read from this
    machine; otherwise where it will be read, as a sentence."""
    local = on_this_machine(group.host_kind)
    files = _local_files(group.model) if group.model and local else {}
    if group.chat_template is not None:
        try:
            text = Path(group.chat_template).read_text(encoding="utf-8")
        except OSError as exc:
            return f"{group.chat_template} cannot be read ({exc.strerror or exc})"
        return template_from_file(text, group.chat_template, files, group.model)
    if not local:
        return (
            f"read on host {group.host} from {group.model or '(no model)'} when its first "
            "group starts"
        )
    try:
        found = template_from_files(files, group.model) if group.model else None
    except InputError as exc:
        return str(exc)
    if found is not None:
        return found
    return fallback_template(
        f"{group.model} holds no template" if group.model else "the plan names no model"
    )


def first_prompts(plan: Plan, groups: list[ServiceGroup], cells: list[Cell]) -> list[Shown]:
    """The first prompt of each set, once per distinct template and kwargs that use it."""
    by_group = {g.id: g for g in groups}
    templates: dict[str, ChatTemplate | str] = {}
    seen: dict[tuple[str, str, str], Shown] = {}
    for cell in cells:
        group = by_group[cell.group]
        if group.id not in templates:
            templates[group.id] = group_template(group)
        template = templates[group.id]
        kwargs = dict(cell.chat_template_kwargs)
        label = template if isinstance(template, str) else template.describe()
        for name in cell.prompts or ((cell.prompt_set,) if cell.prompt_set else ()):
            key = (name, label, json.dumps(kwargs, sort_keys=True))
            if key in seen:
                old = seen[key]
                if cell.config not in old.configs:
                    seen[key] = Shown(**{**old.__dict__, "configs": (*old.configs, cell.config)})
                continue
            drawn = sample_prompts(plan.prompts.load(name), cell.samples, plan.spec.campaign.seed)
            if not drawn:
                continue
            first = drawn[0]
            text = None if isinstance(template, str) else template.render(first.messages(), kwargs)
            seen[key] = Shown(name, first.id, label, kwargs, (cell.config,), text)
    return list(seen.values())


def prompt_lines(shown: list[Shown]) -> list[str]:
    """The dry run's text: each set's first prompt, cut to a few lines."""
    if not shown:
        return []
    out = ["", "prompts (the first of each set, as the servers receive it):"]
    for s in shown:
        kwargs = f", kwargs {json.dumps(s.kwargs, ensure_ascii=False)}" if s.kwargs else ""
        out.append(f"  {s.prompt_set}/{s.prompt_id}  ({', '.join(s.configs)}{kwargs})")
        out.append(f"    template {s.template}")
        if s.text is None:
            continue
        lines = s.text.split("\n")
        for line in lines[:SHOWN_LINES]:
            cut = line if len(line) <= SHOWN_WIDTH else line[: SHOWN_WIDTH - 1] + "…"
            out.append(f"    | {cut}")
        if len(lines) > SHOWN_LINES:
            out.append(f"    | … {len(lines) - SHOWN_LINES} more lines")
    return out


def prompt_json(shown: list[Shown]) -> list[dict[str, Any]]:
    return [
        {
            "prompt_set": s.prompt_set,
            "prompt_id": s.prompt_id,
            "configs": list(s.configs),
            "template": s.template,
            "kwargs": s.kwargs,
            "rendered": s.text,
        }
        for s in shown
    ]


def set_infos(plan: Plan) -> list[SetInfo]:
    """Each set the workloads name (a table once, whatever categories they pick)."""
    lib: PromptLibrary = plan.prompts
    names = [lib.split(e)[0] for w in plan.spec.workloads.values() for e in w.prompts]
    return [lib.info(n) for n in dict.fromkeys(names)]


def set_lines(infos: list[SetInfo]) -> list[str]:
    if not infos:
        return []
    out = ["", "prompt sets:"]
    for i in infos:
        total = sum(i.counts.values())
        out.append(f"  {i.name}: {total} prompts; {i.source}; licence {i.licence}")
        cats = {k: n for k, n in i.counts.items() if k}
        if cats:
            out.append("    " + ", ".join(f"{k} {n}" for k, n in cats.items()))
    return out


def set_json(infos: list[SetInfo]) -> list[dict[str, Any]]:
    return [
        {"name": i.name, "source": i.source, "licence": i.licence, "counts": i.counts}
        for i in infos
    ]

"""Checks of what shapes the prompts: the prompt sets, the chat templates and who renders them.

Each problem is a PlanError at its key path, said before anything runs: a set that is missing
(with what to do to get it), a broken line, a category the file does not have, a template
file that is missing or is not jinja2, a server-rendered template on a route that has none.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from specbench_tui.errors import InputError
from specbench_tui.plan.chat_template import ChatTemplate, check_template, template_path
from specbench_tui.plan.configs import ResolvedConfig
from specbench_tui.plan.document import Plan
from specbench_tui.plan.model import SAFE_NAME
from specbench_tui.plan.prompt_formats import SOURCES
from specbench_tui.plan.prompt_sets import shipped_sets
from specbench_tui.table_types import PlanError

_SAFE = re.compile(SAFE_NAME)


def check_prompt_sets(plan: Plan) -> list[PlanError]:
    """Every ``[prompt_sets]`` table and every set a workload names: each file is read now."""
    spec, lib = plan.spec, plan.prompts
    errs: list[PlanError] = []
    broken: set[str] = set()
    for name, table in spec.prompt_sets.items():
        where: tuple[str | int, ...] = ("prompt_sets", name)
        if not _SAFE.match(name):
            errs.append(PlanError(where, f"name {name!r}: use letters, digits, '_', '.' and '-'"))
            broken.add(name)
            continue
        if table.path is None and table.format in ("speed-bench", "jsonl"):
            how = SOURCES[table.format].how
            errs.append(
                PlanError(
                    where,
                    f'format = "{table.format}" needs path = "..."' + (f" ({how})" if how else ""),
                )
            )
            broken.add(name)
            continue
        try:
            found = lib.file_categories(name)
        except InputError as exc:
            errs.append(PlanError((*where, "path") if table.path else where, str(exc)))
            broken.add(name)
            continue
        for i, cat in enumerate(table.categories or []):
            if cat not in found:
                close = difflib.get_close_matches(cat, found, n=1, cutoff=0.6)
                hint = (
                    f"did you mean {close[0]!r}?"
                    if close
                    else f"it has: {', '.join(found) or 'none'}"
                )
                errs.append(PlanError((*where, "categories", i), f"no category {cat!r}; {hint}"))
                broken.add(name)
    for wname, w in spec.workloads.items():
        for i, entry in enumerate(w.prompts):
            at = ("workloads", wname, "prompts", i)
            base, _ = lib.split(entry)
            if base in broken:
                continue
            if base not in spec.prompt_sets and lib.path_of(entry) is None:
                errs.append(PlanError(at, _missing(entry, plan)))
                continue
            try:
                lib.load(entry)  # parsed now: a broken line is said before any run
            except InputError as exc:
                errs.append(PlanError(at, str(exc)))
    return errs


def _missing(name: str, plan: Plan) -> str:
    if name.endswith(".jsonl"):
        return f"prompt file {plan.dir / name} does not exist"
    tables = f", nor a [prompt_sets.{name}] table" if "/" not in name else ""
    return (
        f"no prompt set {name!r}: neither {plan.dir / 'prompts' / (name + '.jsonl')} nor a "
        f"shipped set ({', '.join(shipped_sets())}){tables}"
    )


def check_templates(plan: Plan, configs: list[ResolvedConfig]) -> list[PlanError]:
    spec = plan.spec
    errs: list[PlanError] = []
    tables = [(("server",), spec.server.chat_template)]
    tables += [(("configs", name), cfg.chat_template) for name, cfg in spec.configs.items()]
    for where, name in tables:
        if name is None:
            continue
        path = template_path(name, plan.dir)
        assert path is not None
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            errs.append(
                PlanError(
                    (*where, "chat_template"),
                    f"cannot read {path}: {reason} (a relative path is relative to the plan)",
                )
            )
            continue
        try:
            check_template(ChatTemplate(text=text, source=path))
        except InputError as exc:
            errs.append(PlanError((*where, "chat_template"), str(exc)))
    said: set[tuple[str, ...]] = set()
    for c in configs:
        if c.chat_template_on == "server" and c.api != "openai":
            own = spec.configs[c.base].chat_template_on is not None
            where = (
                ("configs", c.base, "chat_template_on") if own else ("server", "chat_template_on")
            )
            if where in said:
                continue
            said.add(where)
            errs.append(
                PlanError(
                    where,
                    f'chat_template_on = "server" needs api = "openai" (config {c.base!r} '
                    f"uses {c.api!r}, whose /generate has no template of its own); "
                    "leave it out to render on the client",
                )
            )
    return errs

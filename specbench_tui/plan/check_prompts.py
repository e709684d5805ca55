"""Checks of what shapes the prompts: the chat templates a plan names and who renders them.

Each problem is a PlanError at its key path, said before anything runs: a template file that
is missing or is not jinja2, a server-rendered template on a route that has none.
"""

from __future__ import annotations

from pathlib import Path

from specbench_tui.errors import InputError
from specbench_tui.plan.chat_template import ChatTemplate, check_template, template_path
from specbench_tui.plan.configs import ResolvedConfig
from specbench_tui.plan.document import Plan, PlanError


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

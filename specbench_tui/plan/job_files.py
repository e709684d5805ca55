"""The files a batch job needs beside its plan on the cluster: the plan itself and the prompt
and chat-template files it names. The job's tool resolves them against its own copy of the
plan's directory, so a file outside that directory (an absolute path, ``../data``) would not be
there: it is refused when the plan is checked, never dropped at submission. Prompt sets that
ship with the tool come with its install on the cluster."""

from __future__ import annotations

from pathlib import Path

from specbench_tui.hosts.backends import batch_kind
from specbench_tui.plan.chat_template import template_path
from specbench_tui.plan.document import Plan
from specbench_tui.plan.prompt_sets import SHIPPED_DIR, find_prompt_set
from specbench_tui.table_types import PlanError


def _used(plan: Plan) -> list[tuple[tuple[str | int, ...], Path]]:
    """Every file the plan names, with where it names it."""
    out: list[tuple[tuple[str | int, ...], Path]] = []
    for wname, w in plan.spec.workloads.items():
        for i, name in enumerate(w.prompts):
            path = find_prompt_set(name, plan.dir)
            if path is not None:
                out.append((("workloads", wname, "prompts", i), path))
    templates: list[tuple[tuple[str | int, ...], str | None]] = [
        (("server", "chat_template"), plan.spec.server.chat_template),
        *((("configs", n, "chat_template"), c.chat_template) for n, c in plan.spec.configs.items()),
    ]
    for where, t in templates:
        p = template_path(t, plan.dir)
        if p is not None:
            out.append((where, Path(p)))
    return out


def _inside(path: Path, root: Path) -> str | None:
    """The path relative to ``root`` (as the job's copy names it); None outside it."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return None


def job_files(plan: Plan) -> dict[str, str]:
    """The plan and the files beside it that it uses, by path relative to the plan."""
    out = {"plan.toml": plan.text}
    for _, path in _used(plan):
        rel = _inside(path, plan.dir)
        if rel is not None and path.is_file():
            out[rel] = path.read_text(encoding="utf-8")
    return out


def check_job_files(plan: Plan) -> list[PlanError]:
    """A plan with a batch host: every file it names must be inside the plan's directory (or
    ship with the tool), so that the job's copy of that directory has it."""
    if not any(batch_kind(h.kind) for h in plan.spec.hosts.values()):
        return []
    errs = []
    for where, path in _used(plan):
        if _inside(path, plan.dir) is None and _inside(path, SHIPPED_DIR) is None:
            errs.append(
                PlanError(
                    where,
                    f"{path} is outside the plan's directory {plan.dir}: a batch job gets a "
                    "copy of that directory only; copy the file beside the plan and name it "
                    "relative to it",
                )
            )
    return errs

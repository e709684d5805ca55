"""A validated plan, apart from the loader so that the checks and the loader can both use it
(the error a check raises is ``table_types.PlanError``)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from specbench_tui.plan.model import PlanSpec
from specbench_tui.plan.prompt_sets import PromptLibrary


@dataclass(frozen=True)
class ServerSays:
    """What a running server (a config's ``url``) said of itself before a run: its engine
    (None: not one this tool knows), whether it speculates and with what (None: it did not
    say). Its group is expanded with these instead of a launch command's."""

    engine: str | None = None
    speculative: bool | None = None
    algorithm: str | None = None


@dataclass(frozen=True)
class Plan:
    """A validated plan and where it came from; ``running``: what each running server of it
    said of itself, by address (read before a run: ``engine/url_servers.py``)."""

    spec: PlanSpec
    path: Path
    text: str
    running: dict[str, ServerSays] = field(default_factory=dict)

    @property
    def dir(self) -> Path:
        return self.path.parent

    @property
    def prompts(self) -> PromptLibrary:
        """The prompt sets the plan can name (its tables, files beside it, shipped sets)."""
        return PromptLibrary(self.dir, self.spec.prompt_sets)

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]

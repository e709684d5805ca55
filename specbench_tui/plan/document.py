"""A validated plan, apart from the loader so that the checks and the loader can both use it
(the error a check raises is ``table_types.PlanError``)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from specbench_tui.plan.model import PlanSpec
from specbench_tui.plan.prompt_sets import PromptLibrary


@dataclass(frozen=True)
class Plan:
    """A validated plan and where it came from."""

    spec: PlanSpec
    path: Path
    text: str

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

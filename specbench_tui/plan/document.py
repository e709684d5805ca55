"""A validated plan and the error type every plan check raises, apart from the loader so
that the checks and the loader can both use them."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from specbench_tui.errors import InputError
from specbench_tui.plan.locate import LineIndex
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


class PlanError(InputError):
    """A plan problem at a key path; ``where`` is filled in by the loader."""

    def __init__(self, path: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.key_path = path
        self.message = message

    def located(self, file: Path, index: LineIndex) -> str:
        line = index.line_of(self.key_path)
        where = f"{file}:{line}" if line else str(file)
        keys = _dotted(self.key_path)
        return f"{where}: {keys}: {self.message}" if keys else f"{where}: {self.message}"


def _dotted(path: tuple[str | int, ...]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out

"""Where a prompt-set name points: beside the plan first, then the sets shipped in the package.

``code`` -> ``<plan dir>/prompts/code.jsonl`` if it exists, else the package's
``specbench_tui/prompts/code.jsonl``;
``my/set.jsonl`` -> a path relative to the plan file.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

SHIPPED_DIR = Path(__file__).resolve().parent.parent / "prompts"


def shipped_sets() -> list[str]:
    return sorted(p.stem for p in SHIPPED_DIR.glob("*.jsonl"))


def resolve_prompt_set(name: str, plan_dir: Path) -> Path | None:
    """The file for a prompt-set name, or None when there is none."""
    if name.endswith(".jsonl"):
        path = Path(name).expanduser()
        path = path if path.is_absolute() else plan_dir / path
        return path if path.is_file() else None
    for candidate in (plan_dir / "prompts" / f"{name}.jsonl", SHIPPED_DIR / f"{name}.jsonl"):
        if candidate.is_file():
            return candidate
    return None


@lru_cache(maxsize=256)
def count_prompts(path: Path) -> int:
    """Non-blank lines: the number of prompts, without parsing them (all the estimate needs)."""
    with path.open("rb") as f:
        return sum(1 for line in f if line.strip())

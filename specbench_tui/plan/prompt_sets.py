"""Prompt sets: where a name points, and the JSONL files themselves.

A plan names a set (``code``) or a file (``my/set.jsonl``). Names resolve first to
``prompts/<name>.jsonl`` beside the plan, so a campaign can override a shipped set, then to the
sets shipped in ``specbench_tui/prompts``, so a plan anywhere on disk can use those; a
``.jsonl`` value is a path relative to the plan file. A set is ``{"id": str, "prompt": str,
"system"?: str}`` one a line; it is parsed when the plan is checked, so a broken file is one
located error before anything runs, not a failure of every cell that uses it.

Sampling is seeded and depends only on the seed and the set's contents, so every config of a
campaign sees the same prompts, which is what makes their outputs comparable.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from specbench_tui.errors import InputError

SHIPPED_DIR = Path(__file__).resolve().parent.parent / "prompts"


def shipped_sets() -> list[str]:
    return sorted(p.stem for p in SHIPPED_DIR.glob("*.jsonl"))


def find_prompt_set(name: str, plan_dir: Path) -> Path | None:
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


@dataclass(frozen=True)
class Prompt:
    """One prompt; ``set_name`` travels with it because agentic and concurrency cells mix sets
    and each request row names the set its prompt came from."""

    id: str
    prompt: str
    system: str | None = None
    set_name: str = ""

    def messages(self) -> list[dict[str, str]]:
        """The prompt as a chat conversation (system first when the set gives one)."""
        msgs = [{"role": "system", "content": self.system}] if self.system else []
        msgs.append({"role": "user", "content": self.prompt})
        return msgs


def resolve_prompt_set(name: str, plan_dir: Path | str | None) -> Path:
    """The file of a prompt set named in a plan (lookup rules in ``plan.prompt_sets``).

    Raises :class:`InputError` naming what was looked for and the shipped sets, since a typo in
    a set name is the usual cause.
    """
    base = Path(plan_dir) if plan_dir is not None else Path.cwd()
    path = find_prompt_set(name, base)
    if path is not None:
        return path
    if name.endswith(".jsonl"):
        raise InputError(
            f"prompt set file {base / name} not found (a .jsonl path is relative to the plan)"
        )
    known = ", ".join(shipped_sets()) or "none installed"
    raise InputError(
        f"prompt set {name!r}: neither {base / 'prompts' / (name + '.jsonl')} nor a shipped set "
        f"of that name exists; shipped sets: {known}"
    )


def load_prompt_set(path: Path | str, set_name: str | None = None) -> list[Prompt]:
    """Read a JSONL prompt set; any bad line is an :class:`InputError` at ``file:line``."""
    path = Path(path)
    name = set_name if set_name is not None else path.stem
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read prompt set: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc.reason})") from exc
    prompts: list[Prompt] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise InputError(
                f"{where}: not valid JSON ({exc}); expected one object a line"
            ) from exc
        if not isinstance(obj, dict):
            raise InputError(f'{where}: expected an object {{"id": ..., "prompt": ...}}')
        pid, prompt, system = obj.get("id"), obj.get("prompt"), obj.get("system")
        if isinstance(pid, int) and not isinstance(pid, bool):
            pid = str(pid)
        if not isinstance(pid, str) or not pid:
            raise InputError(f'{where}: "id" must be a non-empty string')
        if not isinstance(prompt, str) or not prompt:
            raise InputError(f'{where}: "prompt" must be a non-empty string')
        if system is not None and not isinstance(system, str):
            raise InputError(f'{where}: "system" must be a string')
        if pid in seen:
            raise InputError(f"{where}: duplicate id {pid!r} (first on line {seen[pid]})")
        seen[pid] = lineno
        prompts.append(Prompt(id=pid, prompt=prompt, system=system or None, set_name=name))
    if not prompts:
        raise InputError(f"{path}: the prompt set is empty")
    return prompts


def load_named_set(name: str, plan_dir: Path | str | None) -> list[Prompt]:
    """Resolve and load a set as a plan names it; its prompts carry the plan's spelling of the
    name, so request rows join with the cell's ``prompt_set``."""
    return load_prompt_set(resolve_prompt_set(name, plan_dir), name)


def sample_prompts(prompts: list[Prompt], samples: int | None, seed: int | str) -> list[Prompt]:
    """Draw ``samples`` prompts, reproducibly; all of them when ``samples`` is None or larger.

    The draw is seeded by ``seed``, the set's name and its size (never Python's salted
    ``hash``), so every config of a campaign gets the same draw; the chosen prompts keep file
    order so reports list them in a stable, readable order.
    """
    if samples is None or samples >= len(prompts):
        return list(prompts)
    if samples <= 0:
        return []
    rng = random.Random(f"{seed}:{len(prompts)}:{prompts[0].set_name}")
    chosen = sorted(rng.sample(range(len(prompts)), samples))
    return [prompts[i] for i in chosen]

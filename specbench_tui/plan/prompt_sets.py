"""Prompt sets: where a name points, the files themselves, and the draw from them.

A plan names a set (``code``), a file (``my/set.jsonl``) or a table of its own
(``[prompt_sets.specbench]`` with a ``format``: a standard benchmark's file, see
``prompt_formats``). Names resolve first to a ``[prompt_sets]`` table, then to
``prompts/<name>.jsonl`` beside the plan, so a campaign can override a shipped set, then to the
sets shipped in ``specbench_tui/prompts``, so a plan anywhere on disk can use those; a
``.jsonl`` value is a path relative to the plan file. A set is parsed when the plan is
checked, so a broken file is one located error before anything runs, not a failure of every
cell that uses it.

A set with categories is one prompt set per category in cells and tables: ``NAME/CATEGORY``
(``specbench/qa``) names the questions of one category, ``NAME`` all of them.

Sampling is seeded and depends only on the seed and the set's contents, so every config of a
campaign sees the same prompts, which is what makes their outputs comparable.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from specbench_tui.errors import InputError
from specbench_tui.plan.prompt_formats import (
    SOURCES,
    Format,
    Question,
    default_path,
    read_questions,
)

if TYPE_CHECKING:
    from specbench_tui.plan.model import PromptSetSpec

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


@dataclass(frozen=True)
class Prompt:
    """One prompt; ``set_name`` travels with it because agentic and concurrency cells mix sets
    and each request row names the set its prompt came from."""

    id: str
    prompt: str
    system: str | None = None
    set_name: str = ""
    category: str | None = None
    later_turns: tuple[str, ...] = ()  # the user's turns after the first (MT-Bench has one)
    # A benchmark's question: a session of it is its own turns, never a coding agent's.
    own_turns: bool = False

    @property
    def session_turns(self) -> int | None:
        """Turns of a session of this prompt when they are its own (None: an agent's)."""
        return 1 + len(self.later_turns) if self.own_turns or self.later_turns else None

    def messages(self) -> list[dict[str, str]]:
        """The prompt as a chat conversation (system first when the set gives one)."""
        msgs = [{"role": "system", "content": self.system}] if self.system else []
        msgs.append({"role": "user", "content": self.prompt})
        return msgs

    @classmethod
    def of(cls, q: Question, set_name: str, own_turns: bool = False) -> Prompt:
        return cls(q.id, q.turns[0], q.system, set_name, q.category, q.turns[1:], own_turns)


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
    return [Prompt.of(q, name) for q in _questions("jsonl", path)]


def load_named_set(name: str, plan_dir: Path | str | None) -> list[Prompt]:
    """A set as a plan without ``[prompt_sets]`` tables names it (see ``PromptLibrary``)."""
    return PromptLibrary(plan_dir).load(name)


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


def session_tasks(pool: list[Prompt], sessions: int, workload: str, seed: int) -> list[Prompt]:
    """The prompt each agentic session starts from: the pool shuffled by the workload (not
    the cell, whose id differs per config: every config runs the same sessions), taken in
    turn."""
    if not pool:
        return []
    order = list(pool)
    random.Random(f"{seed}:agentic:{workload}").shuffle(order)
    return [order[s % len(order)] for s in range(sessions)]


def _stamp(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size


@lru_cache(maxsize=64)
def _read(fmt: Format, path: Path, stamp: tuple[int, int]) -> tuple[Question, ...]:
    return tuple(read_questions(fmt, path))


def _questions(fmt: Format, path: Path) -> tuple[Question, ...]:
    """A file's questions, read once while it stays as it is (the plan check, the
    expansion, the dry run and every cell read the same sets)."""
    try:
        stamp = _stamp(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot read prompt set: {exc.strerror or exc}") from exc
    return _read(fmt, path, stamp)


@dataclass(frozen=True)
class SetInfo:
    """What the dry run lists for a set: where it comes from, its licence, its size."""

    name: str
    source: str
    licence: str
    counts: dict[str, int]  # questions per category ("" for a set without categories)


class PromptLibrary:
    """The prompt sets a plan can name: its ``[prompt_sets]`` tables, the files beside it and
    the shipped sets."""

    def __init__(
        self, plan_dir: Path | str | None, tables: Mapping[str, PromptSetSpec] | None = None
    ) -> None:
        self.plan_dir = Path(plan_dir) if plan_dir is not None else Path.cwd()
        self.tables = dict(tables or {})

    # -- names ---------------------------------------------------------------------------------

    def split(self, name: str) -> tuple[str, str | None]:
        """(set, category): ``specbench/qa`` is the qa questions of the table ``specbench``."""
        base, _, category = name.partition("/")
        if category and base in self.tables:
            return base, category
        return name, None

    def table_path(self, name: str) -> Path | None:
        """The file a ``[prompt_sets]`` table reads (None: none, e.g. HumanEval without the
        package)."""
        spec = self.tables[name]
        if spec.path is None:
            return default_path(spec.format)
        path = Path(spec.path).expanduser()
        return path if path.is_absolute() else self.plan_dir / path

    def path_of(self, name: str) -> Path | None:
        base, _ = self.split(name)
        if base in self.tables:
            return self.table_path(base)
        return find_prompt_set(name, self.plan_dir)

    # -- contents ------------------------------------------------------------------------------

    def file_categories(self, base: str) -> list[str]:
        """The categories a table's file holds, in file order, whatever the table picks."""
        return list(dict.fromkeys(p.category for p in self._all(base, picked=False) if p.category))

    def _all(self, base: str, *, picked: bool = True) -> list[Prompt]:
        if base not in self.tables:
            return load_prompt_set(resolve_prompt_set(base, self.plan_dir), base)
        spec = self.tables[base]
        path = self.table_path(base)
        if path is None or not path.is_file():
            raise InputError(missing_set_message(base, spec.format, path))
        own = spec.format != "jsonl"
        prompts = [Prompt.of(q, base, own) for q in _questions(spec.format, path)]
        if spec.categories is not None and picked:
            wanted = set(spec.categories)
            prompts = [p for p in prompts if p.category in wanted]
        return prompts

    def load(self, name: str) -> list[Prompt]:
        """The prompts a name stands for, each carrying that name (request rows join with
        the cell's ``prompt_set`` on it). Raises :class:`InputError`."""
        base, category = self.split(name)
        prompts = self._all(base)
        if category is None:
            return [p if p.set_name == name else _renamed(p, name) for p in prompts]
        chosen = [_renamed(p, name) for p in prompts if p.category == category]
        if not chosen:
            known = ", ".join(self.categories(base)) or "none"
            raise InputError(f"prompt set {base!r} has no category {category!r}; it has: {known}")
        return chosen

    def categories(self, name: str) -> list[str]:
        """A table set's categories in file order (the table's own list where it gives one);
        empty for a set without categories."""
        base, category = self.split(name)
        if category is not None:
            return [category]
        if base not in self.tables:
            return []
        spec = self.tables[base]
        return list(spec.categories) if spec.categories is not None else self.file_categories(base)

    def cell_sets(self, name: str) -> list[str]:
        """The prompt-set values a workload's ``prompts`` entry becomes: one per category of
        a set that has them, else the name itself."""
        cats = self.categories(name) if self.split(name)[1] is None else []
        return [f"{name}/{c}" for c in cats] or [name]

    def count(self, name: str) -> int:
        try:
            return len(self.load(name))
        except InputError:
            return 0

    def info(self, name: str) -> SetInfo:
        """Source, licence and count per category, for the dry run."""
        base, _ = self.split(name)
        prompts = self.load(base)
        counts: dict[str, int] = {}
        for p in prompts:
            counts[p.category or ""] = counts.get(p.category or "", 0) + 1
        if base in self.tables:
            src = SOURCES[self.tables[base].format]
            return SetInfo(base, f"{src.title}: {self.table_path(base)}", src.licence, counts)
        path = resolve_prompt_set(base, self.plan_dir)
        shipped = path.parent == SHIPPED_DIR
        source = "shipped with specbench-tui" if shipped else str(path)
        licence = "specbench-tui's own (Apache-2.0)" if shipped else "the set's own"
        return SetInfo(base, source, licence, counts)

    def files(self) -> list[Path]:
        """The files of the ``[prompt_sets]`` tables that exist."""
        out = []
        for name in self.tables:
            path = self.table_path(name)
            if path is not None and path.is_file():
                out.append(path)
        return out


def _renamed(p: Prompt, name: str) -> Prompt:
    return replace(p, set_name=name)


def missing_set_message(name: str, fmt: Format, path: Path | None) -> str:
    """Why a standard set cannot be read, and what to do, in one line."""
    src = SOURCES[fmt]
    if src.url is not None:
        return (
            f"prompt set {name!r}: {path} not found; run `specbench-tui prompts get {fmt}` "
            f"(without internet: download {src.url} elsewhere, check sha256 {src.sha256}, and "
            'copy it there or name it with path = "...")'
        )
    if fmt == "humaneval" and path is None:
        return f'prompt set {name!r}: no HumanEval file; {src.how}, or give path = "..."'
    where = f"{path} not found" if path is not None else "no path given"
    return f"prompt set {name!r}: {where}; {src.how or 'give its path'}"

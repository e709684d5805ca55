"""Load a plan file: TOML parsing, pydantic validation and cross-table checks, with every
problem turned into one line naming the file, the TOML line and the key path."""

from __future__ import annotations

import difflib
import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specbench_tui.errors import InputError
from specbench_tui.plan.bounds import check_size
from specbench_tui.plan.document import Plan
from specbench_tui.plan.locate import LineIndex
from specbench_tui.plan.model import KINDS, PlanSpec, model_at
from specbench_tui.plan.validate import check_plan
from specbench_tui.table_types import PlanError


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan; raise InputError with one located line on any problem."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{file}: no such plan file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{file}: cannot read the plan: {exc}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(_toml_error(file, exc)) from None
    except RecursionError:  # the parser recurses once per level of nesting
        raise InputError(
            f"{file}: not valid TOML for a plan: arrays or inline tables nested too deeply"
        ) from None
    index = LineIndex(text)
    nul = _nul_strings(raw)
    if nul:
        raise _first(nul, file, index)
    try:
        spec = PlanSpec.model_validate(raw)
    except ValidationError as exc:
        errors = [_pydantic_error(e, raw) for e in exc.errors()]
        raise _first(errors, file, index) from None
    except RecursionError:
        raise InputError(f"{file}: a value of the plan is nested too deeply") from None
    plan = Plan(spec=spec, path=file, text=text)
    problems = check_size(spec) or check_plan(plan)
    if problems:
        raise _first(problems, file, index)
    return plan


def _nul_strings(raw: dict[str, Any]) -> list[PlanError]:
    """Every key and string holding a NUL (TOML writes one as ``\\u0000``): no path,
    argument or environment value can carry one, and nothing else in a plan needs one."""
    errs: list[PlanError] = []
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), raw)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            for k, v in value.items():
                if "\0" in k:
                    errs.append(PlanError(path, f"the key {k!r} holds a NUL character"))
                stack.append(((*path, k), v))
        elif isinstance(value, list):
            stack.extend(((*path, i), v) for i, v in enumerate(value))
        elif isinstance(value, str) and "\0" in value:
            errs.append(
                PlanError(
                    path,
                    f"{value!r} holds a NUL character (U+0000): no program, path, argument "
                    "or environment value can carry one",
                )
            )
    return sorted(errs, key=lambda e: [str(p) for p in e.key_path])


def _first(errors: list[PlanError], file: Path, index: LineIndex) -> InputError:
    msg = errors[0].located(file, index.line_of(errors[0].key_path))
    if len(errors) > 1:
        msg += f"\n({len(errors) - 1} more problem{'s' if len(errors) > 2 else ''} after this one)"
    return InputError(msg)


def _toml_error(file: Path, exc: tomllib.TOMLDecodeError) -> str:
    text = str(exc)
    m = re.search(r"\(at line (\d+), column (\d+)\)", text)
    reason = re.sub(r"\s*\(at line \d+, column \d+\)", "", text)
    if m:
        return f"{file}:{m.group(1)}:{m.group(2)}: not valid TOML: {reason}"
    return f"{file}: not valid TOML: {reason}"


def _pydantic_error(err: Any, raw: dict[str, Any]) -> PlanError:
    loc = [p for p in err["loc"] if p != "[key]"]  # a dict key's error: at the key itself
    # Discriminated unions put the tag in the path: workloads.NAME.single.key -> workloads.NAME.key
    if len(loc) > 2 and loc[0] == "workloads" and loc[2] in KINDS:
        del loc[2]
    path = tuple(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        parent, key = path[:-1], str(path[-1])
        model = model_at(parent, raw)
        hint = ""
        if model is not None:
            known = sorted(model.model_fields)
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}"
        return PlanError(path, f"unknown key {key!r}{hint}")
    if kind == "missing":
        return PlanError(path, "missing required key")
    if kind in ("union_tag_not_found", "union_tag_invalid"):
        tag = (err.get("ctx") or {}).get("tag")
        got = f" (got {_shown(tag)})" if tag is not None else ""
        return PlanError((*path, "kind"), f"'kind' must be one of {', '.join(KINDS)}{got}")
    msg = err["msg"]
    if kind.endswith("_type") or kind.endswith("_parsing"):
        msg = f"{msg} (got {type(err.get('input')).__name__} {_shown(err.get('input'))})"
    elif kind != "value_error" and "input" in err and not isinstance(err["input"], dict):
        msg = f"{msg} (got {_shown(err['input'])})"  # a bad value is named with the key
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    return PlanError(path, msg[0].lower() + msg[1:] if msg else msg)


def _shown(value: Any, limit: int = 80) -> str:
    """A plan value as the error shows it: its repr, cut where it is long."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."

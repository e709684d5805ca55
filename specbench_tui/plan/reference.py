"""The plan format's reference, generated from the pydantic model so that it cannot drift from
what the loader accepts: every table and key with its TOML type, default, bounds and meaning.

The meaning of a key is the comment written beside it (or just above it) in its model
(``plan/model.py``; a host's tables in ``hosts/host_table.py`` and each backend's own): the
model is the one place a key is defined, so its description lives there too. Two outputs:
the key tables of ``docs/plan-format.md`` (``python -m specbench_tui.plan.reference FILE``
rewrites them between their markers; a test keeps the file in sync) and the JSON Schema of
``specbench-tui --plan-schema`` (for editors that check TOML against a schema), which carries
the same descriptions.
"""

from __future__ import annotations

import functools
import inspect
import io
import re
import sys
import tokenize
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator
from pydantic.fields import FieldInfo

from specbench_tui.durations import parse_duration, parse_duration_or_zero
from specbench_tui.plan import model as plan_model
from specbench_tui.table_types import OneOf

BEGIN = "<!-- key tables: generated from the plan's models; do not edit by hand -->"
END = "<!-- end of the generated key tables -->"
DURATION = "duration"


@dataclass(frozen=True)
class Key:
    name: str
    type: str
    default: str
    bounds: str
    meaning: str


@dataclass(frozen=True)
class Table:
    path: str  # as the plan writes it: "campaign", "hosts.NAME", "workloads.NAME (kind = ...)"
    model: type[BaseModel]
    keys: tuple[Key, ...]
    also: str = ""  # the table whose keys this one takes too (a config takes the server's)


@functools.cache
def _comments(cls: type) -> dict[str, str]:
    """Field name -> the comment beside its line in the class body, else the comment lines
    right above it (a blank line or code in between ends a comment block)."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    out: dict[str, str] = {}
    above: list[str] = []
    pending: tuple[str, int] | None = None  # a field seen on this line, waiting for a comment
    depth = 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        elif tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("#").strip()
            if pending and pending[1] == tok.start[0]:
                out[pending[0]] = (out.get(pending[0], "") + " " + text).strip()
            elif depth == 0:
                above.append(text)
        elif tok.type == tokenize.NAME and depth == 0 and tok.start[1] == 4:
            line = tok.line.strip()
            if re.match(rf"{tok.string}\s*:", line) and not line.startswith(("def ", "class ")):
                if above:
                    out[tok.string] = " ".join(above)
                pending = (tok.string, tok.start[0])
            above = []
        elif tok.type == tokenize.NL and not tok.line.strip():
            above = []
    return out


def _meaning(cls: type[BaseModel], name: str) -> str:
    field = cls.model_fields[name]
    if field.description:
        return field.description
    for klass in cls.__mro__:  # a key inherited from a base model keeps the base's comment
        if isinstance(klass, type) and name in getattr(klass, "__annotations__", {}):
            found = _comments(klass).get(name)
            if found:
                return found
    return ""


def _unwrap(tp: Any) -> tuple[Any, list[Any]]:
    """The type under ``Annotated``, with the metadata it carried."""
    meta: list[Any] = []
    while get_origin(tp) is Annotated:
        args = get_args(tp)
        tp = args[0]
        for m in args[1:]:
            meta.extend(m.metadata if isinstance(m, FieldInfo) else [m])
    return tp, meta


def _is_duration(meta: list[Any]) -> bool:
    return any(
        isinstance(m, BeforeValidator) and m.func in (parse_duration, parse_duration_or_zero)
        for m in meta
    )


def _bounds(meta: list[Any]) -> str:
    words = []
    for m in meta:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(m, attr, None) is not None and type(m).__name__.lower() == attr:
                words.append(f"{sign} {getattr(m, attr)}")
        if type(m).__name__ == "MinLen":
            words.append(f"at least {m.min_length}")
        if type(m).__name__ == "MaxLen":
            words.append(f"at most {m.max_length}")
        pattern = getattr(m, "pattern", None)
        if isinstance(pattern, str):
            words.append(f"`{pattern}`")
    return ", ".join(words)


def _one_of(values: tuple[Any, ...]) -> str:
    return " or ".join(f'`"{v}"`' if isinstance(v, str) else f"`{v}`" for v in values)


def _type(tp: Any, meta: list[Any]) -> tuple[str, str]:
    """(TOML type, bounds of what it holds) of an annotation."""
    tp, more = _unwrap(tp)
    meta = [*meta, *more]
    if _is_duration(meta):
        return DURATION, _bounds(meta)
    choices = next((m.values for m in meta if isinstance(m, OneOf)), None)
    if choices is not None:
        return _one_of(choices), ""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        parts = [a for a in get_args(tp) if a is not type(None)]
        if len(parts) == 1:
            return _type(parts[0], meta)
        if all(isinstance(p, type) and issubclass(p, BaseModel) for p in parts):
            return "table", _bounds(meta)
        names = [_type(p, [])[0] for p in parts]
        return " or ".join(dict.fromkeys(names)), _bounds(meta)
    if origin is Literal:
        return _one_of(get_args(tp)), ""
    if origin is list:
        (item,) = get_args(tp)
        inner, inner_bounds = _type(item, [])
        bounds = ", ".join(
            b for b in (_bounds(meta), f"each {inner_bounds}" if inner_bounds else "") if b
        )
        return f"array of {inner}", bounds
    if origin is dict:
        _, value = get_args(tp)
        inner, inner_bounds = _type(value, [])
        bounds = ", ".join(
            b for b in (_bounds(meta), f"each {inner_bounds}" if inner_bounds else "") if b
        )
        return f"table of {inner}", bounds
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return "table", _bounds(meta)
    names = {bool: "boolean", int: "integer", float: "number", str: "string"}
    return names.get(tp, getattr(tp, "__name__", str(tp))), _bounds(meta)


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "(its keys' defaults)"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, list | dict) and not value:
        return "`[]`" if isinstance(value, list) else "`{}`"
    if isinstance(value, dict):
        return "`{ " + ", ".join(f'"{k}" = {v:g}' for k, v in value.items()) + " }`"
    if isinstance(value, float):
        return f"`{value:g}`"
    return f"`{value!r}`".replace("'", '"')


def _keys(cls: type[BaseModel]) -> tuple[Key, ...]:
    out = []
    for name, field in cls.model_fields.items():
        kind, bounds = _type(field.annotation, list(field.metadata))
        default = _default(field)
        if kind == DURATION and default.startswith("`"):
            default = f"`{float(default.strip('`')):g}` s"
        out.append(Key(name, kind, default, bounds, _meaning(cls, name)))
    return tuple(out)


def _children(tp: Any) -> Iterator[tuple[str, type[BaseModel]]]:
    """(path suffix, model) of the tables a field's annotation holds."""
    tp, _ = _unwrap(tp)
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        models = [a for a in get_args(tp) if a is not type(None)]
        for m in models:
            yield from _children(m)
        return
    if origin is dict:
        for suffix, m in _children(get_args(tp)[1]):
            yield ".NAME" + suffix, m
        return
    if origin is list:
        for suffix, m in _children(get_args(tp)[0]):
            yield "[]" + suffix, m
        return
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        yield "", tp


@functools.cache
def tables(root: type[BaseModel] = plan_model.PlanSpec, prefix: str = "") -> tuple[Table, ...]:
    """Every table of the plan, depth first in the model's order; a table whose model extends
    one listed before it (a config extends the server) lists only the keys it adds."""
    out: list[Table] = []
    seen: dict[type[BaseModel], str] = {}
    for t in _walk(root, prefix):
        base = next((b for b in t.model.__mro__[1:] if b in seen), None)
        if base is not None:
            own = tuple(k for k in t.keys if k.name not in base.model_fields)
            t = Table(t.path, t.model, own, also=seen[base])
        seen.setdefault(t.model, t.path)
        out.append(t)
    return tuple(out)


def _walk(root: type[BaseModel], prefix: str) -> Iterator[Table]:
    for name, field in root.model_fields.items():
        for suffix, m in _children(field.annotation):
            path = f"{prefix}{name}{suffix}"
            kind = m.model_fields.get("kind")
            if kind is not None and get_origin(kind.annotation) is Literal:
                (tag,) = get_args(kind.annotation)
                path += f' (kind = "{tag}")'
            yield Table(path, m, _keys(m))
            yield from _walk(m, path.split(" ")[0] + ".")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown() -> str:
    """The key tables, one per plan table, as the docs hold them."""
    lines = [BEGIN, ""]
    for t in tables():
        lines.append(f"### `[{t.path.split(' ')[0]}]`" + t.path[len(t.path.split(" ")[0]) :])
        lines.append("")
        doc = inspect.getdoc(t.model)
        if doc and t.model.__doc__ and t.model.__doc__ is not BaseModel.__doc__:
            lines += [" ".join(doc.split()), ""]
        if t.also:
            lines += [f"Every key of `[{t.also}]` too (the value here wins), and:", ""]
        lines += ["| key | type | default | bounds | meaning |", "| --- | --- | --- | --- | --- |"]
        for k in t.keys:
            lines.append(
                f"| `{k.name}` | {_cell(k.type)} | {_cell(k.default)} | {_cell(k.bounds)} | "
                f"{_cell(k.meaning)} |"
            )
        lines.append("")
    lines.append(END)
    return "\n".join(lines) + "\n"


def json_schema() -> dict[str, Any]:
    """The plan's JSON Schema, each key described as in the docs; durations take strings."""
    schema = plan_model.PlanSpec.model_json_schema(mode="validation")
    defs = schema.get("$defs", {})
    for t in tables():
        target = defs.get(t.model.__name__)
        if target is None:
            continue
        for k in t.keys:
            prop = target.get("properties", {}).get(k.name)
            if prop is None:
                continue
            if k.meaning:
                prop["description"] = k.meaning
            if k.type == DURATION:
                prop.pop("type", None)
                prop["anyOf"] = [{"type": "number", "exclusiveMinimum": 0}, {"type": "string"}]
    schema["title"] = "specbench-tui plan"
    return schema


def missing_meanings() -> list[str]:
    """Keys without a comment in their model: each must say what it means."""
    return [f"{t.path}.{k.name}" for t in tables() for k in t.keys if not k.meaning]


def rewrite(path: Path) -> bool:
    """Put the generated tables into ``path`` between their markers; True when it changed."""
    text = path.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END) + 1
    new = text[:start] + markdown() + text[end:]
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(f"{arg}: {'rewritten' if rewrite(Path(arg)) else 'up to date'}")

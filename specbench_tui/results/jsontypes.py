"""Whether a JSON value has the type a dataclass field declares.

A results directory is read back by every later run, the report and the console; a line of
the event log that is valid JSON but holds ``"attempt": "two"`` must be refused where it is
read, with the field named, instead of failing deep inside whichever figure first does
arithmetic with it. Integers are also held to int64, the width of every parquet column they
may land in.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, Literal, Union

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class FieldTypeError(ValueError):
    """A field whose JSON value does not have its declared type; the message names both."""


def conforms(value: Any, tp: Any) -> bool:
    """``value`` (as ``json.loads`` gives it) fits the annotation ``tp``. A dataclass
    annotation takes a JSON object (its own ``from_json`` checks the inside)."""
    if tp is Any:
        return True
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return any(conforms(value, arg) for arg in typing.get_args(tp))
    if origin is Literal:
        return value in typing.get_args(tp)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool) and _int64(value)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            return False
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        if not args:
            return True
        if origin is tuple and len(args) > 1:  # tuple[str, str]: a pair
            return len(value) == len(args) and all(map(conforms, value, args))
        return all(conforms(v, args[0]) for v in value)
    if origin is dict:
        if not isinstance(value, dict):
            return False
        args = typing.get_args(tp)
        return not args or all(
            conforms(k, args[0]) and conforms(v, args[1]) for k, v in value.items()
        )
    if dataclasses.is_dataclass(tp):
        return isinstance(value, dict)
    return True  # a type this checker does not know is left to the field's own decoding


def _int64(value: int) -> bool:
    return INT64_MIN <= value <= INT64_MAX


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """The resolved annotation of each dataclass field of ``cls``."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def check_fields(cls: type, obj: dict[str, Any], skip: tuple[str, ...] = ()) -> None:
    """Raise FieldTypeError for the first field of ``obj`` whose value does not fit its
    declared type in ``cls``; keys ``cls`` does not declare, and ``skip``, are not looked at."""
    hints = field_types(cls)
    for key, value in obj.items():
        tp = hints.get(key)
        if tp is None or key in skip:
            continue
        if not conforms(value, tp):
            raise FieldTypeError(f"{key!r} is {_show(value)}, not {_name(tp)}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _name(tp: Any) -> str:
    if tp is int:
        return "an integer (int64)"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if tp is bool:
        return "true or false"
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (list, tuple):
        return "a list"
    if origin is dict or dataclasses.is_dataclass(tp):
        return "an object"
    return str(tp)

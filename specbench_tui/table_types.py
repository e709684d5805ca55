"""What every table of the plan is made of: the strict model base, durations, text that
reaches a host, environment tables, and the located error a table's check raises.

The plan's own tables (``plan/model.py``) and the tables each kind of host brings
(``hosts/host_table.py`` and the backends' own) are built from these, so they live on the
ground floor, below both.
"""

from __future__ import annotations

import re
import types
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
)
from pydantic_core import CoreSchema, core_schema

from specbench_tui.durations import parse_duration, parse_duration_or_zero
from specbench_tui.errors import InputError
from specbench_tui.printable import CONTROL

Duration = Annotated[float, BeforeValidator(parse_duration)]
DurationOrZero = Annotated[float, BeforeValidator(parse_duration_or_zero)]

#: GPUs of one host, and so the largest TP size a plan can ask for.
MAX_GPUS = 1024
#: The longest text value a plan table takes (an argument, a path, an environment value), and
#: the longest name a report shows (a config's label, a campaign's title).
MAX_TEXT = 16_384
MAX_LABEL = 200

# An environment variable name, as a shell, a service manager and a batch system take one.
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_ENV = re.compile(ENV_NAME)


def control_char(text: str) -> str:
    """The first control character of ``text`` a host must not get, said ("" when none):
    every C0 control but tab and line feed (which arrive literally, quoted), DEL and the C1
    controls (which terminals obey)."""
    m = CONTROL.search(text)
    if m is None:
        return ""
    ch = m.group()
    name = unicodedata.name(ch, "") or _C0_NAMES.get(ch, "control")
    return f"U+{ord(ch):04X} ({name}) at character {m.start() + 1}"


_C0_NAMES = {"\x00": "NUL", "\x07": "BEL", "\x08": "BS", "\x0d": "CR", "\x1b": "ESC", "\x7f": "DEL"}


def _host_text(value: str) -> str:
    found = control_char(value)
    if found:
        raise ValueError(
            f"{value!r} holds the control character {found}: a value sent to a host may hold "
            "tabs and line breaks, and no other control character"
        )
    return value


def _env_name(name: str) -> str:
    if not _ENV.match(name):
        raise ValueError(
            f"{name!r} is not an environment variable name: use letters, digits and '_', "
            "not starting with a digit"
        )
    return name


# A string that reaches a host: an argument, a path, an environment value, a shell line.
HostText = Annotated[str, AfterValidator(_host_text)]
EnvName = Annotated[str, AfterValidator(_env_name)]
Env = dict[EnvName, HostText]


class Strict(BaseModel):
    # strict: a value of the wrong type is refused, never converted ("2" is not 2, true is not
    # 1, 2.0 is not 2), since a hand-written plan that says "8000" meant something else.
    # A text value is bounded: a plan is written by hand, and a megabyte label or argument is
    # a mistake (or an attack) that would otherwise reach every table, log line and shell.
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
        strict=True,
        str_max_length=MAX_TEXT,
    )


class _TextRule:
    """A rule a text value must keep, told in the plan's words when it does not (pydantic's
    own message would show only a pattern or a type), and shown in the JSON schema."""

    def check(self, value: str) -> str:
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        raise NotImplementedError

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        return {**handler(schema), **self.schema()}


@dataclass(frozen=True)
class Worded(_TextRule):
    """A pattern a text value must match, and what to say when it does not (``says``, with
    ``{value}`` for the value as written). The plan reference shows the pattern too."""

    pattern: str
    says: str

    def check(self, value: str) -> str:
        if not re.match(self.pattern, value):
            raise ValueError(self.says.format(value=repr(value)))
        return value

    def schema(self) -> dict[str, Any]:
        return {"pattern": self.pattern}


@dataclass(frozen=True)
class OneOf(_TextRule):
    """The values a text key may take, kept where they are known (a registry), so a table
    lists no value itself: an unknown one is told with the ones known, and the schema and the
    plan reference list them."""

    what: str  # the key's words in the message: "engine" -> "unknown engine 'x'; known: ..."
    values: tuple[str, ...]

    def check(self, value: str) -> str:
        if value not in self.values:
            known = ", ".join(map(repr, self.values))
            raise ValueError(f"unknown {self.what} {value!r}; known: {known}")
        return value

    def schema(self) -> dict[str, Any]:
        return {"enum": list(self.values)}


def sub_table(model: type[BaseModel], key: str) -> type[BaseModel] | None:
    """The model of the table at ``key`` of ``model`` (an optional table included); None when
    the key holds no table."""
    field = model.model_fields.get(key)
    if field is None:
        return None
    tp = field.annotation
    parts = get_args(tp) if get_origin(tp) in (Union, types.UnionType) else (tp,)
    found = [p for p in parts if isinstance(p, type) and issubclass(p, BaseModel)]
    return found[0] if len(found) == 1 else None


class PlanError(InputError):
    """A plan problem at a key path; the loader says where in the file it is."""

    def __init__(self, path: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.key_path = path
        self.message = message

    def located(self, file: Path, line: int | None) -> str:
        where = f"{file}:{line}" if line else str(file)
        keys = _dotted(self.key_path)
        return f"{where}: {keys}: {self.message}" if keys else f"{where}: {self.message}"


def _dotted(path: tuple[str | int, ...]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out

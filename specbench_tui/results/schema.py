"""Column types of the parquet files, derived from the row types so that a column added to
the request row is a column of ``requests.parquet`` with no second list to keep in step."""

from __future__ import annotations

import types
import typing
from typing import Any

import polars as pl

from specbench_tui.results.gpu_readings import READING_NAMES, TELEMETRY_IDENTITY, GpuReadings
from specbench_tui.results.records import REQUEST_COLUMNS, RequestRecord

_SCALARS: dict[Any, Any] = {str: pl.String, int: pl.Int64, float: pl.Float64, bool: pl.Boolean}


def _polars_type(hint: Any) -> Any:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return _polars_type(args[0])
    if origin is list and args:
        return pl.List(_polars_type(args[0]))
    if hint in _SCALARS:
        return _SCALARS[hint]
    raise TypeError(f"no parquet column type for {hint!r}")


def _schema_of(cls: type, columns: tuple[str, ...]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {name: _polars_type(hints[name]) for name in columns}


REQUEST_SCHEMA: dict[str, Any] = _schema_of(RequestRecord, REQUEST_COLUMNS)

#: A ``telemetry.parquet`` row: where and when, then the readings of ``GpuReadings`` (null
#: where the GPU reports none; a file written before a reading existed lacks its column,
#: and its readers add it as null).
TELEMETRY_SCHEMA: dict[str, Any] = {
    **{name: _polars_type(tp) for name, tp in TELEMETRY_IDENTITY.items()},
    **_schema_of(GpuReadings, READING_NAMES),
}

#: The identity columns of a ``cells.parquet`` row, in the contract's order.
CELL_IDENTITY: tuple[str, ...] = (
    "cell_id",
    "name",
    "group",
    "host",
    "config",
    "tp",
    "workload",
    "kind",
    "prompt_set",
    "max_tokens",
    "concurrency",
)

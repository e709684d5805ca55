"""Column types of the parquet files, derived from the row types so that a column added to
the request row is a column of ``requests.parquet`` with no second list to keep in step."""

from __future__ import annotations

import types
import typing
from typing import Any

import polars as pl

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

TELEMETRY_SCHEMA: dict[str, Any] = {
    "time": pl.Float64,
    "host": pl.String,
    "gpu": pl.Int64,
    "name": pl.String,  # the GPU's model, as the driver names it (added later: older files lack it)
    "util_pct": pl.Float64,
    "mem_used_mib": pl.Float64,
    "mem_total_mib": pl.Float64,
    "power_w": pl.Float64,
    "temp_c": pl.Float64,
    # NVML's total energy counter, mJ since the driver loaded: null on nvidia-smi and in files
    # written before it was read (their readers add it as null).
    "energy_mj": pl.Float64,
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

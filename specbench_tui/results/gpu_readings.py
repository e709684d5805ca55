"""What a GPU sample measures, defined once: name, type and unit of every reading.

A sample has four shapes on its way from a GPU host to the results: the agent's JSON line
(``hosts/gpu_agent.py``), the reader's ``hosts.telemetry.GpuSample``, the live event
``results.events.GpuSample`` and a row of ``telemetry.parquet``. Their readings are the
fields of ``GpuReadings``: both sample classes inherit them, the parquet schema and the rows
are derived from them, and a test holds the agent's keys to them (the agent is piped to
``python -`` on hosts where this package is not installed, so it cannot import this). A new
reading is a field here and the line of the agent that reads it; the console shows it only
where its state is told to.

A reading the GPU does not report is None in every shape: null in the agent's line and in
the parquet row, None on the samples and the event (the console draws it as 0).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specbench_tui.results.jsontypes import field_types


def _reading(unit: str, doc: str) -> Any:
    """A reading's field: None until the GPU reports it; its unit and meaning are metadata,
    so a reader of the definition (and a table of the report) can ask for them."""
    return field(default=None, metadata={"unit": unit, "doc": doc})


@dataclass(kw_only=True)
class GpuReadings:
    """The measured fields of one GPU at one moment (the key of each in every shape)."""

    util_pct: float | None = _reading("%", "busy share of the driver's last sample period")
    mem_used_mib: float | None = _reading(
        "MiB", "memory in use: NVML's v2 figure, without the driver's reservation"
    )
    mem_total_mib: float | None = _reading("MiB", "the board's memory")
    power_w: float | None = _reading("W", "board power draw")
    temp_c: float | None = _reading("°C", "GPU core temperature")
    energy_mj: float | None = _reading(
        "mJ",
        "NVML's total energy counter since the driver loaded (Volta and newer); none on "
        "nvidia-smi, on a board without it and from an agent older than the field",
    )
    sm_clock_mhz: float | None = _reading("MHz", "SM clock now")
    mem_clock_mhz: float | None = _reading("MHz", "memory clock now (NVML only)")
    power_limit_w: float | None = _reading("W", "enforced power limit")
    throttle_reasons: int | None = _reading(
        "bits",
        "NVML's clocks-event (throttle) reasons mask, nvml.h's nvmlClocksEventReason* bits "
        "(NVML only)",
    )

    def readings(self) -> dict[str, Any]:
        """The readings alone, by name: what one shape hands the next."""
        return {name: getattr(self, name) for name in READING_NAMES}


READINGS: tuple[dataclasses.Field[Any], ...] = dataclasses.fields(GpuReadings)
READING_NAMES: tuple[str, ...] = tuple(f.name for f in READINGS)


def _scalar(hint: Any) -> type:
    """``float | None`` -> float: the type a reading's value is converted to."""
    args = [a for a in getattr(hint, "__args__", (hint,)) if a is not type(None)]
    if len(args) != 1 or args[0] not in (float, int, str):
        raise TypeError(f"a GPU reading is one scalar or None, not {hint!r}")
    return args[0]  # type: ignore[no-any-return]


#: Each reading's value type, as a line or a row is converted to it.
READING_TYPES: dict[str, type] = {
    name: _scalar(hint) for name, hint in field_types(GpuReadings).items()
}
#: Each reading's unit, as the definition gives it.
READING_UNITS: dict[str, str] = {f.name: f.metadata["unit"] for f in READINGS}

#: What an agent's sample line holds besides its readings: the host's clock, the GPU's
#: index, its model as the driver names it, and its processes.
AGENT_IDENTITY: tuple[str, ...] = ("t", "gpu", "name", "processes")
#: What an agent line may add beyond its identity and readings: ``energy_trace``, the energy
#: counter's reads between two samples ([[t, mJ], ...], NVML only), which a cell's energy at
#: its edges rests on (bench/energy.py). A list, not a reading: neither stored nor shown.
AGENT_EXTRAS: tuple[str, ...] = ("energy_trace",)
#: The columns of a ``telemetry.parquet`` row before its readings, with their types ("name"
#: was added later: older files lack it, as they lack readings added since).
TELEMETRY_IDENTITY: dict[str, type] = {"time": float, "host": str, "gpu": int, "name": str}
TELEMETRY_COLUMNS: tuple[str, ...] = (*TELEMETRY_IDENTITY, *READING_NAMES)


def readings_from(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The readings of an agent line or a parquet row, each converted to its type (a
    missing or null one is None). Raises ValueError or TypeError on a value that is not a
    number where one is due."""
    out: dict[str, Any] = {}
    for name, tp in READING_TYPES.items():
        v = obj.get(name)
        out[name] = None if v is None else tp(v)
    return out


def telemetry_row(
    *, time: float, host: str, gpu: int, name: str | None, readings: GpuReadings
) -> dict[str, Any]:
    """One row of ``telemetry.parquet``, in its columns' order."""
    return {"time": time, "host": host, "gpu": gpu, "name": name, **readings.readings()}

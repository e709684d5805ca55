"""Whether a comparison holds between like and like: the comparability audit.

A speed-up (or any ratio of a config to its baseline) is a claim about speculative decoding
only when the two sides were measured under the same conditions. ``Audit.why`` names every
reason they were not, for one config against the baseline in one scope (host, TP, workload
kind, workload, concurrency level); an empty list means comparable. The reasons, each with
the tolerance it is judged by (named in the README's "Like with like"):

- **settings**: the two servers' effective settings (the manifest's ``settings``, from the
  server itself where it reports them: ``engines/settings.py``) differ in a key that is not
  speculative, named (a cap on running requests counts where the level reaches it, the KV
  pool's size where the level times the longest request could fill the smaller pool);
- **packing**: one side ran beside other servers on its host and the other alone; or a
  packed side whose control (``interference_check``, ``pack_control``: the group run again
  alone on the host) measured a decode rate that packing changed beyond noise (Welch, 5%);
- **host load**: the host's load per CPU over the two sides' cells differs by more than
  ``LOAD_GAP``;
- **client lag**: the client's event loop lagged (``bench/client_health.py``'s threshold)
  in one side's cells and not the other's;
- **GPU clocks**: the median SM clocks differ by more than ``CLOCK_GAP`` (unless the slower
  side's own draw hit the power cap); the power limits differ; a thermal or hardware slowdown
  (or power brake) was seen on one side only;
- **foreign GPU process**: a process that is not the group's server held its GPUs;
- **implausible**: the speed-up is above the config's accept length (``frames.implausible``),
  which only a difference in conditions explains.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from specbench_tui.bench.conditions import throttle_names
from specbench_tui.engines.settings import differing, said
from specbench_tui.report import format as fmt
from specbench_tui.report.inputs import Inputs

#: How far apart the two sides' host load per CPU may be. Measured by bench/load_effect.py on
#: a real CPU-bound server on two cores: one busy process beside it (0.5 per CPU) cut its
#: decode rate to 0.29 of the quiet one, two to 0.14 (docs/like-with-like.md); the tolerance
#: is half the smallest step measured to matter. Both sides run the same kind of server, so
#: its own share of the load is alike and the difference is what else ran on the host.
LOAD_GAP = 0.25
#: How far apart (relative) the two sides' median SM clocks may be. On an H100 under one
#: load run three times (bench/gpu_conditions_check.py) the runs' median SM clocks were equal
#: (1357.5 MHz) and single samples ranged 1305-1425 MHz (within 4.5% of the median); on
#: another H100 (same driver) they were 1342.5, 1335 and 1335 MHz (0.56% apart), every load
#: sample at the power cap (reason 0x4, 698 W of 700); NVML steps clocks by 15 MHz.
CLOCK_GAP = 0.05
#: The power-cap bit of the clocks-event reasons. Under the same power limit, a side whose
#: own draw reaches the cap (a dense load on an H100 does, at 698 W of 700) runs at lower
#: clocks by its nature, not by its surroundings: neither the bit nor the clocks it lowers
#: make a comparison unlike. Thermal and hardware slowdowns do.
POWER_CAP = 0x4
#: Power limits differing by more than this (W) are two settings, not noise.
POWER_LIMIT_GAP_W = 1.0

_SCOPE = ("host", "tp", "kind", "workload", "concurrency")


@dataclass(frozen=True)
class Side:
    """The conditions of one config's cells in one scope."""

    load: float | None = None  # mean host load per CPU
    lagged: int = 0  # cells whose client lagged
    cells: int = 0
    packed: bool = False
    sm_clock: float | None = None
    power_limit: float | None = None
    throttle: int = 0
    foreign: int = 0


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


class Audit:
    """The conditions of every (scope, config) of a results directory, and the reasons a
    config's figures are not comparable with its baseline's."""

    def __init__(
        self,
        inp: Inputs,
        cells: pl.DataFrame,
        packed_groups: set[str],
        packing: pl.DataFrame | None = None,
        need: Mapping[tuple[Any, ...], int] | None = None,
    ) -> None:
        self._settings: dict[tuple[str, str, int], dict[str, Any]] = {}
        for entry in (inp.manifest or {}).values():
            if isinstance(entry, dict) and isinstance(entry.get("settings"), dict):
                key = (str(entry.get("host")), str(entry.get("config")), int(entry.get("tp") or 0))
                self._settings.setdefault(key, entry["settings"])
        self._rows = cells.to_dicts() if cells.height else []
        self._packed = packed_groups
        self._sides: dict[tuple[Any, ...], Side | None] = {}
        # Tokens in flight at most per scope: its level times its longest request.
        self._need = dict(need or {})
        # What packing did to each config where a control ran it alone (frames.packing_effect).
        self._packing = {
            tuple(r[k] for k in (*_SCOPE, "config")): r
            for r in (packing.to_dicts() if packing is not None and packing.height else [])
        }

    def side(self, key: Mapping[str, Any]) -> Side | None:
        """The conditions of the cells that ``key`` covers: its config, in every scope key
        it names (a table pooled over levels covers them all); None without a cell."""
        names = [k for k in (*_SCOPE, "config") if k in key]
        at = tuple(key[k] for k in names)
        if (tuple(names), at) not in self._sides:
            rows = [r for r in self._rows if tuple(r.get(k) for k in names) == at]
            self._sides[(tuple(names), at)] = self._side(rows) if rows else None
        return self._sides[(tuple(names), at)]

    def _side(self, rows: list[dict[str, Any]]) -> Side:
        def col(name: str) -> list[float]:
            return [float(r[name]) for r in rows if r.get(name) is not None]

        throttle = 0
        for m in col("gpu_throttle_mask"):
            throttle |= int(m)
        limits = col("gpu_power_limit_w")
        clocks = col("gpu_sm_clock_mhz")
        return Side(
            load=_mean(col("host_load_per_cpu")),
            lagged=sum(1 for r in rows if r.get("client_lagged")),
            cells=len(rows),
            packed=any(r.get("group") in self._packed for r in rows),
            sm_clock=statistics.median(clocks) if clocks else None,
            power_limit=min(limits) if limits else None,
            throttle=throttle,
            foreign=int(max(col("gpu_foreign_processes"), default=0)),
        )

    def why(self, key: Mapping[str, Any], base: str) -> list[str]:
        """Every reason the config of ``key`` is not comparable with ``base`` in its scope
        (the conditions only; an implausible figure is the caller's to add)."""
        if key["config"] == base:
            return []
        reasons = self._settings_why(key, base)
        a, b = self.side(key), self.side({**key, "config": base})
        if a is None or b is None:
            return reasons
        if a.packed != b.packed:
            alone, beside = ("the baseline", "it") if a.packed else ("it", "the baseline")
            reasons.append(f"{beside} ran beside other servers on the host, {alone} alone")
        reasons.extend(self._packing_why(key, base, a.packed, b.packed))
        if _loads_differ(a.load, b.load):
            reasons.append(f"host load per CPU {a.load:.2f} against the baseline's {b.load:.2f}")
        if bool(a.lagged) != bool(b.lagged):
            who, n, of = (
                ("its", a.lagged, a.cells) if a.lagged else ("the baseline's", b.lagged, b.cells)
            )
            reasons.append(f"the client lagged in {n} of {of} of {who} cells only")
        reasons.extend(_gpu_why(a, b))
        return reasons

    def _packing_why(
        self, key: Mapping[str, Any], base: str, mine: bool, theirs: bool
    ) -> list[str]:
        """A packed side whose control, run alone, measured a decode rate packing changed
        beyond noise (Welch, 5%): its packed figure is not the config's alone."""
        if not all(k in key for k in _SCOPE):
            return []
        out = []
        for config, packed, who in ((key["config"], mine, "its"), (base, theirs, "the baseline's")):
            r = self._packing.get((*(key[k] for k in _SCOPE), config))
            if packed and r is not None and r.get("differs"):
                q = fmt.ratio(r["ratio"], r["ratio_lo"], r["ratio_hi"], r["ratio_too_few"])
                out.append(f"packing changed {who} decode rate: packed over alone {q}")
        return out

    def _settings_why(self, key: Mapping[str, Any], base: str) -> list[str]:
        if "host" not in key or "tp" not in key:
            return []
        host, tp = str(key["host"]), int(key["tp"])
        mine = self._settings.get((host, str(key["config"]), tp))
        theirs = self._settings.get((host, base, tp))
        if mine is None or theirs is None:
            return []
        level = int(key.get("concurrency") or 0)
        scope = tuple(key.get(k) for k in _SCOPE)
        keys = differing(mine, theirs, level, self._need.get(scope))
        if not keys:
            return []
        return [f"server settings differ from the baseline's: {said(mine, theirs, keys)}"]


def _loads_differ(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a - b) > LOAD_GAP


def _gpu_why(a: Side, b: Side) -> list[str]:
    out = []
    low = a if (a.sm_clock or 0) < (b.sm_clock or 0) else b
    if (
        a.sm_clock
        and b.sm_clock
        and abs(a.sm_clock / b.sm_clock - 1) > CLOCK_GAP
        and not low.throttle & POWER_CAP  # its own draw capped it: the config's, not noise
    ):
        out.append(f"GPU SM clock {a.sm_clock:.0f} MHz against the baseline's {b.sm_clock:.0f} MHz")
    if (
        a.power_limit is not None
        and b.power_limit is not None
        and abs(a.power_limit - b.power_limit) > POWER_LIMIT_GAP_W
    ):
        out.append(
            f"GPU power limit {a.power_limit:.0f} W against the baseline's {b.power_limit:.0f} W"
        )
    if a.throttle & ~POWER_CAP != b.throttle & ~POWER_CAP:
        mine = ", ".join(throttle_names(a.throttle & ~POWER_CAP)) or "none"
        theirs = ", ".join(throttle_names(b.throttle & ~POWER_CAP)) or "none"
        out.append(f"GPU throttling: {mine}, the baseline: {theirs}")
    if a.foreign or b.foreign:
        out.append("a process other than the servers held the GPUs")
    return out

"""Simulated GPUs: the memory a server holds on each of its GPUs, published as small JSON files.

A campaign waits for GPUs to be free between service groups and records telemetry; on the
simulated host a fake NVML reader gets both from ``<dir>/gpu<N>.json``. Each file is replaced
atomically (write a temporary file, then ``os.replace``) so a reader never sees half a file,
and carries our pid so that a reader can treat the memory of a dead process as freed, as the
driver would. Memory ramps the way a real start-up does (context, weights, KV pool, CUDA
graphs), which lets the "wait until memory is free" logic be tested for real.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specbench_tui.sim.config import SimConfig

GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition (simulated)"
TOTAL_MIB = 97887.0
WRITE_INTERVAL_S = 0.25
#: How long a server counts as busy after its last decode step, for its neighbours: longer
#: than a single stream's gap between two requests, so a neighbour measuring a cell is busy
#: throughout it, and one whose cells are done is idle a second later.
BUSY_HOLD_S = 1.0
#: How long one look at the neighbours' files holds (a step asks before each decode).
NEIGHBOURS_CHECK_S = 0.05
_TARGET_PARAMS = 27e9
_DRAFT_PARAMS = {"DFLASH": 1.7e9, "DDTREE": 1.7e9, "EAGLE": 0.5e9, "EAGLE3": 0.6e9, "NEXTN": 0.8e9}
# Only the full-attention layers of the hybrid model keep a KV cache: 16 layers x 4 KV heads
# x 256 dims x (K + V) x bf16 per token, split over at most 4 ranks (KV heads replicate beyond).
_KV_BYTES_PER_TOKEN = 16 * 4 * 256 * 2 * 2
_MIB = 1024.0 * 1024.0


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory of one server, in MiB, by what holds it."""

    context_mib: float
    weights_mib: float
    kv_mib: float
    graphs_mib: float
    max_total_tokens: int

    @property
    def loaded_mib(self) -> float:
        return self.context_mib + self.weights_mib

    @property
    def pool_mib(self) -> float:
        return self.loaded_mib + self.kv_mib

    @property
    def ready_mib(self) -> float:
        return self.pool_mib + self.graphs_mib


def memory_plan(cfg: SimConfig) -> MemoryPlan:
    """Weights split by TP, the KV pool filling ``mem_fraction_static`` of the card."""
    params = _TARGET_PARAMS + _DRAFT_PARAMS.get(cfg.algorithm or "", 0.0)
    weights = params * 2 / _MIB / cfg.tp_size
    static = min(cfg.mem_fraction_static, 0.95) * TOTAL_MIB
    kv = max(static - weights, 1024.0)
    per_token = _KV_BYTES_PER_TOKEN / min(cfg.tp_size, 4)
    return MemoryPlan(
        context_mib=520.0,
        weights_mib=weights,
        kv_mib=kv,
        graphs_mib=1800.0,
        max_total_tokens=int(kv * _MIB / per_token),
    )


class SimGpus:
    """The GPUs one server process occupies, and the task that publishes them."""

    def __init__(
        self, cfg: SimConfig, load: Callable[[], float], busy_at: Callable[[], float]
    ) -> None:
        self.ids = cfg.gpu_ids
        self._busy_at = busy_at
        self.directory = Path(cfg.gpu_state_dir) if cfg.gpu_state_dir else None
        self._load = load
        self._pid = os.getpid()
        self._rng = random.Random(cfg.seed)
        self._from = 0.0
        self._to = 0.0
        self._t0 = time.monotonic()
        self._dur = 0.0
        self._temp = {gpu: 31.0 + self._rng.random() * 3 for gpu in self.ids}
        self._offset = {gpu: self._rng.uniform(-40.0, 40.0) for gpu in self.ids}
        self._seen_at, self._seen = -1.0, False  # neighbours(): when last looked, and what

    def ramp_to(self, target_mib: float, over_s: float) -> None:
        """Move the per-GPU memory to ``target_mib`` linearly over ``over_s`` seconds."""
        self._from = self.mem_mib()
        self._to = target_mib
        self._t0 = time.monotonic()
        self._dur = max(over_s, 0.0)

    def mem_mib(self) -> float:
        if self._dur <= 0:
            return self._to
        frac = min(1.0, (time.monotonic() - self._t0) / self._dur)
        return self._from + (self._to - self._from) * frac

    def snapshot(self, gpu: int) -> dict[str, float | int | str]:
        """One GPU's file contents; utilisation and power follow the scheduler's load."""
        load = self._load()
        mem = self.mem_mib()
        mem = mem + self._offset[gpu] if mem > 0 else 0.0
        if load > 0:
            util = min(100.0, 78.0 + 22.0 * load + self._rng.uniform(-3, 3))
            power = 240.0 + 330.0 * load + self._rng.uniform(-10, 10)
        else:
            util = 0.0
            power = (62.0 if mem > 0 else 31.0) + self._rng.uniform(-1.5, 1.5)
        # Temperature lags power like a heat sink: move a fraction of the way each sample.
        target = 28.0 + power * 0.085
        self._temp[gpu] += (target - self._temp[gpu]) * 0.08
        return {
            "gpu": gpu,
            "pid": self._pid,
            "name": GPU_NAME,
            "mem_used_mib": round(mem, 1),
            "mem_total_mib": TOTAL_MIB,
            "util_pct": round(max(util, 0.0), 1),
            "power_w": round(power, 1),
            "temp_c": round(self._temp[gpu], 1),
            "updated": time.time(),
            "busy_at": self._busy_at(),
        }

    def neighbours(self) -> bool:
        """Whether another live simulated server is busy on GPUs of this host: its GPU files
        (written within the last few seconds, in the same state directory) say it decoded
        within ``BUSY_HOLD_S``; an idle server that is up disturbs none. Checked at most every
        ``NEIGHBOURS_CHECK_S``, so a neighbour that starts is felt from its first step on."""
        now = time.monotonic()
        if now - self._seen_at < NEIGHBOURS_CHECK_S:
            return self._seen
        self._seen_at, self._seen = now, False
        if self.directory is None or not self.directory.is_dir():
            return False
        for path in self.directory.glob("gpu*.json"):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if (
                isinstance(data, dict)
                and data.get("pid") != self._pid
                and time.time() - float(data.get("updated") or 0) < 5.0
                and time.time() - float(data.get("busy_at") or 0) < BUSY_HOLD_S
            ):
                self._seen = True
                break
        return self._seen

    def write_all(self) -> None:
        if self.directory is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        for gpu in self.ids:
            final = self.directory / f"gpu{gpu}.json"
            tmp = self.directory / f".gpu{gpu}.json.{self._pid}.tmp"
            tmp.write_text(json.dumps(self.snapshot(gpu)))
            os.replace(tmp, final)

    def remove_all(self) -> None:
        """Delete our files; only files that still name our pid, so a successor's survive."""
        if self.directory is None:
            return
        for gpu in self.ids:
            path = self.directory / f"gpu{gpu}.json"
            with contextlib.suppress(OSError, ValueError):
                if json.loads(path.read_text()).get("pid") == self._pid:
                    path.unlink()

    async def run(self) -> None:
        """Publish every :data:`WRITE_INTERVAL_S` until cancelled."""
        while True:
            with contextlib.suppress(OSError):
                self.write_all()
            await asyncio.sleep(WRITE_INTERVAL_S)

"""A simulated server's life as the engine's log tells it: starting up (loading, the memory
plan, CUDA graphs, the warm-up request), failing at start where a fault asks, crashing mid-run
like a fatal CUDA error, and shutting down. A mixin of ``SimServer`` (``server.py``), whose
state it reads (the attributes declared below)."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from specbench_tui.sim.config import SimConfig
from specbench_tui.sim.gpus import MemoryPlan, SimGpus
from specbench_tui.sim.logfmt import ServerLog
from specbench_tui.sim.model import PerfModel
from specbench_tui.sim.scheduler import Scheduler, SimRequest


class Lifecycle:
    """``start_up``, ``shut_down`` and the crash of a simulated server."""

    cfg: SimConfig
    log: ServerLog
    model: PerfModel
    plan: MemoryPlan
    scheduler: Scheduler
    gpus: SimGpus
    ready: bool
    draining: bool
    crashed: bool
    stop_event: asyncio.Event
    exit_code: int
    _crash_mark: Path | None

    _s: Callable[[float], float]  # simulated seconds as real ones (SimServer._s)

    def _crash(self) -> None:
        """Die like a scheduler hitting a fatal CUDA error: no cleanup, files left behind."""
        self.crashed = True
        if self._crash_mark is not None:
            self._crash_mark.touch()
        self.log.line(
            "Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory "
            "access was encountered"
        )
        self.log.line(
            "Received sigquit from a child process. It usually means the child failed.", rank=None
        )
        # Let the response just produced reach its client before the process vanishes.
        asyncio.get_running_loop().call_later(0.02, os._exit, 1)

    # -- lifecycle -----------------------------------------------------------------------------

    async def start_up(self) -> None:
        """Print the engine's start-up story while memory ramps; then warm up and become ready."""
        cfg, plan, log = self.cfg, self.plan, self.log
        total = self._s(self.model.startup_s())
        ranks = range(cfg.tp_size)
        log.line(f"server_args=ServerArgs({_server_args_repr(cfg)})", rank=None)
        if len(cfg.gpu_ids) < cfg.tp_size:
            log.line(
                f"Scheduler hit an exception: RuntimeError: CUDA error: invalid device "
                f"ordinal (tp_size={cfg.tp_size}, visible GPUs: {list(cfg.gpu_ids)})"
            )
            self._fail()
            return
        if cfg.require_model and not os.path.exists(cfg.model_path):
            # A local model path that is gone (the usual /dev/shm after a reboot) fails the
            # way the engine does: while loading the config, before any GPU work.
            log.line(
                f"Scheduler hit an exception: OSError: Can't load the configuration of "
                f"'{cfg.model_path}'. Make sure '{cfg.model_path}' is the correct path to a "
                "directory containing a config.json file"
            )
            self._fail()
            return
        for r in ranks:
            log.line("Init torch distributed begin.", rank=r)
        self.gpus.ramp_to(plan.context_mib, total * 0.05)
        await asyncio.sleep(total * 0.05)
        for r in ranks:
            log.line("Init torch distributed ends. mem usage=0.51 GB", rank=r)
            log.line(f"Load weight begin. avail mem={_gb(95000.0)} GB", rank=r)
        if cfg.fault("crash-at-start"):
            await asyncio.sleep(total * 0.1)
            log.line("Scheduler hit an exception: Traceback (most recent call last):")
            log.raw(log.fmt.scheduler_frame)
            log.raw("    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)")
            log.raw("RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable")
            log.line(
                "Received sigquit from a child process. It usually means the child failed.",
                rank=None,
            )
            self._fail()
            return
        self.gpus.ramp_to(plan.loaded_mib, total * 0.5)
        await asyncio.sleep(total * 0.5)
        avail = 97887.0 - plan.loaded_mib
        for r in ranks:
            log.line(
                f"Load weight end. type=Qwen3_5ForConditionalGeneration, dtype=torch.bfloat16, "
                f"avail mem={_gb(avail)} GB, mem usage={_gb(plan.weights_mib)} GB.",
                rank=r,
            )
        if cfg.speculative:
            log.line(f"Loading draft model for {cfg.algorithm}: {cfg.draft_model_path}")
        self.gpus.ramp_to(plan.pool_mib, total * 0.05)
        await asyncio.sleep(total * 0.05)
        half = _gb(plan.kv_mib / 2)
        for r in ranks:
            log.line(
                f"KV Cache is allocated. #tokens: {plan.max_total_tokens}, "
                f"K size: {half} GB, V size: {half} GB",
                rank=r,
            )
            log.line(
                "Capture cuda graph begin. This can take up to several minutes. "
                f"avail mem={_gb(97887.0 - plan.pool_mib)} GB",
                rank=r,
            )
        if cfg.fault("never-ready"):
            return  # hangs in graph capture; health stays 503 until killed
        self.gpus.ramp_to(plan.ready_mib, total * 0.3)
        await asyncio.sleep(total * 0.3)
        for r in ranks:
            log.line(
                f"Capture cuda graph end. Time elapsed: {total * 0.3:.2f} s. "
                f"mem usage={_gb(plan.graphs_mib)} GB. "
                f"avail mem={_gb(97887.0 - plan.ready_mib)} GB.",
                rank=r,
            )
        log.line(
            f"max_total_num_tokens={plan.max_total_tokens}, chunked_prefill_size=8192, "
            f"max_prefill_tokens=16384, max_running_requests={self.scheduler.cap}, "
            f"context_len={cfg.context_length}, "
            f"available_gpu_mem={_gb(97887.0 - plan.ready_mib)} GB"
        )
        log.raw(f"INFO:     Started server process [{os.getpid()}]")
        log.raw("INFO:     Waiting for application startup.")
        log.raw("INFO:     Application startup complete.")
        log.raw(f"INFO:     Uvicorn running on http://{cfg.host}:{cfg.port} (Press CTRL+C to quit)")
        await self._warm_up()
        self.ready = True
        log.line("The server is fired up and ready to roll!", rank=None)

    async def _warm_up(self) -> None:
        """The engine's own warm-up request: it counts in the lifetime accept-length average, the
        mistake the campaign's per-request accept length avoids."""
        req = SimRequest(
            rid=uuid.uuid4().hex,
            prompt="The capital city of France is",
            max_new_tokens=8,
            temperature=0.0,
            stream=False,
            received=time.perf_counter(),
            internal=True,
        )
        self.scheduler.submit(req)
        while not req.done:
            await req.wake.wait()
            req.wake.clear()
        self.log.access("127.0.0.1:0", "POST", "/generate", 200)

    def _fail(self) -> None:
        self.exit_code = 1
        self.stop_event.set()

    async def shut_down(self) -> None:
        """SIGTERM: refuse new work, abort what runs, release memory, remove our GPU files."""
        self.draining = True
        self.ready = False
        self.scheduler.abort_all("server is shutting down")
        await asyncio.sleep(0.02)  # handlers send their final chunks
        self.scheduler.stop()
        if self.gpus.mem_mib() > 0:
            release = min(1.0, self._s(1.5))
            self.gpus.ramp_to(0.0, release)
            await asyncio.sleep(release)


def _gb(mib: float) -> str:
    return f"{mib / 1024:.2f}"


def _server_args_repr(cfg: SimConfig) -> str:
    shown = {k: v for k, v in cfg.server_info().items() if k not in ("version", "simulated")}
    return ", ".join(f"{k}={v!r}" for k, v in shown.items())

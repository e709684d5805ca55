"""A group waiting for its GPUs says what it waits for: a few seconds into the wait (within
5 s) and again every minute, a ``gpus_waiting`` event names each held GPU, its memory used
and the holder's pid and name; the headless line and the console's health pane say it, and
the end of the wait is said too. The host part drives a simulated host's real telemetry
agent with a foreign process holding GPU 0."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

import pytest

from specbench_tui.engine.headless import format_event
from specbench_tui.hosts import host as host_module
from specbench_tui.hosts.host import SimHost
from specbench_tui.results.cells import ServiceGroup
from specbench_tui.results.events import Event, GpusWaiting, ServiceReady
from specbench_tui.results.state import CampaignState
from tests.support.scripted import sample_campaign

HELD = "GPU 0: 20480/97887 MiB used, held by pid 4242 (python3, 20470 MiB)"


class Recorder:
    """The host's event sink: what the engine's hub would get, with when."""

    def __init__(self) -> None:
        self.events: list[tuple[float, Event]] = []
        self.notices: list[str] = []

    def event(self, ev: Event) -> None:
        self.events.append((time.monotonic(), ev))

    def notice(self, text: str, level: str = "info") -> None:
        self.notices.append(text)


def _group() -> ServiceGroup:
    return ServiceGroup(
        id="sim.ar.tp1",
        host="sim",
        host_kind="sim",
        config="ar",
        label="AR",
        tp=1,
        gpu_ids=(0,),
        port=30000,
        command=("python", "-m", "specbench_tui.sim.server"),
        env=(),
        api="sglang",
        ready_timeout_s=60.0,
        speculative=False,
    )


def _hold(state: Path, gpu: int, pid: int, mem: float) -> None:
    data = {"gpu": gpu, "pid": pid, "name": "sim", "mem_used_mib": mem, "mem_total_mib": 97887}
    tmp = state / f".gpu{gpu}.tmp"
    tmp.write_text(json.dumps(data))
    tmp.rename(state / f"gpu{gpu}.json")


@pytest.mark.system
async def test_a_gpu_wait_names_the_holder_within_5s_repeats_and_says_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_module, "GPU_WAIT_EVERY_S", 1.5)  # a minute, shortened
    holder = subprocess.Popen(["sleep", "60"])
    rec = Recorder()
    host = SimHost("sim", 2, state_dir=tmp_path, events=rec, telemetry_interval_s=0.2)  # type: ignore[arg-type]
    try:
        _hold(tmp_path, 0, holder.pid, 20480)
        began = time.monotonic()
        wait = asyncio.create_task(host.clear_gpus(_group(), timeout_s=60))

        async def release() -> None:
            await asyncio.sleep(5.0)
            holder.kill()
            holder.wait()

        freed = asyncio.create_task(release())
        assert await wait is True
        await freed
    finally:
        if holder.poll() is None:
            holder.kill()
        await host.close()
    waits = [(t, ev) for t, ev in rec.events if isinstance(ev, GpusWaiting)]
    held = [(t, ev) for t, ev in waits if ev.held]
    assert held, rec.events
    first_at, first = held[0]
    assert first_at - began < 5.0
    assert first.group == "sim.ar.tp1" and first.gpu_ids == [0] and first.host == "sim"
    assert first.held[0].startswith("GPU 0: 20480/97887 MiB used, held by pid ")
    assert f"pid {holder.pid} (" in first.held[0]
    assert len(held) >= 2  # said again while the wait goes on
    end = waits[-1][1]
    assert end.held == [] and end.waited_s >= 4.0
    line = format_event(first)
    assert line is not None and "waiting" in line and f"pid {holder.pid}" in line
    assert "GPUs free after" in (format_event(end) or "")


def test_the_wait_is_kept_for_the_health_pane_until_the_server_is_up() -> None:
    state = CampaignState.from_events(sample_campaign())
    gid = "sim.ddtree-16.tp4"
    state.apply(GpusWaiting(host="sim", group=gid, gpu_ids=[0], held=[HELD], waited_s=3.0))
    assert state.groups[gid].gpu_wait is not None
    state.apply(ServiceReady(group=gid, startup_s=1.0))
    assert state.groups[gid].gpu_wait is None
    line = format_event(GpusWaiting(host="sim", group=gid, gpu_ids=[0], held=[HELD], waited_s=3))
    assert line is not None and line.endswith(f"waiting 3s for its GPUs to be freed on sim: {HELD}")

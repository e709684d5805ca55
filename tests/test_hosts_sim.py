"""The simulated server through the real path: SimHost, ProcessService, the agent on the
fake NVML, and the GPU wait before and after the server holds the GPUs."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import pytest

from specbench_tui.hosts.host import SimHost
from specbench_tui.hosts.process import ProcessService
from specbench_tui.hosts.service import READY_LINE
from specbench_tui.hosts.telemetry import GpusNotFreeError
from specbench_tui.results.cells import ServiceGroup

pytestmark = pytest.mark.system

pytest.importorskip("specbench_tui.sim.server")

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_sim_server_holds_and_frees_its_gpus(tmp_path: Path) -> None:
    port = free_port()
    group = ServiceGroup(
        id="sim.ar.tp2",
        host="sim",
        host_kind="sim",
        config="ar",
        label="Autoregressive",
        tp=2,
        gpu_ids=(2, 3),
        port=port,
        command=(
            sys.executable,
            "-m",
            "specbench_tui.sim",
            "--port",
            str(port),
            "--tp-size",
            "2",
            "--speed",
            "20",
        ),
        env=(("CUDA_VISIBLE_DEVICES", "2,3"),),
        api="sglang",
        ready_timeout_s=30.0,
        speculative=False,
    )
    host = SimHost("sim", 4, telemetry_interval_s=0.2)
    lines: list[str] = []
    try:
        await host.wait_gpus_free([2, 3], timeout_s=10)
        svc = host.service(group, tmp_path / "logs" / f"{group.id}.log", lines.append)
        assert isinstance(svc, ProcessService)
        svc.cwd = ROOT  # so that ``-m specbench_tui.sim`` resolves wherever pytest runs
        await svc.start()
        await svc.wait_ready(timeout_s=30)
        assert any(READY_LINE in line for line in lines)
        reader = host.telemetry()
        for _ in range(100):  # the next sample shows the loaded model
            latest = reader.latest()
            if all(latest.get(g) and latest[g].processes for g in (2, 3)):
                break
            await asyncio.sleep(0.1)
        held = reader.latest()[2]
        assert held.processes[0].pid == svc.pid
        assert held.mem_used_mib is not None and held.mem_used_mib > 10_000
        with pytest.raises(GpusNotFreeError, match=rf"held by pid {svc.pid}"):
            await host.wait_gpus_free([2, 3], timeout_s=0.5)
        await svc.stop(grace_s=10)
        await host.wait_gpus_free([2, 3], timeout_s=10)
        assert READY_LINE in (tmp_path / "logs" / f"{group.id}.log").read_text()
    finally:
        await host.close()


def test_sim_state_a_crash_left_is_removed_by_the_next_host(tmp_path, monkeypatch) -> None:
    import subprocess
    import sys
    import tempfile

    from specbench_tui.hosts.host import SIM_STATE_PREFIX, SimHost

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    stale = tmp_path / f"{SIM_STATE_PREFIX}{dead}-sim-abc"
    stale.mkdir()
    (stale / "gpu0.json").write_text("{}")
    alive = tmp_path / f"{SIM_STATE_PREFIX}1-sim-xyz"  # pid 1 is alive
    alive.mkdir()
    host = SimHost("sim", 2)
    assert not stale.exists() and alive.exists()
    assert host.state_dir.parent == tmp_path and host.state_dir.exists()

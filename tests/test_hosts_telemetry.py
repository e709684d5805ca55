"""The GPU agent on the simulated NVML, the reader around it, and waiting for free GPUs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from specbench_tui.hosts.host import FAKE_NVML_PATH, SimHost, make_host
from specbench_tui.hosts.telemetry import (
    AGENT_PATH,
    AgentProcess,
    AgentRunner,
    GpuSample,
    GpusNotFreeError,
    LocalAgentRunner,
    TelemetryReader,
    wait_gpus_free,
)

SIM_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition (simulated)"


def dead_pid() -> int:
    """A pid that was a process and is no more (reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def write_gpu(state: Path, gpu: int, pid: int, mem: float = 80000, util: float = 90) -> None:
    data = {
        "gpu": gpu,
        "pid": pid,
        "name": "sim",
        "mem_used_mib": mem,
        "mem_total_mib": 97887,
        "util_pct": util,
        "power_w": 410.5,
        "temp_c": 61,
        "updated": 0,
    }
    tmp = state / f".gpu{gpu}.tmp"
    tmp.write_text(json.dumps(data))
    os.replace(tmp, state / f"gpu{gpu}.json")


def sim_env(state: Path, gpus: int = 4) -> dict[str, str]:
    return {
        "SPECBENCH_SIM_NVML": str(state),
        "SPECBENCH_SIM_NVML_MODULE": str(FAKE_NVML_PATH),
        "SPECBENCH_SIM_GPUS": str(gpus),
    }


def test_agent_reads_simulated_gpus(tmp_path: Path) -> None:
    write_gpu(tmp_path, 1, os.getpid())
    write_gpu(tmp_path, 2, dead_pid())  # a dead server's memory is freed, as by the driver
    out = subprocess.run(
        [sys.executable, str(AGENT_PATH), "--count", "2", "--interval", "0.05"],
        env={**os.environ, **sim_env(tmp_path)},
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["gpu"] for r in rows] == [0, 1, 2, 3] * 2
    busy, idle = rows[1], rows[2]
    assert busy["name"] == SIM_NAME
    assert busy["mem_used_mib"] == 80000 and busy["mem_total_mib"] == 97887
    assert busy["util_pct"] == 90 and busy["power_w"] == 410.5 and busy["temp_c"] == 61
    (proc,) = busy["processes"]
    assert proc["pid"] == os.getpid() and proc["name"] and proc["mem_mib"] > 70000
    assert idle["processes"] == [] and idle["mem_used_mib"] < 1024 and idle["util_pct"] == 0
    assert idle["power_w"] == 30


def test_agent_without_nvml_says_so_and_exits_3(tmp_path: Path) -> None:
    env = {**os.environ, **sim_env(tmp_path / "missing")}
    out = subprocess.run(
        [sys.executable, str(AGENT_PATH), "--count", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert out.returncode == 3
    assert "does not exist" in json.loads(out.stdout)["error"]


async def collect(reader: TelemetryReader, n: int) -> list[GpuSample]:
    got: list[GpuSample] = []
    async for s in reader:
        got.append(s)
        if len(got) >= n:
            break
    return got


async def test_reader_runs_the_piped_agent(tmp_path: Path) -> None:
    write_gpu(tmp_path, 0, os.getpid(), mem=50000)
    reader = TelemetryReader(
        "sim", LocalAgentRunner(env=sim_env(tmp_path, 2)), interval_s=0.1, gpus=[0, 1]
    )
    reader.start()
    try:
        samples = await asyncio.wait_for(collect(reader, 4), timeout=15)
    finally:
        await reader.stop()
    assert {s.gpu for s in samples} == {0, 1}
    latest = reader.latest()
    assert latest[0].host == "sim" and latest[0].mem_used_mib == 50000
    assert latest[0].processes[0].pid == os.getpid()
    assert latest[1].processes == () and latest[1].power_w == 30
    assert reader.skipped_lines == 0 and reader.last_error is None


async def test_wait_gpus_free_succeeds_and_fails_clearly(tmp_path: Path) -> None:
    write_gpu(tmp_path, 0, dead_pid())
    write_gpu(tmp_path, 1, os.getpid(), mem=81234)
    reader = TelemetryReader("ct200", LocalAgentRunner(env=sim_env(tmp_path, 2)), interval_s=0.1)
    reader.start()
    try:
        await wait_gpus_free(reader.latest, [0], timeout_s=10)
        with pytest.raises(GpusNotFreeError) as exc:
            await wait_gpus_free(reader.latest, [0, 1], timeout_s=0.6, host="ct200")
        reason = exc.value.reason
        assert reason.startswith("GPU 1 on ct200 not free after 0.6s: GPU 1: 81234/97887 MiB")
        assert f"held by pid {os.getpid()}" in reason
        assert list(exc.value.busy) == [1]

        async def release() -> None:
            await asyncio.sleep(0.4)
            (tmp_path / "gpu1.json").unlink()

        task = asyncio.create_task(release())
        await wait_gpus_free(reader.latest, [0, 1], timeout_s=10)
        await task
    finally:
        await reader.stop()


class ScriptedAgent(AgentProcess):
    def __init__(self, lines: list[str], code: int) -> None:
        self._lines, self._code = lines, code

    async def lines(self) -> AsyncIterator[str]:
        for line in self._lines:
            yield line

    async def wait(self) -> int | None:
        return self._code

    async def terminate(self) -> None:
        return None


class ScriptedRunner(AgentRunner):
    """Stands for any transport (the SSH one too): a few lines, then the agent dies."""

    def __init__(self) -> None:
        self.starts = 0
        self.args: list[str] = []

    async def start(self, args: list[str]) -> AgentProcess:
        self.starts += 1
        self.args = args
        good = json.dumps({"t": 1.0, "gpu": 0, "mem_used_mib": 10, "processes": []})
        if self.starts == 1:
            return ScriptedAgent(["garbage", "[1, 2]", '{"gpu": "x"}', good], code=1)
        return ScriptedAgent(["Traceback: boom"], code=1)


async def test_reader_skips_bad_lines_and_reports_death_once() -> None:
    problems: list[str] = []
    runner = ScriptedRunner()
    reader = TelemetryReader(
        "h", runner, gpus=[0, 3], on_problem=problems.append, backoff_s=(0.01,)
    )
    reader.start()
    while runner.starts < 5:
        await asyncio.sleep(0.01)
    await reader.stop()
    assert runner.args == ["--interval", "1", "--count", "0", "--gpus", "0,3"]
    assert reader.latest()[0].mem_used_mib == 10 and reader.latest()[0].util_pct is None
    assert reader.skipped_lines >= 3 + 4  # three bad lines, then one per failed restart
    assert len(problems) == 1 and "agent exited with code 1" in problems[0]
    assert reader.restarts >= 4


async def test_reader_reports_missing_nvml_once(tmp_path: Path) -> None:
    problems: list[str] = []
    reader = TelemetryReader(
        "sim",
        LocalAgentRunner(env=sim_env(tmp_path / "missing")),
        on_problem=problems.append,
        backoff_s=(0.05,),
    )
    reader.start()
    for _ in range(400):
        if reader.restarts >= 2:
            break
        await asyncio.sleep(0.025)
    await reader.stop()
    assert reader.restarts >= 2
    assert len(problems) == 1
    assert problems[0].startswith("no GPU telemetry: NVML init failed")
    assert reader.latest() == {}


async def test_reader_with_real_pynvml_and_no_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine without an NVIDIA driver, pynvml fails and the reader says so once."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is present")
    for key in ("SPECBENCH_SIM_NVML", "SPECBENCH_SIM_NVML_MODULE"):
        monkeypatch.delenv(key, raising=False)
    problems: list[str] = []
    reader = TelemetryReader(
        "local", LocalAgentRunner(), on_problem=problems.append, backoff_s=(0.05,)
    )
    reader.start()
    for _ in range(400):
        if problems:
            break
        await asyncio.sleep(0.025)
    await reader.stop()
    assert len(problems) == 1 and "NVML" in problems[0]
    assert reader.last_error is not None


async def test_sim_host_facade(tmp_path: Path) -> None:
    notices: list[tuple[str, str]] = []
    host = make_host(
        "sim",
        "sim",
        2,
        on_notice=lambda lvl, txt: notices.append((lvl, txt)),
        telemetry_interval_s=0.1,
    )
    assert isinstance(host, SimHost)
    state = host.state_dir
    assert state.is_dir()
    env = host.service_env()
    assert env == {"SPECBENCH_SIM_STATE": str(state), "SPECBENCH_SIM_GPUS": "2"}
    write_gpu(state, 1, os.getpid())
    await host.wait_gpus_free([0], timeout_s=10)
    with pytest.raises(GpusNotFreeError, match="GPU 1 on sim not free"):
        await host.wait_gpus_free([1], timeout_s=0.5)
    await host.stop_foreign(["ddtree-qwen.service"])
    assert notices and "cannot stop ddtree-qwen.service" in notices[-1][1]
    await host.restore_foreign()
    await host.close()
    assert not state.exists()


async def test_host_passes_telemetry_error_into_gpu_wait(tmp_path: Path) -> None:
    host = SimHost("sim", 1, state_dir=tmp_path / "state", telemetry_interval_s=0.1)
    os.rmdir(host.state_dir)  # the agent's NVML init now fails
    try:
        with pytest.raises(GpusNotFreeError) as exc:
            await host.wait_gpus_free([0], timeout_s=1.0)
        assert "GPU 0: no telemetry" in exc.value.reason
        assert "(telemetry: no GPU telemetry: NVML init failed" in exc.value.reason
    finally:
        await host.close()
    assert not (tmp_path / "state").exists()  # a passed-in directory is not ours to delete

"""The GPU agent on the simulated NVML, the reader around it, and waiting for free GPUs."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from conftest import free_port
from support.host_events import Recorded

from specbench_tui.hosts.backends import HostSpec, build_host
from specbench_tui.hosts.gpu_agent import parse_smi
from specbench_tui.hosts.host import (
    FAKE_NVML_PATH,
    SimHost,
    server_pythons,
    with_port,
)
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
from specbench_tui.results.cells import ServiceGroup
from specbench_tui.results.events import GpusUnverified, TelemetryChosen

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


@pytest.mark.system
async def test_wait_gpus_free_succeeds_and_fails_clearly(tmp_path: Path) -> None:
    write_gpu(tmp_path, 0, dead_pid())
    write_gpu(tmp_path, 1, os.getpid(), mem=81234)
    reader = TelemetryReader("ct200", LocalAgentRunner(env=sim_env(tmp_path, 2)), interval_s=0.1)
    reader.start()
    try:
        await wait_gpus_free(reader.latest, [0], timeout_s=10)
        with pytest.raises(GpusNotFreeError) as exc:
            # Long enough for a fresh sample at load 10, whose absence reads "no telemetry".
            await wait_gpus_free(reader.latest, [0, 1], timeout_s=5.0, host="ct200")
        reason = exc.value.reason
        assert reason.startswith("GPU 1 on ct200 not free after 5s: GPU 1: 81234/97887 MiB")
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


@pytest.mark.system
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


@pytest.mark.system
async def test_sim_host_facade(tmp_path: Path) -> None:
    notices: list[tuple[str, str]] = []
    host = build_host(
        HostSpec(sim=True, gpus=2),
        "sim",
        "t",
        events=Recorded(notices),
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


@pytest.mark.system
async def test_agent_outage_reads_as_unverified_not_busy(tmp_path: Path) -> None:
    """The agent keeps dying (its NVML init fails): a missing reading is not a busy GPU, so
    the wait gives up verifying instead of failing the group."""
    events: list[object] = []
    host = SimHost(
        "sim",
        1,
        state_dir=tmp_path / "state",
        telemetry_interval_s=0.1,
        events=Recorded(events=events),
    )
    os.rmdir(host.state_dir)  # the agent's NVML init now fails
    try:
        # The agent's failure is the product's own signal: waited for, not assumed within
        # the second the wait below takes (an agent's start took longer at load 10).
        await host.telemetry_mode()
        reader = host.telemetry()
        deadline = time.monotonic() + 120
        while not (reader.last_error or reader.unavailable):
            assert time.monotonic() < deadline, "the agent never failed"
            await asyncio.sleep(0.1)
        assert await host.wait_gpus_free([0], timeout_s=1.0) is False
        group = dataclasses.replace(local_group(free_port()), host="sim")
        assert await host.clear_gpus(group, timeout_s=1.0) is False
    finally:
        await host.close()
    (unverified,) = [e for e in events if isinstance(e, GpusUnverified)]
    assert unverified.gpu_ids == [0] and "telemetry down: no GPU telemetry" in unverified.reason
    assert not (tmp_path / "state").exists()  # a passed-in directory is not ours to delete


# --- nvidia-smi, from what a real H200 printed ---------------------------------------------

SUPPORT = Path(__file__).parent / "support"
H200 = SUPPORT / "nvidia-smi-h200"


def parse_capture(state: str) -> dict:
    (gpu,) = parse_smi(
        (H200 / f"{state}.query-gpu.csv").read_text(),
        (H200 / f"{state}.query-apps.csv").read_text(),
        t=1.0,
    )
    return gpu


def test_nvidia_smi_captures_parse() -> None:
    idle, load, after = (parse_capture(s) for s in ("idle", "load", "after"))
    assert idle["name"] == "NVIDIA H200" and idle["gpu"] == 0
    assert (idle["util_pct"], idle["mem_used_mib"], idle["mem_total_mib"]) == (0, 0, 143771)
    assert idle["power_w"] == 78.10 and idle["temp_c"] == 34 and idle["processes"] == []
    assert (load["util_pct"], load["mem_used_mib"], load["power_w"]) == (99, 21619, 692.26)
    (proc,) = load["processes"]
    assert proc["pid"] == 564 and proc["mem_mib"] == 21610 and proc["name"] == "python3"
    assert after["processes"] == [] and after["mem_used_mib"] == 0 and after["util_pct"] == 0
    assert GpuSample.from_json("h200", load).processes[0].describe().startswith("pid 564")
    # unsupported fields come as "[N/A]" / "[Not Supported]"
    (odd,) = parse_smi(
        "3, GPU-x, Some GPU, [N/A], 10, 100, 1, [Not Supported], 1, 40, 1, P0, 1\n", ""
    )
    assert odd["gpu"] == 3 and odd["util_pct"] is None and odd["power_w"] is None


def smi_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, state: str) -> Path:
    """The stand-in nvidia-smi first on PATH, in the given state; no simulated NVML."""
    for key in ("SPECBENCH_SIM_NVML", "SPECBENCH_SIM_NVML_MODULE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("PATH", f"{SUPPORT}:{os.environ['PATH']}")
    state_file = tmp_path / "smi-state"
    state_file.write_text(state)
    monkeypatch.setenv("SPECBENCH_FAKE_NVIDIA_SMI_STATE", str(state_file))
    return state_file


def no_pynvml_python(tmp_path: Path) -> str:
    """An interpreter that cannot import pynvml (no site-packages), like a GPU host's
    system python3, whatever this machine has."""
    (tmp_path / "nopynvml").mkdir(exist_ok=True)
    path = tmp_path / "nopynvml" / "python3"
    path.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    path.chmod(0o755)
    return str(path)


@pytest.mark.system
def test_agent_in_nvidia_smi_mode(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    smi_env(monkeypatch, tmp_path, "load")
    python = no_pynvml_python(tmp_path)
    probe = subprocess.run(
        [python, str(AGENT_PATH), "--probe"], capture_output=True, text=True, timeout=30
    )
    got = json.loads(probe.stdout)
    assert got["nvml"]["ok"] is False and "pynvml" in got["nvml"]["error"]
    assert got["smi"] == {"ok": True, "gpus": 1, "driver": "580.159.04"}
    out = subprocess.run(
        [python, str(AGENT_PATH), "--count", "2", "--interval", "0.05"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    rows = [json.loads(x) for x in out.stdout.splitlines()]
    assert out.returncode == 0 and len(rows) == 2
    assert rows[0]["util_pct"] == 99 and rows[0]["processes"][0]["pid"] == 564
    # The conditions query, as a real GPU under load answered it (power cap: bit 0x4).
    assert rows[0]["mem_clock_mhz"] == 2619 and rows[0]["throttle_reasons"] == 0x4


@pytest.mark.system
async def test_nvidia_smi_mode_gpu_wait_returns_once_the_load_is_gone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    state = smi_env(monkeypatch, tmp_path, "load")
    events: list[object] = []
    group = local_group(free_port(), python=no_pynvml_python(tmp_path))
    host = build_host(
        HostSpec(local=True, gpus=1),
        "local",
        "t",
        telemetry_interval_s=0.1,
        events=Recorded(events=events),
        groups=[group],
    )
    try:
        mode = await host.telemetry_mode()
        assert mode.source == "nvidia-smi" and mode.python == group.command[0]
        assert mode.gpus == 1 and mode.driver == "580.159.04"
        reader = host.telemetry()  # its first sample, however long the agent's start takes
        deadline = time.monotonic() + 120
        while 0 not in reader.latest():
            assert time.monotonic() < deadline, "no sample from the agent"
            await asyncio.sleep(0.1)
        with pytest.raises(GpusNotFreeError) as exc:  # a fresh sample within 5 s, under load too
            await host.wait_gpus_free([0], timeout_s=5.0)
        assert "21619/143771 MiB used, held by pid 564 (python3, 21610 MiB)" in exc.value.reason

        async def load_ends() -> None:
            await asyncio.sleep(0.5)
            state.write_text("after")

        ending = asyncio.create_task(load_ends())
        t0 = time.monotonic()
        assert await host.clear_gpus(group, timeout_s=20) is True
        assert time.monotonic() - t0 >= 0.5  # not before the load ended
        await ending
        assert host.telemetry().latest()[0].mem_used_mib == 0
    finally:
        await host.close()
    (chosen,) = [e for e in events if isinstance(e, TelemetryChosen)]
    assert chosen.source == "nvidia-smi" and "nvidia-smi (through" in chosen.text
    assert not any(isinstance(e, GpusUnverified) for e in events)


STUB_PYNVML = """
import json, os
D = json.load(open(os.environ["STUB_NVML_JSON"]))
nvmlMemory_v2 = 0x2000028
NVML_TEMPERATURE_GPU = 0
class NVMLError(Exception):
    pass
class _O:
    def __init__(self, **kw):
        self.__dict__.update(kw)
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return 1
def nvmlSystemGetDriverVersion(): return D["driver"]
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetName(h): return D["name"]
def nvmlDeviceGetMemoryInfo(h, version=None):
    return _O(**(D["mem_v2"] if version == nvmlMemory_v2 else D["mem_v1"]))
def nvmlDeviceGetUtilizationRates(h): return _O(**D["util"])
def nvmlDeviceGetPowerUsage(h): return D["power_mw"]
def nvmlDeviceGetTemperature(h, sensor): return D["temp"]
def nvmlDeviceGetComputeRunningProcesses(h): return [_O(**p) for p in D["procs"]]
"""


def test_nvml_v2_memory_matches_nvidia_smi(tmp_path: Path) -> None:
    """NVML figures captured under load on the H200 (nvml-load.json) through pynvml's API:
    the agent reports v2 "used", which is what nvidia-smi printed at the same moment."""
    (tmp_path / "pynvml.py").write_text(STUB_PYNVML)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECBENCH_SIM_")}
    env |= {"PYTHONPATH": str(tmp_path), "STUB_NVML_JSON": str(H200 / "nvml-load.json")}
    out = subprocess.run(
        [sys.executable, "-S", str(AGENT_PATH), "--count", "1", "--source", "nvml"],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    (row,) = [json.loads(x) for x in out.stdout.splitlines()]
    smi = parse_capture("load")
    assert abs(row["mem_used_mib"] - smi["mem_used_mib"]) < 1  # 21618.8 vs 21619
    assert row["mem_total_mib"] == smi["mem_total_mib"] == 143771
    assert row["util_pct"] == 100 and row["power_w"] == 691.8 and row["temp_c"] == 55
    assert row["processes"][0]["pid"] == 564 and row["processes"][0]["mem_mib"] == 21610


# --- no telemetry at all: this machine (no NVIDIA driver, no pynvml in python3) ------------


def local_group(port: int, python: str = sys.executable) -> ServiceGroup:
    return ServiceGroup(
        id="local.ar.tp1",
        host="local",
        host_kind="local",
        config="ar",
        label="AR",
        tp=1,
        gpu_ids=(0,),
        port=port,
        command=(python, "-m", "specbench_tui.sim", "--port", str(port)),
        env=(),
        api="sglang",
        ready_timeout_s=30.0,
        speculative=False,
        stop_before=("ddtree-qwen.service",),
    )


@pytest.mark.timing
@pytest.mark.system
async def test_local_host_without_gpu_telemetry_does_not_wait(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The real chain on this machine: the venv's python has pynvml but no driver, python3
    has no pynvml, there is no nvidia-smi. It ends at "none" quickly, warns once, and the
    GPU wait goes on, recorded as unverified."""
    for key in ("SPECBENCH_SIM_NVML", "SPECBENCH_SIM_NVML_MODULE"):
        monkeypatch.delenv(key, raising=False)
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi")
    notices: list[tuple[str, str]] = []
    events: list[object] = []
    group = local_group(free_port())
    host = build_host(
        HostSpec(local=True, gpus=1),
        "local",
        "t",
        events=Recorded(notices, events),
        groups=[group],
    )
    t0 = time.monotonic()
    try:
        reader = host.telemetry()
        mode = await host.telemetry_mode()
        assert mode.source == "none" and not mode.available
        assert f"{sys.executable}: NVML" in mode.detail and "python3" in mode.detail
        assert await host.clear_gpus(group, timeout_s=300) is False
        assert await host.clear_gpus(group, timeout_s=300) is False
        assert await host.wait_gpus_free([0], 300) is False
        await asyncio.sleep(0.2)
        assert reader.unavailable and not reader.running and reader.restarts == 0
    finally:
        await host.close()
    assert time.monotonic() - t0 < 60  # a probe of two interpreters, no GPU wait
    warnings = [t for lvl, t in notices if lvl == "warning" and "no GPU telemetry" in t]
    assert len(warnings) == 1 and "previous server's processes and port" in warnings[0]
    assert len([e for e in events if isinstance(e, GpusUnverified)]) == 2
    (chosen,) = [e for e in events if isinstance(e, TelemetryChosen)]
    assert chosen.source == "none" and chosen.text.startswith("no GPU telemetry")
    # stop_before cannot be done on a local host; said, not attempted
    assert any("cannot stop ddtree-qwen.service" in t for _, t in notices)


async def test_busy_port_on_a_sim_host_takes_a_free_one(tmp_path: Path) -> None:
    notices: list[tuple[str, str]] = []
    port = free_port()
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", port))
    blocker.listen()
    host = SimHost("sim", 1, events=Recorded(notices))
    group = dataclasses.replace(local_group(port), host="sim", host_kind="sim")
    try:
        svc = host.service(group, tmp_path / "g.log")
        assert svc.group.port != port and str(svc.group.port) in svc.group.command
        assert str(port) not in svc.group.command
        again = host.service(group, tmp_path / "h.log")
        assert again.group.port == svc.group.port
    finally:
        blocker.close()
        await host.close()
    (text,) = [t for _, t in notices]
    assert f"port {port} is in use by pid {os.getpid()}" in text
    assert f"use port {svc.group.port} instead" in text


def test_with_port_rewrites_the_command() -> None:
    g = dataclasses.replace(
        local_group(30000), command=("python", "--port", "30000", "--x=30000", "130000")
    )
    assert with_port(g, 41000).command == ("python", "--port", "41000", "--x=41000", "130000")
    assert server_pythons([g, local_group(1, python="/opt/v/bin/python3.11")]) == [
        "python",
        "/opt/v/bin/python3.11",
        "python3",
    ]

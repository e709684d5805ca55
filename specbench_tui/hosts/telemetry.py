"""Read GPU telemetry from the agent (``gpu_agent.py``) running on a host.

The reader does not care where the agent runs: an ``AgentRunner`` starts it and hands back
its stdout lines. ``LocalAgentRunner`` pipes the agent's source into ``python -`` exactly as an
SSH runner does on a remote host (``ssh host python3 -``), so the local and simulated paths
exercise the same launch. Telemetry is a side show of a campaign: a bad line is skipped and
counted, a dead agent is reported once and restarted with a backoff, and nothing here ever
raises into the engine.

Which source and which interpreter is decided once per host by ``probe_telemetry``: NVML
through the first interpreter that imports pynvml (the servers' own python first: on a GPU
host pynvml usually lives only in the serving venv), else nvidia-smi, else no telemetry at
all. "No telemetry" is a mode of its own, never a busy GPU: the GPU wait then cannot verify
anything and says so instead of blocking.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from specbench_tui.durations import format_duration
from specbench_tui.errors import HostError
from specbench_tui.hosts.service import ServiceError
from specbench_tui.results import events
from specbench_tui.results.gpu_readings import GpuReadings, readings_from, telemetry_row

log = logging.getLogger(__name__)

AGENT_PATH = Path(__file__).with_name("gpu_agent.py")
EXIT_NO_NVML = 3
PROBE_TIMEOUT_S = 40.0  # an interpreter start, a pynvml import and two nvidia-smi calls

Source = Literal["nvml", "nvidia-smi", "sim", "none"]


def agent_source() -> bytes:
    """The agent script as bytes, to pipe into ``python -`` on any host."""
    return AGENT_PATH.read_bytes()


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str | None
    mem_mib: float | None
    cmd: str | None = None

    def describe(self) -> str:
        what = self.name or "?"
        if self.cmd:
            what += f": {self.cmd[:100]}"
        mem = f", {self.mem_mib:.0f} MiB" if self.mem_mib is not None else ""
        return f"pid {self.pid} ({what}{mem})"


@dataclass(kw_only=True)
class GpuSample(GpuReadings):
    """One GPU at one moment, as the agent reported it: its readings (``GpuReadings``, the
    one definition; None where the GPU does not report one) and where and when it was taken.
    Not frozen: the readings are shared with the live event, which is not."""

    t: float  # epoch seconds on the host
    host: str
    gpu: int
    name: str | None = None  # the GPU's model, as the driver names it
    processes: tuple[GpuProcess, ...] = ()
    # The energy counter's reads since the previous sample (``AGENT_EXTRAS``): (t, mJ).
    energy_trace: tuple[tuple[float, float], ...] = ()
    received: float = field(default_factory=time.monotonic, compare=False)  # local clock

    @classmethod
    def from_json(cls, host: str, obj: Mapping[str, Any]) -> GpuSample:
        """Build from an agent line; raises ValueError/TypeError/KeyError on a malformed one."""
        procs = tuple(
            GpuProcess(
                pid=int(p["pid"]),
                name=p.get("name"),
                mem_mib=None if p.get("mem_mib") is None else float(p["mem_mib"]),
                cmd=p.get("cmd"),
            )
            for p in obj.get("processes") or ()
        )
        return cls(
            t=float(obj["t"]),
            host=host,
            gpu=int(obj["gpu"]),
            name=obj.get("name"),
            processes=procs,
            energy_trace=tuple((float(t), float(mj)) for t, mj in obj.get("energy_trace") or ()),
            **readings_from(obj),
        )

    def event(self) -> events.GpuSample:
        """The sample as the console's live event."""
        return events.GpuSample(
            host=self.host,
            gpu=self.gpu,
            processes=[p.describe() for p in self.processes],
            **self.readings(),
        )

    def row(self) -> dict[str, Any]:
        """The sample as a row of ``telemetry.parquet``."""
        return telemetry_row(
            time=self.t, host=self.host, gpu=self.gpu, name=self.name, readings=self
        )


@dataclass(frozen=True)
class TelemetryMode:
    """How a host's GPUs are read: the source, the interpreter that runs the agent, and what
    the probe found on the way (the reason when there is no telemetry)."""

    source: Source
    python: str | None = None
    detail: str = ""
    gpus: int | None = None
    driver: str | None = None
    energy_gpus: int | None = None  # GPUs that answer NVML's energy counter (None: not asked)

    @property
    def available(self) -> bool:
        return self.source != "none"

    def agent_args(self) -> list[str]:
        """The agent's ``--source`` for this mode (the simulator's fake is NVML to it)."""
        return ["--source", "nvidia-smi" if self.source == "nvidia-smi" else "nvml"]

    def describe(self) -> str:
        """One line for --check, the console and the report."""
        if self.source == "none":
            why = f" ({self.detail})" if self.detail else ""
            return f"no GPU telemetry{why}; {NO_ENERGY}"
        how = {"nvml": "NVML", "nvidia-smi": "nvidia-smi", "sim": "simulated NVML"}[self.source]
        facts = [f"through {self.python}"] if self.python else []
        if self.gpus is not None:
            facts.append(f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}")
        if self.driver:
            facts.append(f"driver {self.driver}")
        line = f"{how} ({', '.join(facts)})" if facts else how
        return f"{line}; {self.energy_words()}"

    def energy_words(self) -> str:
        """Where a cell's GPU board energy will come from on this host."""
        if self.source == "nvidia-smi":
            return "energy: integral of power.draw (nvidia-smi has no energy counter)"
        if self.energy_gpus is None:
            return "energy: counter support not known"
        if self.gpus is not None and self.energy_gpus >= self.gpus:
            return "energy: NVML counter on every GPU"
        if self.energy_gpus == 0:
            return "energy: no NVML counter; integral of the power readings"
        return (
            f"energy: NVML counter on {self.energy_gpus} of {self.gpus} GPUs; a group with a "
            "GPU without it takes the integral of the power readings"
        )


#: What a host whose GPUs cannot be read means for energy, said wherever its telemetry is.
NO_ENERGY = "energy: not measured (no GPU readings on this host)"


class NoTelemetryError(HostError):
    """Raised by a runner when its host has no GPU telemetry: the reader then ends quietly
    (the host said so once, as a warning) instead of restarting an agent that cannot work."""


async def probe_interpreter(
    runner: AgentRunner, timeout_s: float = PROBE_TIMEOUT_S
) -> dict[str, Any]:
    """The agent's ``--probe`` line from one interpreter, or {"error": why} when it did not
    run (no such interpreter, an old Python that cannot parse the agent, a dead link)."""
    try:
        agent = await asyncio.wait_for(runner.start(["--probe"]), timeout_s)
    except Exception as e:  # FileNotFoundError locally, a transport error over SSH
        return {"error": f"cannot run: {type(e).__name__}: {e}"}
    found: dict[str, Any] | None = None
    try:

        async def first_line() -> None:
            nonlocal found
            async for line in agent.lines():
                with contextlib.suppress(ValueError):
                    obj = json.loads(line)
                    if isinstance(obj, dict) and obj.get("probe"):
                        found = obj
                        return

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(first_line(), timeout_s)
        if found is not None:
            return found
        code = None
        with contextlib.suppress(TimeoutError):
            code = await asyncio.wait_for(agent.wait(), 5.0)
        said = agent.stderr_tail().splitlines()
        why = said[-1] if said else f"exit status {code}" if code is not None else "no answer"
        if code == 127:
            why = "not found"
        return {"error": why}
    finally:
        with contextlib.suppress(Exception):
            await agent.terminate()


async def probe_telemetry(
    runner_for: Callable[[str], AgentRunner], pythons: Iterable[str]
) -> TelemetryMode:
    """Walk the chain: NVML through the first interpreter that has it, else nvidia-smi
    (through the first interpreter that runs at all), else none, with every finding in
    ``detail`` so the one warning says what to install where."""
    findings: list[str] = []
    smi: tuple[str, dict[str, Any]] | None = None
    smi_error = ""
    for python in dict.fromkeys(pythons):
        got = await probe_interpreter(runner_for(python))
        if "error" in got:
            findings.append(f"{python}: {got['error']}")
            continue
        nvml, s = got.get("nvml") or {}, got.get("smi") or {}
        if nvml.get("ok"):
            counters = nvml.get("energy_gpus")
            return TelemetryMode(
                "nvml",
                python,
                "; ".join(findings),
                nvml.get("gpus"),
                nvml.get("driver"),
                counters if isinstance(counters, int) else None,
            )
        findings.append(f"{python}: {nvml.get('error', 'no NVML')}")
        if s.get("ok") and smi is None:
            smi = (python, s)
        elif not s.get("ok"):
            smi_error = str(s.get("error") or "nvidia-smi unusable")
    if smi is not None:
        python, s = smi
        return TelemetryMode(
            "nvidia-smi", python, "; ".join(findings), s.get("gpus"), s.get("driver")
        )
    if smi_error:
        findings.append(smi_error)
    return TelemetryMode("none", None, "; ".join(findings))


# --- runners: where the agent process lives ---------------------------------------------------


class AgentProcess(ABC):
    """A running agent: its stdout lines, its end, a way to stop it."""

    @abstractmethod
    def lines(self) -> AsyncIterator[str]:
        """Stdout lines without the newline, until the agent exits."""

    @abstractmethod
    async def wait(self) -> int | None:
        """The exit status once the agent has ended (None when the transport cannot tell)."""

    @abstractmethod
    async def terminate(self) -> None:
        """Stop the agent; safe when it has already ended."""

    def stderr_tail(self) -> str:
        """Its last stderr output, for the death report (a Python traceback, say)."""
        return ""


class AgentRunner(ABC):
    """Starts the agent with the given arguments on some host (local now, SSH later)."""

    @abstractmethod
    async def start(self, args: list[str]) -> AgentProcess: ...


class _LocalAgentProcess(AgentProcess):
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self._stderr = b""
        assert proc.stderr is not None
        self._stderr_task = asyncio.create_task(self._collect_stderr(proc.stderr))

    async def _collect_stderr(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(8192):
            self._stderr = (self._stderr + chunk)[-4000:]

    async def lines(self) -> AsyncIterator[str]:
        assert self._proc.stdout is not None
        while True:
            try:
                raw = await self._proc.stdout.readline()
            except ValueError:  # a line over the stream limit: not ours, skip it
                continue
            if not raw:
                return
            yield raw.decode("utf-8", errors="replace").rstrip("\r\n")

    async def wait(self) -> int | None:
        code = await self._proc.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stderr_task, timeout=1.0)
        return code

    async def terminate(self) -> None:
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.terminate()
            try:
                await asyncio.wait_for(self._proc.wait(), timeout=2.0)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self._proc.kill()
                await self._proc.wait()
        if not self._stderr_task.done():
            self._stderr_task.cancel()

    def stderr_tail(self) -> str:
        return self._stderr.decode(errors="replace").strip()


class LocalAgentRunner(AgentRunner):
    """Runs the agent on this machine as ``python - ARGS`` with its source on stdin.

    ``env`` is added to the environment: SPECBENCH_SIM_NVML and friends for a simulated host.
    """

    def __init__(self, python: str = sys.executable, env: Mapping[str, str] | None = None) -> None:
        self.python = python
        self.env = dict(env or {})

    async def start(self, args: list[str]) -> AgentProcess:
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
        proc = await asyncio.create_subprocess_exec(
            self.python,
            "-",
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        assert proc.stdin is not None
        try:
            proc.stdin.write(agent_source())
            await proc.stdin.drain()
            proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass  # it died at once; the reader sees the exit and reports it
        return _LocalAgentProcess(proc)


# --- the reader ----------------------------------------------------------------------------


SampleCallback = Callable[[GpuSample], None]
ProblemCallback = Callable[[str], None]


class TelemetryReader:
    """Keeps the agent running and turns its lines into ``GpuSample``s.

    Consume with ``on_sample`` (called for each sample), or ``async for s in reader`` (one
    consumer; when it falls behind, the oldest samples are dropped rather than memory grown),
    and/or ``latest()`` for the newest sample per GPU. ``on_problem`` gets one line when the
    agent dies or reports an error, once per outage, not per restart.
    """

    def __init__(
        self,
        host: str,
        runner: AgentRunner,
        *,
        interval_s: float = 1.0,
        gpus: Iterable[int] | None = None,
        on_sample: SampleCallback | None = None,
        on_problem: ProblemCallback | None = None,
        backoff_s: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 30.0),
        queue_size: int = 1000,
    ) -> None:
        self.host = host
        self.runner = runner
        self.interval_s = interval_s
        self.gpus = list(gpus) if gpus is not None else None
        self.on_sample = on_sample
        self.on_problem = on_problem
        self.backoff_s = backoff_s or (1.0,)
        self.skipped_lines = 0  # lines that were not a sample
        self.restarts = 0
        self.last_error: str | None = None  # the current outage's reason, None while healthy
        self.unavailable: str | None = None  # set when the host has no telemetry at all
        self._latest: dict[int, GpuSample] = {}
        self._queue: asyncio.Queue[GpuSample | None] = asyncio.Queue(maxsize=queue_size)
        self._task: asyncio.Task[None] | None = None
        self._agent: AgentProcess | None = None
        self._reported = False

    def agent_args(self) -> list[str]:
        args = ["--interval", f"{self.interval_s:g}", "--count", "0"]
        if self.gpus:
            args += ["--gpus", ",".join(str(g) for g in self.gpus)]
        return args

    def start(self) -> None:
        """Start reading in the background (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=f"telemetry-{self.host}")

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._agent is not None:
            await self._agent.terminate()
            self._agent = None
        self._put(None)  # end any ``async for``

    def latest(self) -> dict[int, GpuSample]:
        """The newest sample of each GPU seen so far (a copy)."""
        return dict(self._latest)

    def __aiter__(self) -> AsyncIterator[GpuSample]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[GpuSample]:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            yield item

    def _put(self, item: GpuSample | None) -> None:
        while True:
            try:
                self._queue.put_nowait(item)
                return
            except asyncio.QueueFull:
                with contextlib.suppress(asyncio.QueueEmpty):
                    self._queue.get_nowait()

    def _problem(self, text: str) -> None:
        self.last_error = text
        if self._reported:
            return
        self._reported = True
        log.warning("telemetry %s: %s", self.host, text)
        if self.on_problem is not None:
            try:
                self.on_problem(text)
            except Exception:
                log.exception("telemetry on_problem callback failed")

    async def _run(self) -> None:
        failures = 0
        while True:
            error_line: str | None = None
            got_sample = False
            try:
                try:
                    self._agent = await self.runner.start(self.agent_args())
                except NoTelemetryError as e:
                    self.unavailable = str(e) or "no GPU telemetry"
                    return
                async for line in self._agent.lines():
                    kind, payload = self._parse(line)
                    if kind == "sample":
                        assert isinstance(payload, GpuSample)
                        got_sample = True
                        self._deliver(payload)
                    elif kind == "error":
                        error_line = str(payload)
                code = await self._agent.wait()
                stderr = self._agent.stderr_tail()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the transport failed (SSH down, no python on the host)
                code, stderr = None, ""
                error_line = f"cannot run the telemetry agent: {type(e).__name__}: {e}"
            finally:
                if self._agent is not None:
                    with contextlib.suppress(Exception):
                        await self._agent.terminate()
                    self._agent = None
            failures = 0 if got_sample else failures + 1
            delay = self.backoff_s[min(max(failures - 1, 0), len(self.backoff_s) - 1)]
            reason = error_line or (
                f"agent exited with code {code}"
                + (f": {stderr.splitlines()[-1]}" if stderr else "")
            )
            if code == EXIT_NO_NVML and error_line:
                reason = f"no GPU telemetry: {error_line}"
            self._problem(f"{reason}; restarting in {format_duration(delay)}")
            self.restarts += 1
            await asyncio.sleep(delay)

    def _parse(self, line: str) -> tuple[str, GpuSample | str | None]:
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError("not an object")
            if "error" in obj:
                if "gpu" in obj:  # one GPU failed (fell off the bus); the others go on
                    self._problem(f"GPU {obj['gpu']}: {obj['error']}")
                    return "skip", None
                return "error", str(obj["error"])
            return "sample", GpuSample.from_json(self.host, obj)
        except (ValueError, TypeError, KeyError):
            self.skipped_lines += 1
            return "skip", None

    def _deliver(self, sample: GpuSample) -> None:
        if self.last_error is not None:
            self.last_error = None
            self._reported = False  # a later outage is reported again
        self._latest[sample.gpu] = sample
        self._put(sample)
        if self.on_sample is not None:
            try:
                self.on_sample(sample)
            except Exception:
                log.exception("telemetry on_sample callback failed")


# --- waiting for free GPUs ---------------------------------------------------------------------


class GpusNotFreeError(ServiceError):
    """GPUs still held when a group needs them; ``busy`` maps GPU id to what holds it."""

    def __init__(self, reason: str, busy: dict[int, str]) -> None:
        super().__init__(reason)
        self.busy = busy


def gpu_state(sample: GpuSample | None, idle_mem_mib: float) -> str | None:
    """Why a GPU is not free, or None when it is: no compute process and memory near idle."""
    if sample is None:
        return "no telemetry"
    mem = sample.mem_used_mib
    total = f"/{sample.mem_total_mib:.0f}" if sample.mem_total_mib is not None else ""
    used = f"{mem:.0f}{total} MiB used" if mem is not None else "memory unknown"
    if sample.processes:
        held = ", ".join(p.describe() for p in sample.processes)
        return f"{used}, held by {held}"
    if mem is not None and mem > idle_mem_mib:
        return f"{used} with no process listed (another container, or memory still freeing)"
    return None


async def wait_gpus_free(
    latest_samples_provider: Callable[[], Mapping[int, GpuSample]],
    gpu_ids: Iterable[int],
    timeout_s: float,
    idle_mem_mib: float = 1024,
    *,
    poll_s: float = 0.25,
    host: str = "",
    telemetry_down: Callable[[], str | None] | None = None,
    outage_grace_s: float = 15.0,
) -> bool:
    """Return True once every GPU in ``gpu_ids`` is free in a sample taken after this call
    began.

    A sample from before the call does not count: it may predate the server that just
    started or stopped. Raises GpusNotFreeError naming each busy GPU, its memory and the
    process holding it. When ``telemetry_down`` reports an outage (the agent died and keeps
    failing) and no fresh sample came for ``outage_grace_s``, it returns False: nothing can
    be verified, and a missing reading is not a busy GPU.
    """
    gpus = list(gpu_ids)
    began = time.monotonic()
    deadline = began + timeout_s
    while True:
        latest = latest_samples_provider()
        busy: dict[int, str] = {}
        unread = 0
        for g in gpus:
            sample = latest.get(g)
            if sample is not None and sample.received < began:
                sample = None
            unread += sample is None
            why = gpu_state(sample, idle_mem_mib)
            if why is not None:
                busy[g] = why
        if not busy:
            return True
        now = time.monotonic()
        if (
            telemetry_down is not None
            and unread == len(busy)
            and now - began >= min(outage_grace_s, timeout_s)
            and telemetry_down()
        ):
            return False
        if now >= deadline:
            where = f" on {host}" if host else ""
            what = "; ".join(f"GPU {g}: {why}" for g, why in busy.items())
            n = "GPU" if len(busy) == 1 else "GPUs"
            raise GpusNotFreeError(
                f"{n} {', '.join(map(str, busy))}{where} not free after "
                f"{format_duration(timeout_s)}: {what}",
                busy,
            )
        await asyncio.sleep(poll_s)

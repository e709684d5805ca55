"""Campaigns over a real sshd for the outage, crash and abort tests: a plan whose servers are
the simulator on the far side, the campaign as a headless process (as a user runs it), waits
on its event log, and the tally every scenario prints: cells done and failed (through the one
reducer of the log) and servers of the plan still running on the host."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conftest import ROOT, free_port

from specbench_tui.results.files import read_events
from specbench_tui.results.state import CampaignState

PLAN = """\
[campaign]
name = "{name}"
baseline = "ar"

[hosts.box]
ssh = "{alias}"
gpus = 4
services = "{services}"
workdir = {workdir}
reconnect_timeout = "{reconnect_timeout}"

[server]
python = {python}
model = {model}
port = {port}
launch = ["{{python}}", "-m", "specbench_tui.sim", "--model-path", "{{model}}", "--tp-size",
          "{{tp}}", "--host", "127.0.0.1", "--port", "{{port}}", "--speed", "50",
          "--sim-require-model"]
args = {args}
ready_timeout = "{ready_timeout}"
env = {env}

[configs.ar]
[configs.dflash]
args = ["--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "8"]

[matrix]
configs = ["ar", "dflash"]
tp = {tp}

[workloads.single]
kind = "single"
prompts = ["chat"]
samples = {samples}
max_tokens = {max_tokens}
timeout = "{timeout}"
"""


def toml_str(value: str) -> str:
    """A TOML basic string holding ``value`` exactly (JSON's escapes are TOML's)."""
    return json.dumps(value, ensure_ascii=False)


@dataclass
class PlanValues:
    name: str
    alias: str
    services: str
    workdir: str
    model: str
    python: str = sys.executable
    port: int = field(default_factory=free_port)
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    tp: list[int] = field(default_factory=lambda: [1, 2])
    samples: int = 2
    max_tokens: list[int] = field(default_factory=lambda: [24])
    timeout: str = "60s"
    ready_timeout: str = "120s"
    reconnect_timeout: str = "2m"

    def text(self) -> str:
        env = "{ " + ", ".join(f"{k} = {toml_str(v)}" for k, v in self.env.items()) + " }"
        return PLAN.format(
            name=self.name,
            alias=self.alias,
            services=self.services,
            workdir=toml_str(self.workdir),
            model=toml_str(self.model),
            python=toml_str(self.python),
            port=self.port,
            args="[" + ", ".join(toml_str(a) for a in self.args) + "]",
            env=env if self.env else "{}",
            tp=list(self.tp),
            samples=self.samples,
            max_tokens=list(self.max_tokens),
            timeout=self.timeout,
            ready_timeout=self.ready_timeout,
            reconnect_timeout=self.reconnect_timeout,
        )

    def write(self, path: Path) -> Path:
        path.write_text(self.text())
        return path


class HeadlessRun:
    """One ``specbench-tui PLAN --headless`` process and its results directory."""

    def __init__(self, plan: Path, results: Path, ssh_config: Path, name: str, *extra: str) -> None:
        self.root = results / name
        self.events_path = self.root / "events.jsonl"
        self.out_path = results.parent / f"{name}.headless.{time.monotonic_ns()}.out"
        self._out = open(self.out_path, "w")  # noqa: SIM115 (closed in wait)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "specbench_tui",
                str(plan),
                "--headless",
                "--results",
                str(results),
                "--ssh-config",
                str(ssh_config),
                *extra,
            ],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        self._seen = 0  # events already read by a previous run of the same directory
        if self.events_path.exists():
            self._seen = len(self.events_path.read_text().splitlines())

    def events(self) -> list[dict[str, Any]]:
        """The events of this run so far (earlier runs of the directory left out)."""
        if not self.events_path.exists():
            return []
        lines = self.events_path.read_text().splitlines()[self._seen :]
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                break  # a line being written
        return out

    def wait_for(
        self, what: str, predicate: Callable[[list[dict[str, Any]]], bool], timeout_s: float = 120
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate(self.events()):
            if self.proc.poll() is not None:
                raise AssertionError(f"the campaign ended before {what}:\n{self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}:\n{self.output()}")
            time.sleep(0.02)

    def wait_event(self, event: str, timeout_s: float = 120, **fields: Any) -> dict[str, Any]:
        def match(e: dict[str, Any]) -> bool:
            return e["event"] == event and all(e.get(k) == v for k, v in fields.items())

        self.wait_for(f"{event} {fields}", lambda evs: any(match(e) for e in evs), timeout_s)
        return next(e for e in self.events() if match(e))

    def wait_log(self, group: str, text: str, timeout_s: float = 120) -> None:
        """Until the group's local server log holds ``text`` (the engine's own lines too)."""
        log = self.root / "logs" / f"{group}.log"
        deadline = time.monotonic() + timeout_s
        while not (log.exists() and text in log.read_text(errors="replace")):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} in {log}:\n{self.output()}")
            time.sleep(0.02)

    def wait(self, timeout_s: float = 300) -> int:
        try:
            code = self.proc.wait(timeout_s)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
            self._out.close()
        return code

    def kill9(self) -> None:
        """SIGKILL this tool, as a crash or a power cut of the machine running it would."""
        self.proc.send_signal(signal.SIGKILL)
        self.wait(30)

    def output(self) -> str:
        if not self._out.closed:
            self._out.flush()
        return self.out_path.read_text(errors="replace")


def servers_left(marker: str) -> list[int]:
    """Live simulated servers (zombies and their shell wrappers aside) whose command line
    holds ``marker``: the plan's own, on this machine or in the systemd namespace (its
    processes show in this machine's /proc too)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
            state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state == "Z" or os.path.basename(argv[0]) in (b"sh", b"bash", b"env"):
            continue  # a dead one, or the shell wrapper around a server (counted once)
        if b"specbench_tui.sim" in argv and marker.encode() in b"\0".join(argv):
            found.append(int(cmdline.parent.name))
    return found


def wait_servers_gone(marker: str, timeout_s: float = 15.0) -> list[int]:
    """Servers still there after a short grace (a stop's last moments, a zombie reaped)."""
    deadline = time.monotonic() + timeout_s
    while (left := servers_left(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


# Every scenario's tally, printed again at the end of the run (tests/conftest.py), so that
# `pytest -q` shows them for passing tests too.
SCENARIO_LINES: list[str] = []


def tally(root: Path, scenario: str, marker: str, *, settle: bool = True) -> tuple[int, int, int]:
    """Print and return (cells done, cells failed, servers left on the host) for a results
    directory: the figures every scenario must end with (all done, none failed, none left)."""
    state = CampaignState.from_events(read_events(root / "events.jsonl"))
    left = wait_servers_gone(marker) if settle else servers_left(marker)
    n = state.counts
    line = (
        f"{scenario}: cells done {n.done}/{n.total}, failed {n.failed}; "
        f"servers left running on the host: {len(left)}"
        + (f" (pids {', '.join(map(str, left))})" if left else "")
    )
    print(f"\n[scenario] {line}", flush=True)
    SCENARIO_LINES.append(line)
    return n.done, n.failed, len(left)


def kill_pids(pids: list[int]) -> None:
    """Clean up after a failed test: the plan's own servers, by pid."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def events_of(root: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]


@dataclass
class Outage:
    """How a test takes the host's sshd away and brings it back (same port, same key)."""

    kill: Callable[[], None]
    restore: Callable[[], None]


def ride_out(
    run: HeadlessRun, outage: Outage, phase: str, seconds: float, groups: tuple[str, str]
) -> None:
    """Kill the host's sshd when the campaign is in ``phase`` (``cell``: the first group's
    cell runs; ``stop``: the first group's server is being stopped; ``start``: the second
    group is starting), and start it again ``seconds`` later."""
    first, second = groups
    if phase == "cell":
        run.wait_event("cell_started", group=first)
    elif phase == "stop":
        run.wait_log(first, "----- stopping")
    elif phase == "start":
        run.wait_event("group_started", group=second)
    else:
        raise ValueError(phase)
    outage.kill()
    t0 = time.monotonic()
    try:
        run.wait_event("host_state", state="reconnecting", timeout_s=30)
        time.sleep(max(0.0, seconds - (time.monotonic() - t0)))
    finally:
        outage.restore()
    print(f"\n[outage] sshd killed {phase}, back after {time.monotonic() - t0:.1f}s", flush=True)


def check_outage_outcome(events: list[dict[str, Any]], phase: str) -> None:
    """What every outage scenario must show in its log besides all cells done: the host
    reported away and back, never unreachable, no server start failed, and a cell cut by the
    outage set aside (its attempt kept) and run again."""
    states = [e["state"] for e in events if e["event"] == "host_state"]
    assert "reconnecting" in states and states[-1] == "connected", states
    assert "unreachable" not in states, states
    assert not [e for e in events if e["event"] in ("service_failed", "cell_failed")], [
        e for e in events if e["event"] in ("service_failed", "cell_failed")
    ]
    queued = [e for e in events if e["event"] == "cell_queued"]
    if phase == "cell":
        assert [q["by"] for q in queued] == ["host unreachable"], queued
        (again,) = [e for e in events if e["event"] == "cell_finished"][:1]
        assert again["cell_id"] == queued[0]["cell_id"] and again["attempt"] == 2
    else:
        assert not queued, queued


def crash_and_resume(
    values: PlanValues,
    plan: Path,
    results: Path,
    ssh_config: Path,
    groups: tuple[str, str],
    mode: str,
) -> None:
    """kill -9 this tool while the first group's cell runs; resume with the same plan (the
    server it left is taken over) and kill -9 it again in the second group's cell; resume with
    the plan's port changed (the server left now differs from what the plan starts: stopped).
    Every run ends with its tally printed; the last must have every cell done, none left."""
    first, second = groups
    run = HeadlessRun(values.write(plan), results, ssh_config, values.name)
    run.wait_event("cell_started", group=first)
    run.kill9()
    assert tally(run.root, f"{mode}, kill -9 mid-cell", values.model, settle=False)[2] == 1
    # the preflight sees the server left there as what it is, not as a port taken
    cli = [sys.executable, "-m", "specbench_tui", str(plan), "--ssh-config", str(ssh_config)]
    check = subprocess.run(
        [*cli, "--dry-run", "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"{first}: a server left running by an earlier run" in check.stdout
    run = HeadlessRun(values.write(plan), results, ssh_config, values.name)
    run.wait_event("cell_finished", group=first)
    notes = [e["text"] for e in run.events() if e["event"] == "notice"]
    assert any(n.startswith(f"{first}: took over") and "healthy" in n for n in notes), notes
    run.wait_event("cell_started", group=second)
    run.kill9()
    assert tally(run.root, f"{mode}, resumed, kill -9 again", values.model, settle=False) == (
        1,
        0,
        1,
    )
    values.port = free_port()
    run = HeadlessRun(values.write(plan), results, ssh_config, values.name)
    code = run.wait(300)
    done, failed, left = tally(run.root, f"{mode}, resumed with another port", values.model)
    assert code == 0, run.output()
    events = run.events()
    notes = [e["text"] for e in events if e["event"] == "notice"]
    assert any(
        f"stopped {second}'s server left running by an earlier run" in n and "differs" in n
        for n in notes
    ), notes
    assert not [e for e in events if e["event"] in ("service_failed", "cell_failed")]
    assert (done, failed, left) == (2, 0, 0)

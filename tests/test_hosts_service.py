"""ProcessService against real child processes: a tiny HTTP server that behaves like a
starting SGLang server (503 on /health_generate, then the ready line and 200)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specbench_tui.durations import format_duration
from specbench_tui.hosts.process import ProcessService, port_in_use
from specbench_tui.hosts.service import READY_LINE, ServiceError, describe_exit
from specbench_tui.results.cells import ServiceGroup

pytestmark = pytest.mark.system

SERVER = r"""
import http.server, os, signal, subprocess, sys, threading, time

port, delay, mode = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
print(f"starting on port {port} mode={mode} gpus={os.environ.get('CUDA_VISIBLE_DEVICES')}",
      flush=True)
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode == "kill-own-tree":  # as some engines shut down: SIGTERM, then SIGKILL to themselves
    signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGKILL))
if mode == "worker":
    worker = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
    print(f"worker pid {worker.pid}", flush=True)
if mode == "noport":  # starts, says so, and never binds its port
    time.sleep(60)
if mode == "exit":
    time.sleep(0.2)
    print("Loading weights\rLoading weights 50%\rLoading weights 100%", flush=True)
    print("RuntimeError: CUDA error: out of memory", flush=True)
    sys.exit(1)
t0 = time.monotonic()

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = mode != "never" and time.monotonic() - t0 >= delay
        if mode == "openai" and self.path == "/health_generate":
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200 if ok else 503)
        self.end_headers()
        self.wfile.write(b"ok" if ok else b"loading")
    def log_message(self, *a):
        pass

srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
def announce():
    if mode == "never":
        return
    time.sleep(delay)
    print("The server is fired up and ready to roll!", flush=True)
threading.Thread(target=announce, daemon=True).start()
srv.serve_forever()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server_script(tmp_path: Path) -> Path:
    p = tmp_path / "server.py"
    p.write_text(SERVER)
    return p


def make_group(
    script: Path, port: int, delay: float = 0.3, mode: str = "ok", api: str = "sglang"
) -> ServiceGroup:
    return ServiceGroup(
        id="local.test.tp1",
        host="local",
        host_kind="local",
        config="test",
        label="test",
        tp=1,
        gpu_ids=(0,),
        port=port,
        command=(sys.executable, str(script), str(port), str(delay), mode),
        env=(("CUDA_VISIBLE_DEVICES", "0"),),
        api=api,  # type: ignore[arg-type]
        ready_timeout_s=30.0,
        speculative=False,
    )


async def test_start_ready_stop_and_log(server_script: Path, tmp_path: Path) -> None:
    port = free_port()
    lines: list[str] = []
    log_path = tmp_path / "logs" / "local.test.tp1.log"
    svc = ProcessService(make_group(server_script, port, delay=0.5), log_path, lines.append)
    await svc.start()
    assert svc.alive() and svc.exit_code is None
    assert svc.base_url == f"http://127.0.0.1:{port}"
    startup = await svc.wait_ready()
    assert 0.4 < startup < 10
    # Health and the ready line come from two threads of the server, and the line reaches
    # the callback through a pipe read by its own task: either may come first.
    for _ in range(50):
        if any(READY_LINE in line for line in lines):
            break
        await asyncio.sleep(0.1)
    assert any(READY_LINE in line for line in lines)
    assert "gpus=0" in lines[0]  # the group's env reached the server
    await svc.stop(grace_s=5)
    assert not svc.alive()
    assert svc.exit_code == -15
    assert not port_in_use(port)
    text = log_path.read_text()
    assert "mode=ok gpus=0" in text and READY_LINE in text
    assert "starting local.test.tp1" in text and "was killed by SIGTERM" in text
    # a second start appends to the same log rather than truncating it
    await svc.start()
    await svc.wait_ready()
    await svc.stop(grace_s=5)
    assert log_path.read_text().count(READY_LINE) == 2


async def test_a_port_answered_by_another_process_is_refused(
    server_script: Path, tmp_path: Path
) -> None:
    # The server never binds (as one dying on EADDRINUSE would not); a healthy stranger takes
    # the port after the start: its answers must not pass for this server's readiness.
    port = free_port()
    records = tmp_path / "servers"
    svc = ProcessService(
        make_group(server_script, port, mode="noport"), tmp_path / "p.log", records=records
    )
    await svc.start()
    (record,) = records.glob("*.json")  # on record from the start
    stranger = subprocess.Popen([sys.executable, str(server_script), str(port), "0", "ok"])
    try:
        deadline = time.monotonic() + 10
        while not port_in_use(port) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        with pytest.raises(ServiceError) as exc:
            await svc.wait_ready(timeout_s=20)
        assert (
            f"port {port} answers for another process, not this server: pid {stranger.pid}"
            in exc.value.reason
        )
    finally:
        stranger.kill()
        stranger.wait()
        await svc.stop(grace_s=1)
    assert not record.exists()  # the stop saw nothing of it left


@pytest.mark.timing
async def test_early_exit_raises_at_once_with_tail(server_script: Path, tmp_path: Path) -> None:
    port = free_port()
    svc = ProcessService(make_group(server_script, port, mode="exit"), tmp_path / "x.log")
    await svc.start()
    t0 = time.monotonic()
    with pytest.raises(ServiceError) as exc:
        await svc.wait_ready(timeout_s=30)
    assert time.monotonic() - t0 < 10.0  # not the 30 s timeout (room for load 10)
    err = exc.value
    assert "exited with code 1 during start-up" in err.reason
    assert err.log_tail[-1] == "RuntimeError: CUDA error: out of memory"
    assert "Loading weights 100%" in err.log_tail  # progress-bar redraws kept as their last state
    assert svc.exit_code == 1
    await svc.stop(grace_s=1)


async def test_never_ready_times_out_with_reason(server_script: Path, tmp_path: Path) -> None:
    port = free_port()
    svc = ProcessService(make_group(server_script, port, mode="never"), tmp_path / "n.log")
    await svc.start()
    try:
        with pytest.raises(ServiceError) as exc:
            await svc.wait_ready(timeout_s=1.5)
        reason = exc.value.reason
        assert "not healthy after 1.5s (ready_timeout)" in reason
        assert "HTTP 503" in reason
        assert svc.alive()  # a timeout leaves the decision to stop it to the caller
    finally:
        await svc.stop(grace_s=2)


async def test_sigterm_ignored_then_sigkill(server_script: Path, tmp_path: Path) -> None:
    port = free_port()
    svc = ProcessService(
        make_group(server_script, port, delay=0.1, mode="ignore-term"), tmp_path / "k.log"
    )
    await svc.start()
    await svc.wait_ready(timeout_s=10)
    t0 = time.monotonic()
    await svc.stop(grace_s=0.5)
    assert 0.45 < time.monotonic() - t0 < 5
    assert svc.exit_code == -9
    assert not port_in_use(port)
    assert "ignored SIGTERM; sending SIGKILL" in (tmp_path / "k.log").read_text()
    assert (
        "was killed by SIGKILL (sent by this tool after the grace period)"
        in (tmp_path / "k.log").read_text()
    )


async def test_a_sigkill_the_tool_did_not_send_is_said_to_be_the_servers(
    server_script: Path, tmp_path: Path
) -> None:
    """A server that ends its own tree with SIGKILL after the tool's SIGTERM: its log's stop
    line said 'was killed by SIGKILL' as though the tool had killed it."""
    port = free_port()
    svc = ProcessService(
        make_group(server_script, port, delay=0.1, mode="kill-own-tree"), tmp_path / "o.log"
    )
    await svc.start()
    await svc.wait_ready(timeout_s=10)
    await svc.stop(grace_s=10)
    assert svc.exit_code == -9
    log = (tmp_path / "o.log").read_text()
    assert "ignored SIGTERM" not in log
    assert (
        "was killed by SIGKILL (not sent by this tool, which sent SIGTERM: the server itself "
        "or the host ended it)"
    ) in log, log


async def test_stop_kills_workers_left_in_the_group(server_script: Path, tmp_path: Path) -> None:
    port = free_port()
    lines: list[str] = []
    svc = ProcessService(
        make_group(server_script, port, delay=0.1, mode="worker"), tmp_path / "w.log", lines.append
    )
    await svc.start()
    await svc.wait_ready(timeout_s=10)
    worker = int(next(line for line in lines if line.startswith("worker pid")).split()[-1])
    assert pid_running(worker)
    await svc.stop(grace_s=0.5)
    await asyncio.sleep(0.1)
    assert not pid_running(worker)


def pid_running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for a PID 1 that may never reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


async def test_port_in_use_is_refused(server_script: Path, tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", port))
        blocker.listen()
        svc = ProcessService(make_group(server_script, port), tmp_path / "p.log")
        with pytest.raises(ServiceError) as exc:
            await svc.start()
    reason = exc.value.reason
    assert f"port {port} already in use by pid {os.getpid()}" in reason
    assert not svc.alive()


async def test_missing_program_is_a_clear_error(tmp_path: Path) -> None:
    group = make_group(tmp_path / "none.py", free_port())
    group = ServiceGroup(**{**group.__dict__, "command": ("/nonexistent/python", "-V")})
    svc = ProcessService(group, tmp_path / "m.log")
    with pytest.raises(ServiceError, match="cannot run '/nonexistent/python'"):
        await svc.start()
    await svc.stop(grace_s=0.1)  # harmless when never started


async def test_openai_api_falls_back_to_other_health_paths(
    server_script: Path, tmp_path: Path
) -> None:
    port = free_port()
    group = make_group(server_script, port, delay=0.2, mode="openai", api="openai")
    svc = ProcessService(group, tmp_path / "o.log")
    await svc.start()
    try:
        await svc.wait_ready(timeout_s=10)
        assert await svc.check_health()
    finally:
        await svc.stop(grace_s=2)


async def test_wait_ready_before_start(server_script: Path, tmp_path: Path) -> None:
    svc = ProcessService(make_group(server_script, free_port()), tmp_path / "b.log")
    with pytest.raises(ServiceError, match="before start"):
        await svc.wait_ready(timeout_s=1)


def test_a_stop_line_says_who_sent_the_signal() -> None:
    from specbench_tui.hosts.service import describe_stop

    assert describe_stop(-9, ("SIGTERM", "SIGKILL")) == (
        "was killed by SIGKILL (sent by this tool after the grace period)"
    )
    assert describe_stop(-15, ("SIGTERM",)) == "was killed by SIGTERM (sent by this tool)"
    assert describe_stop(-9, ("SIGTERM",)).endswith(
        "(not sent by this tool, which sent SIGTERM: the server itself or the host ended it)"
    )
    # It had died on its own before the stop (a scheduler's fault: its own tree killed).
    assert describe_stop(-9, ()).endswith(
        "(not sent by this tool, which had sent none: the server itself or the host ended it)"
    )
    assert describe_stop(0, ()) == "exited with code 0"


def test_wording() -> None:
    assert format_duration(900) == "15m"
    assert format_duration(90) == "90s"
    assert format_duration(1.5) == "1.5s"
    assert format_duration(5400) == "1h30m"
    assert describe_exit(1) == "exited with code 1"
    assert describe_exit(-9) == "was killed by SIGKILL"

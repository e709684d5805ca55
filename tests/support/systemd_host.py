"""A real systemd (PID 1 of a private PID + mount namespace) with sshd inside, for the tests.

``systemd_ns.sh`` beside this file boots it (its header says how, and what keeps the host
safe); this fixture starts one per test session and checks, before the first test and after
the stop, that canary files of its own in the host's /tmp and /var/tmp survived. Two SSH
aliases reach the same systemd: ``sdns`` (a plain login: the real GPU path, which on these
machines finds no NVIDIA driver, no pynvml in ``python3`` and no nvidia-smi) and ``sdns-sim``
(sessions also get SPECBENCH_SIM_*: the telemetry agent reads simulated GPUs from
``simgpu``, where simulated servers write their state when their env points there; and the
link fault shims of ``link_faults.py`` first on their PATH). A test may kill the namespace's
sshd and start it again from outside (``kill_sshd``, ``start_sshd``, through ``nsenter``).

Root is required (namespaces, mounts); on a developer's machine without it, or without the
system programs, the tests skip; under CI=true they fail.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import IN_CI, free_port, need_program

from specbench_tui.hosts.host import FAKE_NVML_PATH
from specbench_tui.hosts.ssh import SshConnection
from support.link_faults import STD_PATH, install_shims

SCRIPT = Path(__file__).with_name("systemd_ns.sh")


@dataclass(frozen=True)
class SystemdHost:
    root: Path  # the instance directory, the one host path writable inside
    port: int  # alias "sdns"
    sim_port: int  # alias "sdns-sim"
    config: Path  # OpenSSH client config with both aliases
    known_hosts: Path
    client_key: Path
    simgpu: Path

    def connect_args(self) -> dict[str, object]:
        return {
            "config": self.config,
            "known_hosts": self.known_hosts,
            "client_keys": [self.client_key],
            "use_agent": False,
        }

    def connection(self, alias: str = "sdns") -> SshConnection:
        return SshConnection(alias, **self.connect_args())  # type: ignore[arg-type]

    def ssh(self, command: str, alias: str = "sdns", check: bool = True) -> str:
        """Run a shell command inside (OpenSSH client); its stdout."""
        res = subprocess.run(
            ["ssh", "-F", str(self.config), alias, command],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check and res.returncode != 0:
            raise AssertionError(f"{command!r} failed ({res.returncode}): {res.stderr}")
        return res.stdout

    def nsenter(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """Run a command in the namespace's mount and pid namespaces, from outside: what
        must work while its sshd is down."""
        pid = (self.root / "pid").read_text().strip()
        return subprocess.run(
            ["nsenter", "-t", pid, "-m", "-p", "--", *argv],
            capture_output=True,
            text=True,
            timeout=60,
        )

    def kill_sshd(self) -> None:
        """SIGKILL the namespace's sshd and every session it serves (its unit's cgroup): the
        links drop at once; transient units of servers live in cgroups of their own."""
        res = self.nsenter("systemctl", "kill", "--signal=KILL", "sdns-sshd.service")
        assert res.returncode == 0, res.stderr

    def start_sshd(self) -> None:
        """Start the namespace's sshd again (same ports, same host key)."""
        self.nsenter("systemctl", "reset-failed", "sdns-sshd.service")
        res = self.nsenter("systemctl", "start", "sdns-sshd.service")
        assert res.returncode == 0, res.stderr
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", self.sim_port), 0.2).close()
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            assert time.monotonic() < deadline, "the namespace's sshd did not come back"
            time.sleep(0.05)

    def active_units(self, pattern: str = "specbench-*") -> list[str]:
        """Units matching ``pattern`` that are active (or starting, or stopping)."""
        out = self.ssh(
            f"systemctl list-units --all --plain --no-legend --no-pager '{pattern}'", check=False
        )
        return [
            w[0]
            for w in (line.split() for line in out.splitlines())
            if len(w) >= 3 and w[2] in ("active", "activating", "deactivating", "reloading")
        ]

    def install_unit(self, name: str, text: str) -> None:
        """A unit file in /run/systemd/system (the only writable unit path inside)."""
        self.ssh(f"cat > /run/systemd/system/{name} <<'EOF'\n{text}\nEOF\nsystemctl daemon-reload")


def _need_system() -> None:
    if os.geteuid() != 0:
        if IN_CI:
            pytest.fail("the real systemd tests need root under CI")
        pytest.skip("the real systemd tests need root (namespaces and mounts)")
    for program in (
        "unshare",
        "setpriv",
        "findmnt",
        "nsenter",
        "ss",
        "ssh",
        "ssh-keygen",
        "dbus-daemon",
    ):
        need_program(program)
    for path in ("/usr/sbin/sshd", "/lib/systemd/systemd"):
        if not os.path.exists(path):
            if IN_CI:
                pytest.fail(f"{path} is required under CI but is not installed")
            pytest.skip(f"{path} not installed")


def _canaries(tag: str) -> list[Path]:
    return [
        Path("/tmp") / f".specbench-canary-{tag}",
        Path("/var/tmp") / f".specbench-canary-{tag}",
    ]


def _check_canaries(canaries: list[Path], when: str) -> None:
    gone = [str(c) for c in canaries if not c.exists()]
    if gone:
        pytest.exit(
            f"SAFETY: host canary files {gone} vanished {when}; stop and investigate before "
            "running these tests again",
            returncode=3,
        )


@pytest.fixture(scope="session")
def systemd_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SystemdHost]:
    _need_system()
    root = tmp_path_factory.mktemp("sdns")
    simgpu = root / "simgpu"
    simgpu.mkdir()
    (root / "sim.env").write_text(
        f"SPECBENCH_SIM_NVML={simgpu}\nSPECBENCH_SIM_NVML_MODULE={FAKE_NVML_PATH}\n"
        f"SPECBENCH_SIM_GPUS=4\nPATH={install_shims(root)}:{STD_PATH}\n"
    )
    canaries = _canaries(uuid.uuid4().hex[:12])
    for c in canaries:
        c.write_text("must survive the namespaced systemd\n")
    port, sim_port = free_port(), free_port()
    start = subprocess.run(
        [str(SCRIPT), "start", str(root), str(port), str(sim_port)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    _check_canaries(canaries, "during the boot")
    if start.returncode != 0:
        pytest.fail(f"systemd did not boot: {start.stderr[-3000:]}")
    host = SystemdHost(
        root=root,
        port=port,
        sim_port=sim_port,
        config=root / "ssh_config",
        known_hosts=root / "known_hosts",
        client_key=root / "client_key",
        simgpu=simgpu,
    )
    try:
        yield host
    finally:
        stop = subprocess.run(
            [str(SCRIPT), "stop", str(root)], capture_output=True, text=True, timeout=120
        )
        _check_canaries(canaries, "while systemd ran or stopped")
        for c in canaries:
            c.unlink(missing_ok=True)
        if stop.returncode != 0:
            print(stop.stderr, file=sys.stderr)
            pytest.fail(f"systemd did not stop cleanly: {stop.stderr[-2000:]}")

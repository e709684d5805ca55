"""A real OpenSSH server on 127.0.0.1 for the SSH transport tests.

It runs as the current user with a host key, a client key, a known_hosts file and a client
config generated here, so the tests exercise the real protocol (host-key check, public-key
login, port forwarding, exec channels) without touching the user's own ~/.ssh.

Two ports, two aliases. ``sbtest``: sessions see simulated GPUs (sshd's ``SetEnv`` points the
telemetry agent at the fake NVML and servers at its state directory), for tests that need GPUs
to be busy or free. ``sbplain``: a plain login, nothing injected: the real GPU path, which on
these machines meets a ``python3`` without pynvml, no NVIDIA driver and no nvidia-smi.

``sshd`` is one server for the whole session. ``killable_sshd`` is a server of a test's own
that the test may kill, sessions and all, as a crashed or restarted sshd would be, and start
again on the same ports with the same host key; its ``sbtest`` sessions also find the link
fault shims of ``support/link_faults.py`` first on their PATH.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import free_port, need_program
from support.link_faults import STD_PATH, install_shims

from specbench_tui.hosts.host import FAKE_NVML_PATH


@dataclass
class Sshd:
    port: int
    root: Path
    config: Path  # client config with the aliases "sbtest" and "sbplain"
    known_hosts: Path
    client_key: Path
    host_pub: str
    plain_port: int = 0
    sshd_bin: str = "/usr/sbin/sshd"
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    alias = "sbtest"
    plain_alias = "sbplain"

    def connect_args(self) -> dict[str, object]:
        return {
            "config": self.config,
            "known_hosts": self.known_hosts,
            "client_keys": [self.client_key],
            "use_agent": False,
        }

    # --- the server process -------------------------------------------------------------

    def start(self) -> None:
        """Start sshd (again) on the same ports and host key; returns once it listens."""
        assert self.proc is None or self.proc.poll() is not None, "sshd already runs"
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", exist_ok=True)  # privilege separation directory
        with open(self.root / "sshd.log", "ab") as log:
            self.proc = subprocess.Popen(
                [self.sshd_bin, "-D", "-e", "-f", str(self.root / "sshd_config")],
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"sshd did not start: {(self.root / 'sshd.log').read_text()[-2000:]}")
            time.sleep(0.05)

    def session_pids(self) -> list[int]:
        """The sshd processes serving connections (below the listener, by pid)."""
        if self.proc is None:
            return []
        parent: dict[int, int] = {}
        comm: dict[int, str] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                text = stat.read_text()
                pid = int(stat.parent.name)
                comm[pid] = text[text.index("(") + 1 : text.rindex(")")]
                parent[pid] = int(text[text.rindex(")") + 2 :].split()[1])
        below, frontier = set(), {self.proc.pid}
        while frontier:
            frontier = {p for p, pp in parent.items() if pp in frontier} - below
            below |= frontier
        return sorted(p for p in below if comm.get(p) == "sshd")

    def kill(self) -> None:
        """SIGKILL the listener and every session it serves: the links drop at once, as when
        sshd crashes or the host's network goes; what the sessions started with ``setsid``
        keeps running."""
        if self.proc is None or self.proc.poll() is not None:
            return
        sessions = self.session_pids()
        self.proc.send_signal(signal.SIGKILL)
        for pid in sessions:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(10)

    def drop_sessions(self) -> None:
        """SIGKILL the sessions only: every link drops, the listener takes the reconnect."""
        for pid in self.session_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def new_host_key(self) -> None:
        """Replace the host key (as a reinstalled host, or someone in between, would show);
        takes effect at the next start."""
        for suffix in ("", ".pub"):
            (self.root / f"host_ed25519{suffix}").unlink()
        _keygen(self.root / "host_ed25519")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "specbench-test", "-f", str(path)],
        check=True,
    )


def make_sshd(root: Path, *, shims: bool = False) -> Sshd:
    """Keys, configs and known_hosts for a server on two free ports, not started yet.
    ``shims``: the ``sbtest`` sessions find the link fault shims first on their PATH."""
    need_program("ssh-keygen")
    sshd_bin = "/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else need_program("sshd")
    host_key = root / "host_ed25519"
    client_key = root / "client_ed25519"
    _keygen(host_key)
    _keygen(client_key)
    (root / "authorized_keys").write_text((root / "client_ed25519.pub").read_text())
    port, plain_port = free_port(), free_port()
    user = (
        os.environ.get("USER")
        or subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    )
    # GPUs on the far side are simulated (no NVIDIA driver here): servers started over SSH
    # write GPU state there and the telemetry agent reads it through the fake NVML.
    simgpu = root / "simgpu"
    simgpu.mkdir()
    sim_gpus_env = (
        f"SPECBENCH_SIM_STATE={simgpu} SPECBENCH_SIM_NVML={simgpu} "
        f"SPECBENCH_SIM_NVML_MODULE={FAKE_NVML_PATH} SPECBENCH_SIM_GPUS=4"
    )
    if shims:
        sim_gpus_env += f" PATH={install_shims(root)}:{STD_PATH}"
    (root / "sshd_config").write_text(
        f"Port {port}\n"
        f"Port {plain_port}\n"
        "ListenAddress 127.0.0.1\n"
        f"HostKey {host_key}\n"
        f"PidFile {root / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {root / 'authorized_keys'}\n"
        "StrictModes no\n"
        "UsePAM no\n"
        "PubkeyAuthentication yes\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "PermitRootLogin yes\n"
        "AllowTcpForwarding yes\n"
        "MaxStartups 100:30:200\n"
        "MaxSessions 64\n"
        "LogLevel ERROR\n"
        f"Match LocalPort {port}\n"
        f"    SetEnv {sim_gpus_env}\n"
    )
    host_pub = (root / "host_ed25519.pub").read_text().split()
    (root / "known_hosts").write_text(
        "".join(f"[127.0.0.1]:{p} {host_pub[0]} {host_pub[1]}\n" for p in (port, plain_port))
    )
    (root / "ssh_config").write_text(
        "".join(
            f"Host {alias}\n  HostName 127.0.0.1\n  Port {p}\n  User {user}\n"
            f"  IdentityFile {client_key}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {root / 'known_hosts'}\n"
            for alias, p in (("sbtest", port), ("sbplain", plain_port))
        )
    )
    return Sshd(
        port=port,
        root=root,
        config=root / "ssh_config",
        known_hosts=root / "known_hosts",
        client_key=client_key,
        host_pub=" ".join(host_pub[:2]),
        plain_port=plain_port,
        sshd_bin=sshd_bin,
    )


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    server = make_sshd(tmp_path_factory.mktemp("sshd"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def killable_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    server = make_sshd(tmp_path_factory.mktemp("ksshd"), shims=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()

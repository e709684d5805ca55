"""A real OpenSSH server on 127.0.0.1 for the SSH transport tests.

It runs as the current user with a host key, a client key, a known_hosts file and a client
config generated here, so the tests exercise the real protocol (host-key check, public-key
login, port forwarding, exec channels) without touching the user's own ~/.ssh.

Two ports, two aliases. ``sbtest``: sessions see simulated GPUs (sshd's ``SetEnv`` points the
telemetry agent at the fake NVML and servers at its state directory), for tests that need GPUs
to be busy or free. ``sbplain``: a plain login, nothing injected: the real GPU path, which on
these machines meets a ``python3`` without pynvml, no NVIDIA driver and no nvidia-smi.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import free_port, need_program

from specbench_tui.hosts.host import FAKE_NVML_PATH


@dataclass(frozen=True)
class Sshd:
    port: int
    root: Path
    config: Path  # client config with the aliases "sbtest" and "sbplain"
    known_hosts: Path
    client_key: Path
    host_pub: str
    plain_port: int = 0

    alias = "sbtest"
    plain_alias = "sbplain"

    def connect_args(self) -> dict[str, object]:
        return {
            "config": self.config,
            "known_hosts": self.known_hosts,
            "client_keys": [self.client_key],
            "use_agent": False,
        }


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "specbench-test", "-f", str(path)],
        check=True,
    )


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    need_program("ssh-keygen")
    sshd_bin = "/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else need_program("sshd")
    root = tmp_path_factory.mktemp("sshd")
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
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", exist_ok=True)  # privilege separation directory
    log = open(root / "sshd.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sshd_bin, "-D", "-e", "-f", str(root / "sshd_config")], stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            import socket

            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"sshd did not start: {(root / 'sshd.log').read_text()[-2000:]}")
            time.sleep(0.05)
        yield Sshd(
            port=port,
            root=root,
            config=root / "ssh_config",
            known_hosts=root / "known_hosts",
            client_key=client_key,
            host_pub=" ".join(host_pub[:2]),
            plain_port=plain_port,
        )
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
        if proc.poll() is None:
            proc.kill()
        log.close()

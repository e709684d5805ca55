"""Ports this process's servers hold or are about to take, per network namespace.

Two plan hosts can be one machine (two sim hosts, a local host beside an SSH alias of this
machine, two SSH aliases of one sshd). A bind test says a port is free now, not that another
of our servers will not take it a moment later; a claim made in the same step as the test
does. Claims are keyed by the network namespace the port lives in (the kernel's boot id and
the namespace's inode), so hosts that are one machine see each other's claims and hosts
that merely share a name do not. The engine runs on one event loop: a claim is taken
between two awaits, never split by another group's.
"""

from __future__ import annotations

import functools
import socket
import threading
from pathlib import Path

# Run on a host to name the network namespace its ports live in: two lines, boot id then
# "net:[inode]" (a container has a namespace of its own, the machine's boot id).
NAMESPACE_PROBE = "cat /proc/sys/kernel/random/boot_id; readlink /proc/self/ns/net"

_claims: dict[tuple[str, int], str] = {}
_lock = threading.Lock()  # the engine is one loop; the lock only guards tests' threads


def namespace_key(probe_output: str) -> str | None:
    """The key for what ``NAMESPACE_PROBE`` printed, None when it printed too little."""
    lines = [line.strip() for line in probe_output.splitlines() if line.strip()]
    if len(lines) < 2 or not lines[1].startswith("net:"):
        return None
    return f"{lines[0]}/{lines[1]}"


@functools.cache
def local_machine() -> str:
    """This machine's key (its network namespace; the host name where /proc says nothing)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text()
        net = Path("/proc/self/ns/net").readlink()
    except OSError:
        return f"host:{socket.gethostname()}"
    return namespace_key(f"{boot}\n{net}") or f"host:{socket.gethostname()}"


def holder(machine: str, port: int) -> str | None:
    """Which server (group id) claimed the port, None when none did."""
    with _lock:
        return _claims.get((machine, port))


def claim(machine: str, port: int, owner: str) -> bool:
    """Claim the port for ``owner``; False when another server holds the claim."""
    with _lock:
        held = _claims.setdefault((machine, port), owner)
    return held == owner


def release(machine: str, port: int, owner: str) -> None:
    """Give the claim back (only the owner's own claim)."""
    with _lock:
        if _claims.get((machine, port)) == owner:
            del _claims[(machine, port)]

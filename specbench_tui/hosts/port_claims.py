"""Ports the servers of this machine's campaigns hold or are about to take, per network
namespace.

Two plan hosts can be one machine (two sim hosts, a local host beside an SSH alias of this
machine, two SSH aliases of one sshd), and two campaigns can run on one machine at once. A
bind test says a port is free now, not that another server will not take it a moment later;
a claim made in the same step as the test does. Claims are keyed by the network namespace
the port lives in (the kernel's boot id and the namespace's inode), so hosts that are one
machine see each other's claims and hosts that merely share a name do not.

Within this process a claim is an entry in a table (the engine runs on one event loop: a
claim is taken between two awaits, never split by another group's). Across processes it is
an exclusive ``flock`` on a file per port under the user's runtime directory, held while
the claim lasts: the kernel lets it go when the process ends, however it ends, so a crashed
campaign never keeps a port claimed. The file names the holder (pid, results, group), so
another campaign can say whose claim it met.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import socket
import tempfile
import threading
from pathlib import Path

# Run on a host to name the network namespace its ports live in: two lines, boot id then
# "net:[inode]" (a container has a namespace of its own, the machine's boot id).
NAMESPACE_PROBE = "cat /proc/sys/kernel/random/boot_id; readlink /proc/self/ns/net"

_claims: dict[tuple[str, int], str] = {}
_files: dict[tuple[str, int], int] = {}  # the open, flock'ed claim file of each claim
_lock = threading.Lock()  # the engine is one loop; the lock only guards tests' threads
_owner_detail = {"results": ""}  # what a claim file says of this process beside its pid


def runtime_dir() -> Path:
    """Where claim files live: ``$XDG_RUNTIME_DIR/specbench/ports`` (``/run/user/<uid>``
    when that is unset but exists), else a directory of the user's own in the temp dir."""
    base = os.environ.get("XDG_RUNTIME_DIR") or ""
    if not base and Path(f"/run/user/{os.getuid()}").is_dir():
        base = f"/run/user/{os.getuid()}"
    root = (
        Path(base) / "specbench"
        if base
        else Path(tempfile.gettempdir()) / f"specbench-{os.getuid()}"
    )
    return root / "ports"


def set_results(results: str) -> None:
    """The results directory this process's claims name (for another campaign's notice)."""
    _owner_detail["results"] = results


def _claim_file(machine: str, port: int) -> Path:
    key = hashlib.sha256(machine.encode()).hexdigest()[:16]
    return runtime_dir() / f"{key}-{int(port)}.lock"


def _open(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)


def other_claim(machine: str, port: int) -> str | None:
    """Another process's claim on the port, in words ("pid 123, results /r, group g"); None
    when no other process holds one (or the claim files cannot be used here)."""
    path = _claim_file(machine, port)
    if not path.exists():
        return None
    with _lock:
        if (machine, port) in _files:
            return None  # ours
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _describe(path)
        except OSError:
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _describe(path: Path) -> str:
    try:
        doc = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        doc = {}
    if not isinstance(doc, dict) or not doc.get("pid"):
        return "another process"
    parts = [f"pid {doc['pid']}"]
    if doc.get("results"):
        parts.append(f"results {doc['results']}")
    if doc.get("group"):
        parts.append(f"group {doc['group']}")
    return ", ".join(parts)


def _take_file(machine: str, port: int, owner: str) -> bool:
    """The claim file's lock for this process; False when another process holds it."""
    try:
        fd = _open(_claim_file(machine, port))
    except OSError:
        return True  # no runtime directory to claim in: this process's table still holds
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    except OSError:
        os.close(fd)
        return True
    doc = {"pid": os.getpid(), "results": _owner_detail["results"], "group": owner}
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(doc).encode(), 0)
    _files[(machine, port)] = fd
    return True


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
    """Which server of this process (group id) claimed the port, None when none did."""
    with _lock:
        return _claims.get((machine, port))


def claim(machine: str, port: int, owner: str) -> bool:
    """Claim the port for ``owner``; False when another server of this process, or another
    process, holds the claim."""
    with _lock:
        held = _claims.setdefault((machine, port), owner)
        if held != owner:
            return False
        if (machine, port) in _files:
            return True
        if _take_file(machine, port, owner):
            return True
        del _claims[(machine, port)]
        return False


def release(machine: str, port: int, owner: str) -> None:
    """Give the claim back (only the owner's own claim)."""
    with _lock:
        if _claims.get((machine, port)) == owner:
            del _claims[(machine, port)]
            fd = _files.pop((machine, port), None)
            if fd is not None:  # closing lets the lock go; the file stays for the next
                os.close(fd)

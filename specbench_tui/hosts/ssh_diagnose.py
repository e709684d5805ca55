"""Why a connection to an SSH host failed, in words an operator can act on.

A plan names a host as OpenSSH would (an alias from ``~/.ssh/config``, ``user@host:port``);
what was really dialled (the config's HostName and Port) is what a message must show, since
"connection refused on port 22" for an alias whose config says port 2222 sends the operator
the wrong way. Host keys: an unknown key and a *changed* key are different events. A changed
key may mean someone sits between us and the host, so the campaign is refused with both
fingerprints and the ``ssh-keygen -R`` to run if the change is expected. A config that turns
host-key checking off for the host (``UserKnownHostsFile /dev/null``, ``StrictHostKeyChecking
no``) does not turn it off here: the advice says where a key must go instead. A port where
something other than sshd listens (an HTTP server) is named as such, from its first line.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import asyncssh

DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "/etc/ssh/ssh_known_hosts")
_NULL_FILES = ("/dev/null", "none")


@dataclass(frozen=True)
class Endpoint:
    """A destination with ``~/.ssh/config`` applied: the HostName and Port really dialled,
    the user, and the known_hosts files the config names for it (None: the config says
    ``none``; empty: OpenSSH's defaults)."""

    alias: str
    host: str
    port: int
    user: str | None
    known_hosts: tuple[str, ...] | None
    config: str | None  # the -F file, None for ~/.ssh/config
    explicit_port: bool  # the plan's destination named the port itself

    def where(self) -> str:
        """``sbtest (127.0.0.1 port 2222)``: the plan's name and where it leads."""
        real = f"{self.host} port {self.port}"
        return real if self.alias == self.host else f"{self.alias} ({real})"

    def ssh_command(self) -> str:
        """The ``ssh`` command that reaches the same place, for the operator to type."""
        parts = ["ssh"]
        if self.config:
            parts += ["-F", self.config]
        if self.explicit_port:
            parts += ["-p", str(self.port)]
        parts.append(f"{self.user}@{self.alias}" if self.user else self.alias)
        return " ".join(parts)

    def known_hosts_name(self) -> str:
        """The host as a known_hosts line names it: ``host`` or ``[host]:port``."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"


def resolve(
    alias: str, user: str | None, port: int | None, config: str | os.PathLike[str] | None
) -> Endpoint:
    """Apply the SSH config to a destination the way asyncssh (and OpenSSH) will. A config
    that cannot be read raises ValueError."""
    options = asyncssh.SSHClientConnectionOptions(
        config=[str(config)] if config is not None else (),
        host=alias,
        port=port if port is not None else (),
        username=user if user is not None else (),
    )
    known = options.known_hosts
    files: tuple[str, ...] | None
    if known is None:
        files = None
    elif isinstance(known, list | tuple):
        files = tuple(str(f) for f in known)
    else:
        files = ()
    return Endpoint(
        alias=alias,
        host=str(options.host),
        port=int(options.port),
        user=user,
        known_hosts=files,
        config=str(config) if config is not None else None,
        explicit_port=port is not None,
    )


def checked_files(endpoint: Endpoint, explicit: str | None) -> list[str]:
    """The known_hosts files host keys are checked against: the caller's, else the config's,
    else OpenSSH's defaults. A config's ``none`` does not switch checking off here."""
    if explicit is not None:
        return [explicit]
    if endpoint.known_hosts:
        return list(endpoint.known_hosts)
    return [str(Path(f).expanduser()) for f in DEFAULT_KNOWN_HOSTS]


def config_disables_checks(endpoint: Endpoint, explicit: str | None) -> bool:
    """The config points the host's known_hosts at nothing (``/dev/null`` or ``none``): ssh
    then never records a key, so "connect once with ssh and accept it" cannot work."""
    if explicit is not None:
        return False
    if endpoint.known_hosts is None:
        return True
    return bool(endpoint.known_hosts) and all(f in _NULL_FILES for f in endpoint.known_hosts)


def _recorded_keys(files: list[str], endpoint: Endpoint) -> list[asyncssh.SSHKey]:
    keys: list[asyncssh.SSHKey] = []
    for f in files:
        path = Path(f).expanduser()
        if str(path) in _NULL_FILES or not path.is_file():
            continue
        with contextlib.suppress(OSError, ValueError, asyncssh.Error):
            port = endpoint.port if endpoint.port != 22 else None
            found = asyncssh.match_known_hosts(str(path), endpoint.host, endpoint.host, port)
            keys.extend(k for k in found[0] if isinstance(k, asyncssh.SSHKey))
    return keys


async def _presented_key(
    endpoint: Endpoint, algorithms: list[str] | None, timeout_s: float
) -> asyncssh.SSHKey | None:
    kwargs: dict[str, object] = {"port": endpoint.port}
    if endpoint.config is not None:
        kwargs["config"] = [endpoint.config]
    if algorithms:
        kwargs["server_host_key_algs"] = algorithms
    with contextlib.suppress(asyncssh.Error, OSError, TimeoutError, ValueError):  # no key seen
        return await asyncio.wait_for(
            asyncssh.get_server_host_key(endpoint.alias, **kwargs),  # type: ignore[arg-type]
            timeout=timeout_s,
        )
    return None


def _describe(key: asyncssh.SSHKey | None) -> str:
    if key is None:
        return "a key that could not be read"
    return f"{key.get_algorithm()} {key.get_fingerprint()}"


async def host_key_problem(endpoint: Endpoint, explicit: str | None, timeout_s: float) -> str:
    """The message for a host key that did not verify: changed (refused, possible attack),
    unknown, or uncheckable because the config points known_hosts at nothing."""
    files = checked_files(endpoint, explicit)
    where = endpoint.where()
    if config_disables_checks(endpoint, explicit):
        presented = await _presented_key(endpoint, None, timeout_s)
        target = "~/.ssh/known_hosts"
        setting = "none" if endpoint.known_hosts is None else "/dev/null"
        return (
            f"host key of {where} cannot be checked: the SSH config sets UserKnownHostsFile "
            f"{setting} for it (with StrictHostKeyChecking no, ssh then records no key), and "
            "specbench-tui checks host keys regardless. Put the key where it is read: remove "
            "that UserKnownHostsFile line (or name a real file), check the fingerprint the host "
            f"presents ({_describe(presented)}) with its admin, then "
            f"`ssh-keyscan -p {endpoint.port} {endpoint.host} >> {target}`"
        )
    recorded = _recorded_keys(files, endpoint)
    if recorded:
        algorithms = [a.decode() for a in recorded[0].sig_algorithms]
        presented = await _presented_key(endpoint, algorithms, timeout_s)
        old = ", ".join(dict.fromkeys(_describe(k) for k in recorded))
        known_file = next(
            (f for f in files if _recorded_keys([f], endpoint)), files[0] if files else "?"
        )
        return (
            f"HOST KEY CHANGED for {where}: it presents {_describe(presented)}, but "
            f"{known_file} holds {old} for it. Someone may be intercepting the connection, so "
            "nothing is run there. If the change is expected (the host was reinstalled), "
            f"remove the old key with `ssh-keygen -f {known_file} -R "
            f"'{endpoint.known_hosts_name()}'` and connect once with `{endpoint.ssh_command()}` "
            "to check and accept the new one"
        )
    presented = await _presented_key(endpoint, None, timeout_s)
    shown = " or ".join(files) if files else "any known_hosts file"
    return (
        f"host key of {where} is not in {shown} (it presents {_describe(presented)}); connect "
        f"once with `{endpoint.ssh_command()}` to check and accept it"
    )


async def banner_problem(endpoint: Endpoint, timeout_s: float = 3.0) -> str | None:
    """When a connection ended before SSH spoke: what the port answers, if it is not an SSH
    server (None when it greets as one, so the failure lies elsewhere)."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(endpoint.host, endpoint.port), timeout_s
        )
    except (OSError, TimeoutError):
        return None
    data = b""
    try:
        with contextlib.suppress(OSError, TimeoutError):  # SSH (and SMTP, FTP...) greet first
            data = await asyncio.wait_for(reader.read(256), min(timeout_s, 1.0))
        if not data:  # a silent server: maybe one that answers requests, as HTTP does
            with contextlib.suppress(OSError, TimeoutError):
                writer.write(b"GET / HTTP/1.0\r\n\r\n")
                await writer.drain()
                data = await asyncio.wait_for(reader.read(256), timeout_s)
    finally:
        writer.close()
        with contextlib.suppress(OSError):  # a peer that reset the connection at its close
            await writer.wait_closed()
    if data.startswith(b"SSH-"):
        return None
    first = data.decode("utf-8", errors="replace").splitlines()[0].strip() if data else ""
    said = f"it answered {first[:80]!r}" if first else "it sent no SSH greeting"
    if first.startswith("HTTP/"):
        said += " (a web server)"
    return (
        f"{endpoint.where()}: not an SSH server: {said} instead of an SSH banner; check the "
        "port in the plan or the Port in the SSH config"
    )


__all__ = [
    "Endpoint",
    "banner_problem",
    "checked_files",
    "config_disables_checks",
    "host_key_problem",
    "resolve",
]

"""Building remote shell command lines: the one place a plan value becomes a shell word.

Every value that reaches a command run on an SSH host (a path, an argument, an environment
value) goes through ``quote`` or ``remote_path`` here, so a workdir with ``; touch FILE``, a
model path with ``$(...)`` or an argument with a newline arrive literally, never as shell
syntax. Numbers are the only things written into command lines unquoted, and only after
``int()``.
"""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Mapping, Sequence

from specbench_tui.table_types import ENV_NAME

_ENV_NAME = re.compile(ENV_NAME)


def quote(value: str) -> str:
    """One shell word that the remote shell reads back as exactly ``value``."""
    return shlex.quote(value)


def remote_path(path: str) -> str:
    """A remote path as one shell word. A leading ``~`` is expanded by the remote shell
    (quoting alone would keep it literal); a path starting with ``-`` gets ``./`` in front,
    so no command reads it as an option."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    if path.startswith("-"):
        path = "./" + path
    return shlex.quote(path)


def quote_command(argv: Sequence[str]) -> str:
    """An argv list as a command line whose words arrive as given."""
    return " ".join(shlex.quote(a) for a in argv)


def env_prefix(env: Mapping[str, str]) -> str:
    """``env K=V ...`` for a remote command line.

    sshd only accepts the variables its AcceptEnv lists (usually LANG and LC_*), so an
    environment is passed in the command, quoted, instead of through the SSH protocol.
    """
    if not env:
        return ""
    for key in env:
        if not _ENV_NAME.match(key):
            raise ValueError(f"invalid environment variable name {key!r}")
    return "env " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + " "


def until_channel_closed(line: str) -> str:
    """Wrap a never-ending command (``tail -F``, ``journalctl -f``) so that it ends when our
    channel closes or the connection drops.

    Without a pty, sshd sends no signal when a channel closes, and a follower only notices
    at its next write, which may be never: each reconnect would leave one behind on the
    host. The wrapper waits for EOF on stdin (the channel closing) and kills the follower.
    """
    # ``set -m`` puts the follower in a process group of its own, so the kill reaches all
    # of it (a compound command forks); an asynchronous list's stdin would be /dev/null,
    # hence the channel kept on fd 3 for the watcher.
    watcher = "(cat <&3 >/dev/null; kill -TERM -$p 2>/dev/null) >/dev/null 2>&1 &"
    return f"exec 3<&0; set -m; {{ {line} ; }} </dev/null & p=$!; {watcher} wait $p"


__all__ = ["env_prefix", "quote", "quote_command", "remote_path", "until_channel_closed"]


def read_files_command(paths: Sequence[str]) -> str:
    """One command that prints each file of ``paths`` as ``+<i>`` and its base64 on one line,
    or ``-<i>`` where it is not a readable file: small files (a model's tokenizer config)
    read over one round trip, whatever bytes they hold."""
    parts = []
    for i, path in enumerate(paths):
        p = remote_path(path)
        parts.append(
            f"if [ -f {p} ] && [ -r {p} ]; then echo '+{i}'; base64 < {p} | tr -d '\\n'; echo; "
            f"else echo '-{i}'; fi"
        )
    return "; ".join(parts)


def parse_read_files(stdout: str, paths: Sequence[str]) -> dict[str, str | None]:
    """The texts ``read_files_command`` printed, by path (None: absent, unreadable, or not
    UTF-8 text)."""
    out: dict[str, str | None] = dict.fromkeys(paths)
    lines = stdout.splitlines()
    for k, line in enumerate(lines):
        if not line.startswith("+") or not line[1:].isdigit():
            continue
        i = int(line[1:])
        if i >= len(paths) or k + 1 >= len(lines):
            continue
        try:
            out[paths[i]] = base64.b64decode(lines[k + 1], validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            out[paths[i]] = None
    return out

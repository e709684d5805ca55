"""Faults of the SSH link for the tests, done on the far side as a real outage would be.

``install_shims`` writes small shell scripts that the test sshd puts first on its sessions'
PATH. They behave exactly like the commands they stand for, unless the test armed the trigger
file (``arm_drop``): then the next start command loses its reply. ``cat`` (the last command
of a process-mode start, which prints the pid file) and ``systemd-run`` (the start of a
systemd unit) first do their work, or are about to, and then SIGKILL the session's own sshd
processes, all but the listener: the server is started, the link drops before the exit
status can travel back, and the listener takes the reconnect as on a real host.
"""

from __future__ import annotations

from pathlib import Path

STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TRIGGER = "drop-start"

# Kill every sshd process up this shell's ancestry except the top one (the listener).
_DROP_LINK = r"""
drop_link() {
    p=$PPID; chain=""
    while [ "${p:-0}" -gt 1 ]; do
        read -r l < /proc/$p/stat || break
        c=${l#*\(}; c=${c%%\)*}
        set -- ${l##*\) }
        [ "$c" = sshd ] && chain="$chain $p"
        p=$2
    done
    set -- $chain
    while [ $# -gt 1 ]; do kill -KILL "$1" 2>/dev/null; shift; done
}
"""

_CAT = (
    "#!/bin/sh\n"
    + _DROP_LINK
    + r"""
case "${1-}" in
*.pid)
    if mv "@TRIGGER@" "@TRIGGER@.fired" 2>/dev/null; then drop_link; fi;;
esac
exec /bin/cat "$@"
"""
)

_SYSTEMD_RUN = (
    "#!/bin/sh\n"
    + _DROP_LINK
    + r"""
for real in /usr/bin/systemd-run /bin/systemd-run; do [ -x "$real" ] && break; done
if mv "@TRIGGER@" "@TRIGGER@.fired" 2>/dev/null; then
    "$real" "$@"; rc=$?
    drop_link
    exit $rc
fi
exec "$real" "$@"
"""
)


def install_shims(root: Path) -> Path:
    """The shim directory under ``root`` (created): put it first on the sessions' PATH."""
    shims = root / "shims"
    shims.mkdir(exist_ok=True)
    for name, text in (("cat", _CAT), ("systemd-run", _SYSTEMD_RUN)):
        path = shims / name
        path.write_text(text.replace("@TRIGGER@", str(root / TRIGGER)))
        path.chmod(0o755)
    return shims


def arm_drop(root: Path) -> None:
    """The next start command on a host whose sessions use ``root``'s shims loses its reply."""
    (root / f"{TRIGGER}.fired").unlink(missing_ok=True)
    (root / TRIGGER).write_text("armed\n")


def drop_fired(root: Path) -> bool:
    return (root / f"{TRIGGER}.fired").exists()

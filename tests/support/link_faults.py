"""Faults of the SSH link for the tests, done on the far side as a real outage would be.

``install_shims`` writes small shell scripts that the test sshd puts first on its sessions'
PATH. They behave exactly like the commands they stand for, unless the test armed a trigger
file. ``arm_drop``: the next start command loses its reply. ``cat`` (the last command of a
process-mode start, which prints the pid file) and ``systemd-run`` (the start of a systemd
unit) first do their work, or are about to, and then SIGKILL the session's own sshd
processes, all but the listener: the server is started, the link drops before the exit
status can travel back, and the listener takes the reconnect as on a real host.
``arm_nothing``: the next start loses its reply before anything started (``nohup`` or
``systemd-run`` drops the link instead of starting the server). ``arm_foreign``: the next
start runs the server under another launch mark (``nohup`` rewrites the wrapper's ``$0``,
``systemd-run`` the unit's description), as if something else had taken the group's pid file
or unit; with ``arm_drop`` its reply is lost too.
"""

from __future__ import annotations

from pathlib import Path

STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TRIGGER = "drop-start"
NOTHING = "start-nothing"
FOREIGN = "start-foreign"
FOREIGN_MARK_HASH = "0" * 16

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
if mv "@NOTHING@" "@NOTHING@.fired" 2>/dev/null; then drop_link; exit 1; fi
if mv "@FOREIGN@" "@FOREIGN@.fired" 2>/dev/null; then
    for a in "$@"; do
        shift
        case "$a" in --description=*)
            a="--description=$(printf '%s' "${a#--description=}" | cut -d: -f1-3):@HASH@";;
        esac
        set -- "$@" "$a"
    done
fi
if mv "@TRIGGER@" "@TRIGGER@.fired" 2>/dev/null; then
    "$real" "$@"; rc=$?
    drop_link
    exit $rc
fi
exec "$real" "$@"
"""
)


# nohup's arguments in a process-mode start: setsid sh -c WRAPPER MARK PIDFILE EXITFILE ...
_NOHUP = (
    "#!/bin/sh\n"
    + _DROP_LINK
    + r"""
for real in /usr/bin/nohup /bin/nohup; do [ -x "$real" ] && break; done
if mv "@NOTHING@" "@NOTHING@.fired" 2>/dev/null; then drop_link; exit 1; fi
if [ "${2-}" = sh ] && [ "${3-}" = -c ] && mv "@FOREIGN@" "@FOREIGN@.fired" 2>/dev/null; then
    a1=$1 a2=$2 a3=$3 a4=$4 mark=$5; shift 5
    exec "$real" "$a1" "$a2" "$a3" "$a4" "$(printf '%s' "$mark" | cut -d: -f1-3):@HASH@" "$@"
fi
exec "$real" "$@"
"""
)


def install_shims(root: Path) -> Path:
    """The shim directory under ``root`` (created): put it first on the sessions' PATH."""
    shims = root / "shims"
    shims.mkdir(exist_ok=True)
    for name, text in (("cat", _CAT), ("systemd-run", _SYSTEMD_RUN), ("nohup", _NOHUP)):
        path = shims / name
        text = text.replace("@TRIGGER@", str(root / TRIGGER))
        text = text.replace("@NOTHING@", str(root / NOTHING)).replace(
            "@FOREIGN@", str(root / FOREIGN)
        )
        path.write_text(text.replace("@HASH@", FOREIGN_MARK_HASH))
        path.chmod(0o755)
    return shims


def arm_drop(root: Path) -> None:
    """The next start command on a host whose sessions use ``root``'s shims loses its reply."""
    (root / f"{TRIGGER}.fired").unlink(missing_ok=True)
    (root / TRIGGER).write_text("armed\n")


def drop_fired(root: Path) -> bool:
    return (root / f"{TRIGGER}.fired").exists()


def arm_nothing(root: Path) -> None:
    """The next start loses its reply, and nothing of it started."""
    (root / f"{NOTHING}.fired").unlink(missing_ok=True)
    (root / NOTHING).write_text("armed\n")


def arm_foreign(root: Path) -> None:
    """The next start runs its server under another launch mark (the same campaign and
    group, another command line's hash)."""
    (root / f"{FOREIGN}.fired").unlink(missing_ok=True)
    (root / FOREIGN).write_text("armed\n")


def fired(root: Path, trigger: str) -> bool:
    return (root / f"{trigger}.fired").exists()

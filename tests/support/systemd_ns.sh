#!/bin/bash
# systemd_ns.sh - a real systemd as PID 1 of a private PID + mount (+ UTS, IPC, cgroup)
# namespace, with an OpenSSH server inside, for the tests of specbench's systemd service
# manager. The network namespace is the host's: sshd listens on 127.0.0.1:PORT (and PORT2),
# and the tests reach systemd-run, systemctl and journalctl there over SSH.
#
#   systemd_ns.sh start DIR PORT PORT2   boot; returns once `systemctl is-system-running`
#                                        answers running or degraded over SSH
#   systemd_ns.sh stop DIR               power off; check that nothing is left
#
# Run as root. DIR (absolute, [A-Za-z0-9._/+-] only) holds the keys, ssh_config (host
# aliases "sdns" on PORT and "sdns-sim" on PORT2, whose sessions also get the variables of
# DIR/sim.env), known_hosts and the logs; it is the only host path writable inside.
#
# Safety. systemd's boot would, on a normal unit path, run systemd-tmpfiles, which empties the
# machine's whole /tmp, plus udev, sysctl and the host's enabled units. So before systemd is
# exec'd, inside the new mount namespace, and any failure ends PID 1 (and with it the
# namespace) before systemd runs:
#   1. every mount is made private (nothing propagates back to the host), and checked;
#   2. every inherited mount, hidden ones too, is made read-only with mount_setattr(2)
#      AT_RECURSIVE (a per-mount flag: the host's mounts and filesystems are untouched;
#      never "remount,ro", which would change the host's filesystem);
#   3. tmpfs over /run /tmp /var/tmp /var/log /var/lib/systemd, throwaway overlays on
#      /var/lib and /var/cache, a private /dev, a fresh /proc with /proc/sys read-only;
#   4. the only writable mounts are those (checked), and every path named in a tmpfiles.d
#      rule lands on one of them or on a read-only mount (checked);
#   5. systemd sees only an allow-list of units (SYSTEMD_UNIT_PATH), no generators, runs in
#      container mode (container=) with a reduced capability bounding set.
# Canary files in the host's /tmp and /var/tmp are written before the boot and must exist
# after it and after the stop; if one vanished, the script says so and fails.
set -euo pipefail
umask 022
export LC_ALL=C

PROG=systemd_ns
SELF=$(readlink -f -- "${BASH_SOURCE[0]}")
START_TIMEOUT=${SDNS_START_TIMEOUT:-60}
STOP_TIMEOUT=${SDNS_STOP_TIMEOUT:-20}
DROP_CAPS=sys_module,sys_time,sys_rawio,syslog,wake_alarm,block_suspend,mac_admin,mac_override,sys_pacct,audit_control,audit_read,net_admin,bpf,perfmon,checkpoint_restore
TMPFS_DIRS="/tmp /var/tmp /var/log /var/lib/systemd"
OVERLAY_DIRS="/var/lib /var/cache"
UNITS="systemd-journald.service systemd-journald.socket systemd-journald-dev-log.socket
 dbus.service dbus.socket system.slice sysinit.target basic.target sockets.target
 timers.target paths.target slices.target local-fs.target local-fs-pre.target swap.target
 network.target network-pre.target network-online.target nss-lookup.target
 nss-user-lookup.target remote-fs.target remote-fs-pre.target time-set.target
 time-sync.target multi-user.target shutdown.target umount.target final.target
 poweroff.target systemd-poweroff.service halt.target systemd-halt.service reboot.target
 systemd-reboot.service exit.target systemd-exit.service"

die() { echo "$PROG: error: $*" >&2; exit 1; }
say() { echo "$PROG: $*" >&2; }

set_dir() {
    DIR=$(realpath -m -- "$1")
    [[ "$DIR" =~ ^/[A-Za-z0-9._/+-]+$ ]] || die "DIR must be an absolute path of [A-Za-z0-9._/+-]"
    case "$DIR" in /|/proc*|/sys*|/dev*|/run|/tmp|/var/tmp) die "refusing DIR=$DIR";; esac
    NAME="specbench-sdns.$(printf '%s' "$DIR" | sha1sum | cut -c1-12)"
}

field() { sed -E 's/^.*\) //' "/proc/$1/stat" 2>/dev/null | awk -v n="$2" '{print $n}' || true; }
live() { local s; s=$(field "$1" 1); [ -n "$s" ] && [ "$s" != Z ] && [ "$s" != X ]; }

ns_init_alive() {   # the recorded namespace init, same process (start time, pid namespace)
    local pid
    [ -s "$DIR/pid" ] || return 1
    pid=$(cat "$DIR/pid")
    live "$pid" || return 1
    [ "$(field "$pid" 20)" = "$(cat "$DIR/starttime")" ] || return 1
    [ "$(readlink "/proc/$pid/ns/pid" 2>/dev/null)" = "$(cat "$DIR/pidns")" ]
}

ns_members() {   # host pids of live processes in the recorded pid namespace
    local want p
    want=$(cat "$DIR/pidns" 2>/dev/null || true)
    [ -n "$want" ] || return 0
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/ns/pid" 2>/dev/null)" = "$want" ] || continue
        live "${p#/proc/}" && echo "${p#/proc/}"
    done
    return 0
}

cgroup2_rw() { findmnt -rn -t cgroup2 -o TARGET,OPTIONS | awk '$2 ~ /(^|,)rw(,|$)/ {print $1; exit}' || true; }

canaries() { echo "/tmp/.$NAME.canary /var/tmp/.$NAME.canary"; }
canaries_ok() {
    local c ok=0
    for c in $(canaries); do
        [ -e "$c" ] || { echo "$PROG: SAFETY: host canary $c vanished" >&2; ok=1; }
    done
    return $ok
}

ssh_state() { timeout 10 ssh -F "$DIR/ssh_config" -o ConnectTimeout=3 sdns systemctl is-system-running 2>/dev/null || true; }

write_config() {
    local port=$1 port2=$2 type=simple
    [ -s "$DIR/client_key" ] || ssh-keygen -q -t ed25519 -N '' -C "$NAME-client" -f "$DIR/client_key"
    [ -s "$DIR/host_key" ] || ssh-keygen -q -t ed25519 -N '' -C "$NAME-host" -f "$DIR/host_key"
    chmod 600 "$DIR/client_key" "$DIR/host_key"
    cp "$DIR/client_key.pub" "$DIR/authorized_keys"
    local key; key=$(cut -d' ' -f1,2 "$DIR/host_key.pub")
    printf '[127.0.0.1]:%s %s\n[127.0.0.1]:%s %s\n' "$port" "$key" "$port2" "$key" > "$DIR/known_hosts"
    local alias p
    : > "$DIR/ssh_config"
    for alias in "sdns $port" "sdns-sim $port2"; do
        set -- $alias
        cat >> "$DIR/ssh_config" <<EOF
Host $1
    HostName 127.0.0.1
    Port $2
    User root
    IdentityFile $DIR/client_key
    IdentitiesOnly yes
    UserKnownHostsFile $DIR/known_hosts
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    BatchMode yes
    LogLevel ERROR
EOF
    done
    local match=""
    if [ -s "$DIR/sim.env" ]; then   # sessions on PORT2 see simulated GPUs
        match="Match LocalPort $port2
    SetEnv $(tr '\n' ' ' < "$DIR/sim.env")"
    fi
    cat > "$DIR/sshd_config" <<EOF
Port $port
Port $port2
ListenAddress 127.0.0.1
HostKey $DIR/host_key
PidFile none
AuthorizedKeysFile $DIR/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
PrintLastLog no
UseDNS no
AllowTcpForwarding yes
X11Forwarding no
MaxStartups 100:30:200
MaxSessions 64
LogLevel INFO
$match
EOF
    chmod 600 "$DIR/sshd_config"
    # Debian's sshd speaks sd_notify (its own ssh.service is Type=notify)
    grep -qs '^Type=notify' /lib/systemd/system/ssh.service /usr/lib/systemd/system/ssh.service && type=notify
    mkdir -p "$DIR/units"
    cat > "$DIR/units/sdns.target" <<EOF
[Unit]
Description=specbench test boot: journald, dbus, sshd
DefaultDependencies=no
Wants=systemd-journald.service systemd-journald.socket systemd-journald-dev-log.socket dbus.socket sdns-sshd.service
EOF
    cat > "$DIR/units/sdns-sshd.service" <<EOF
[Unit]
Description=OpenSSH server for the tests on 127.0.0.1:$port and :$port2
DefaultDependencies=no
After=systemd-journald.socket
Conflicts=shutdown.target
Before=shutdown.target

[Service]
Type=$type
ExecStart=/usr/sbin/sshd -D -e -f $DIR/sshd_config
RuntimeDirectory=sshd
RuntimeDirectoryMode=0755
EOF
    # Sessions' bash reads ~/.bashrc; the host's is covered by this one. It prints to stderr on
    # purpose: real GPU hosts often have rc files that do (pyenv, conda), and the code must
    # take systemd's own error lines, not the first line of stderr.
    echo 'echo "bashrc: a login rc file printing to stderr" >&2' > "$DIR/root.bashrc"
    echo "$port" > "$DIR/port"
}

cmd_start() {
    [ $# -eq 3 ] || die "usage: $PROG start DIR PORT PORT2"
    [ "$(id -u)" -eq 0 ] || die "must run as root"
    set_dir "$1"
    local port=$2 port2=$3 c
    for c in unshare setpriv findmnt ssh ssh-keygen ss mknod python3 realpath sha1sum timeout; do
        command -v "$c" >/dev/null || die "missing command: $c"
    done
    [ -x /lib/systemd/systemd ] || [ -x /usr/lib/systemd/systemd ] || die "systemd is not installed"
    [ -x /usr/sbin/sshd ] || die "openssh-server is not installed"
    [ -e /proc/self/ns/cgroup ] || die "the kernel has no cgroup namespaces"
    mkdir -p "$DIR"; chmod 700 "$DIR"
    ! ns_init_alive || die "already running (pid $(cat "$DIR/pid"))"
    [ -z "$(ns_members)" ] || die "processes of an earlier instance are alive; run: $PROG stop $DIR"
    for p in "$port" "$port2"; do
        [ "$(ss -Hltn "sport = :$p" | grep -c .)" -eq 0 ] || die "port $p is in use"
    done
    write_config "$port" "$port2"
    rm -f "$DIR/pid" "$DIR/starttime" "$DIR/pidns" "$DIR/unshare.pid" "$DIR/stage2.ok"
    : > "$DIR/boot.log"; : > "$DIR/console.log"
    for c in $(canaries); do echo "$DIR" > "$c"; done

    SELF=$SELF setsid -f /bin/bash -c \
        'echo $$ > "$1/unshare.pid"; exec unshare --pid --mount --uts --ipc --fork --propagation private -- /bin/bash "$2" __stage1 "$1"' \
        launch "$DIR" "$SELF" < /dev/null >> "$DIR/boot.log" 2>&1
    local upid="" kids="" i
    for i in $(seq 1 200); do
        [ -s "$DIR/unshare.pid" ] && upid=$(cat "$DIR/unshare.pid") &&
            kids=$(cat "/proc/$upid/task/$upid/children" 2>/dev/null || true)
        [ -n "$kids" ] && break
        sleep 0.025
    done
    [ -n "$kids" ] || { cat "$DIR/boot.log" >&2; die "the namespace did not start"; }
    local pid=${kids%% *}
    grep -Eq "^NSpid:[[:space:]]+$pid[[:space:]]+1\$" "/proc/$pid/status" || die "pid $pid is not a namespace init"
    field "$pid" 20 > "$DIR/starttime"
    readlink "/proc/$pid/ns/pid" > "$DIR/pidns"
    echo "$pid" > "$DIR/pid"

    local deadline=$(( $(date +%s) + START_TIMEOUT )) st=""
    while :; do
        if ! ns_init_alive; then
            cat "$DIR/boot.log" >&2
            canaries_ok || true
            cmd_stop_checked || true
            die "the namespace init died during boot"
        fi
        if [ -e "$DIR/stage2.ok" ]; then
            st=$(ssh_state)
            case "$st" in running|degraded) break;; esac
        fi
        if [ "$(date +%s)" -ge "$deadline" ]; then
            tail -n 40 "$DIR/boot.log" >&2 || true
            cmd_stop_checked >&2 || true
            die "not running after ${START_TIMEOUT}s (state '${st:-no ssh}')"
        fi
        sleep 0.1
    done
    if ! canaries_ok; then
        cmd_stop_checked >&2 || true
        die "a host canary vanished during the boot: stopped; investigate before using $PROG again"
    fi
    say "running: pid $pid, sshd on 127.0.0.1:$port and :$port2, system $st"
}

cmd_stop() {
    [ $# -eq 1 ] || die "usage: $PROG stop DIR"
    [ "$(id -u)" -eq 0 ] || die "must run as root"
    set_dir "$1"
    [ -d "$DIR" ] || return 0
    cmd_stop_checked
}

cmd_stop_checked() {
    local pid i rc=0
    if ns_init_alive; then
        pid=$(cat "$DIR/pid")
        kill -s RTMIN+4 "$pid" 2>/dev/null || true   # systemd: poweroff; ends the pid namespace
        for i in $(seq 1 $(( STOP_TIMEOUT * 10 ))); do ns_init_alive || break; sleep 0.1; done
        if ns_init_alive; then
            say "no clean poweroff in ${STOP_TIMEOUT}s: SIGKILL to the namespace init"
            kill -KILL "$pid" 2>/dev/null || true   # the kernel kills the whole pid namespace
            for i in $(seq 1 100); do ns_init_alive || break; sleep 0.1; done
        fi
    fi
    if [ -s "$DIR/unshare.pid" ]; then
        local u; u=$(cat "$DIR/unshare.pid")
        for i in $(seq 1 100); do live "$u" || break; sleep 0.05; done
    fi
    local left=""
    for i in $(seq 1 50); do left=$(ns_members | tr '\n' ' '); [ -z "$left" ] && break; sleep 0.1; done
    [ -z "$left" ] || { say "processes left in the namespace: $left"; rc=1; }
    local cg; cg=$(cgroup2_rw)
    if [ -n "$cg" ] && [ -d "$cg/$NAME" ]; then
        find "$cg/$NAME" -depth -type d -exec rmdir {} + 2>/dev/null || true
        [ ! -d "$cg/$NAME" ] || { say "cgroup $cg/$NAME could not be removed"; rc=1; }
    fi
    local port; port=$(cat "$DIR/port" 2>/dev/null || true)
    if [ -n "$port" ] && [ "$(ss -Hltn "sport = :$port" | grep -c .)" -ne 0 ]; then
        say "port $port still has a listener"; rc=1
    fi
    canaries_ok || rc=1
    if [ $rc -eq 0 ]; then
        for c in $(canaries); do rm -f "$c"; done
        rm -f "$DIR/pid" "$DIR/starttime" "$DIR/pidns" "$DIR/unshare.pid" "$DIR/stage2.ok"
        say "stopped; nothing left"
    fi
    return $rc
}

# ---------------------------------------------------------------- inside the namespace

fatal() { echo "$PROG[ns]: FATAL: $*" >&2; exit 1; }

# (output, not status: grep -q would end findmnt with SIGPIPE and pipefail hide the match)
all_private() { [ -z "$(findmnt -rn -o PROPAGATION | grep -v '^private$' || true)" ]; }

stage1() {   # PID 1 of the new pid namespace, private mount namespace, the host's cgroups
    DIR=$1
    exec 8< "$0" 9< "$DIR"   # the script and DIR stay reachable once their paths are covered
    trap 'fatal "stage1 failed at line $LINENO"' ERR
    [ $$ -eq 1 ] || fatal "not PID 1"
    set_dir "$DIR"
    mount --make-rprivate /
    all_private || fatal "a mount is not private"
    local cg tmp=""
    cg=$(cgroup2_rw)
    if [ -z "$cg" ]; then   # none or read-only only: a private fresh cgroup2 mount
        mkdir -p "$DIR/.cg2"; mount -t cgroup2 cgroup2 "$DIR/.cg2"; cg=$DIR/.cg2; tmp=1
    fi
    mkdir -p "$cg/$NAME"
    echo $$ > "$cg/$NAME/cgroup.procs"
    [ -z "$tmp" ] || umount "$cg"
    grep -Eq "^0::(/.*)?/$NAME\$" /proc/self/cgroup || fatal "not in cgroup $NAME"
    exec unshare --cgroup -- /bin/bash /proc/self/fd/8 __stage2 "$DIR"
}

readonly_all() {   # mount_setattr(/, AT_RECURSIVE, MOUNT_ATTR_RDONLY): every mount, this namespace only
    python3 - <<'EOF'
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
class Attr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]
RDONLY, AT_RECURSIVE, AT_FDCWD, MS_PRIVATE, SYS_mount_setattr = 0x1, 0x8000, -100, 1 << 18, 442
attr = Attr(RDONLY, 0, MS_PRIVATE, 0)
r = libc.syscall(ctypes.c_long(SYS_mount_setattr), ctypes.c_int(AT_FDCWD), b"/",
                 ctypes.c_uint(AT_RECURSIVE), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)))
sys.exit(0 if r == 0 else 1)
EOF
}

tmpfiles_guard() {   # every tmpfiles.d path must land on one of our mounts or a read-only one
    OURS="$1" DIR="$DIR" python3 - <<'EOF'
import glob, os, re, sys
ours = set(os.environ["OURS"].split())
mounts = []
with open("/proc/self/mountinfo") as f:
    for line in f:
        parts = line.split()
        target = parts[4].encode().decode("unicode_escape")
        mounts.append((target, "ro" in parts[5].split(",")))
def innermost(path):
    best = ("/", False)
    for target, ro in mounts:
        if path == target or path.startswith(target.rstrip("/") + "/") or target == "/":
            if len(target) >= len(best[0]):
                best = (target, ro)
    return best
bad, n = [], 0
for d in ("/etc/tmpfiles.d", "/run/tmpfiles.d", "/usr/local/lib/tmpfiles.d", "/usr/lib/tmpfiles.d", "/lib/tmpfiles.d"):
    for conf in glob.glob(os.path.join(d, "*.conf")):
        for line in open(conf, errors="replace"):
            words = line.split()
            if len(words) < 2 or words[0].startswith("#"):
                continue
            path = os.path.realpath(re.sub(r"[*?\[%].*$", "", words[1]) or "/")
            n += 1
            target, ro = innermost(path)
            safe = ro or target in ours or target.startswith("/proc")
            if target == os.environ["DIR"] or not safe:  # DIR is the host's, writable
                bad.append(f"{path} (on {target})")
if bad:
    sys.exit("tmpfiles.d rules would touch writable host paths: " + ", ".join(sorted(set(bad))))
print(f"tmpfiles.d guard: {n} rules checked", file=sys.stderr)
EOF
}

stage2() {   # the same PID 1, now in a cgroup namespace: build the sandbox, then exec systemd
    DIR=$1
    trap 'fatal "stage2 failed at line $LINENO: $BASH_COMMAND"' ERR
    [ $$ -eq 1 ] || fatal "not PID 1"
    set_dir "$DIR"
    grep -qx '0::/' /proc/self/cgroup || fatal "not in a cgroup namespace"
    local sd d k t opts ours
    for sd in /lib/systemd/systemd /usr/lib/systemd/systemd ""; do [ -x "$sd" ] && break; done
    [ -n "$sd" ] || fatal "no systemd"

    readonly_all || fatal "mount_setattr failed: refusing to boot with writable host mounts"
    case ",$(findmnt -n -o OPTIONS --mountpoint / | tail -n1)," in *,ro,*) ;; *) fatal "/ is not read-only";; esac
    ! touch /.sdns-probe 2>/dev/null || fatal "/ is writable"
    ! touch /etc/.sdns-probe 2>/dev/null || fatal "/etc is writable"

    mount -t proc -o nosuid,nodev,noexec sdns-proc /proc
    for d in /proc/sys /proc/sysrq-trigger; do
        [ -e "$d" ] || continue
        mount --bind "$d" "$d"; mount -o remount,bind,ro "$d"
    done

    mount -t tmpfs -o mode=0755,nosuid,nodev,size=256m sdns-run /run
    ours="/run"
    for d in $OVERLAY_DIRS; do
        [ -d "$d" ] || fatal "$d is missing"
        k=$(printf '%s' "$d" | tr / _)
        mkdir -p "/run/sdns/overlay/$k/upper" "/run/sdns/overlay/$k/work"
        mount -t overlay -o "lowerdir=$d,upperdir=/run/sdns/overlay/$k/upper,workdir=/run/sdns/overlay/$k/work" sdns-overlay "$d"
        [ "$(findmnt -n -o FSTYPE --mountpoint "$d" | tail -n1)" = overlay ] || fatal "no overlay on $d"
        ours="$ours $d"
    done
    for d in $TMPFS_DIRS; do
        [ -d "$d" ] || fatal "$d is missing"
        case "$d" in /tmp|/var/tmp) mount -t tmpfs -o mode=1777,nosuid,nodev sdns-tmp "$d";;
                     *) mount -t tmpfs -o mode=0755,nosuid,nodev sdns-state "$d";; esac
        [ "$(findmnt -n -o FSTYPE --mountpoint "$d" | tail -n1)" = tmpfs ] || fatal "no tmpfs on $d"
        ours="$ours $d"
    done
    [ "$(findmnt -n -o FSTYPE --mountpoint /run | tail -n1)" = tmpfs ] || fatal "no tmpfs on /run"

    # DIR at its own path (made inside a new tmpfs when it lives below /tmp), bound by fd:
    # --no-canonicalize, or mount(8) would turn /proc/self/fd/9 back into the covered path
    if [ ! -d "$DIR" ] || [ "$(stat -L -c %d:%i "$DIR")" != "$(stat -L -c %d:%i /proc/self/fd/9)" ]; then
        mkdir -p "$DIR"
    fi
    mount --no-canonicalize --bind /proc/self/fd/9 "$DIR"
    mount -o remount,bind,rw "$DIR"
    ours="$ours $DIR"
    if [ -f ~/.bashrc ]; then mount --bind "$DIR/root.bashrc" ~/.bashrc; mount -o remount,bind,ro ~/.bashrc; fi

    mount -t tmpfs -o mode=0755,nosuid,size=4m sdns-dev /dev
    mknod -m 666 /dev/null c 1 3; mknod -m 666 /dev/zero c 1 5; mknod -m 666 /dev/full c 1 7
    mknod -m 666 /dev/random c 1 8; mknod -m 666 /dev/urandom c 1 9; mknod -m 666 /dev/tty c 5 0
    mkdir -m 755 /dev/pts; mkdir -m 1777 /dev/shm
    mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5,nosuid,noexec sdns-devpts /dev/pts
    ln -s pts/ptmx /dev/ptmx
    mount -t tmpfs -o mode=1777,nosuid,nodev sdns-shm /dev/shm
    ln -s /proc/self/fd /dev/fd; ln -s /proc/self/fd/0 /dev/stdin
    ln -s /proc/self/fd/1 /dev/stdout; ln -s /proc/self/fd/2 /dev/stderr
    touch /dev/console; mount --bind "$DIR/console.log" /dev/console
    ours="$ours /dev /dev/pts /dev/shm /dev/console"
    mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /sys/fs/cgroup
    ours="$ours /sys/fs/cgroup"

    all_private || fatal "a mount is not private"
    while read -r t opts; do
        t=$(printf '%b' "$t")
        case ",$opts," in *,ro,*) continue;; esac
        case "$t" in /proc|/proc/*) continue;; esac
        case " $ours " in *" $t "*) continue;; esac
        fatal "unexpected writable mount $t"
    done < <(findmnt -rn -o TARGET,OPTIONS)
    tmpfiles_guard "$ours" || fatal "tmpfiles.d guard"

    mkdir -p /run/sdns/units /run/sdns/empty /run/systemd/system.conf.d /run/systemd/journald.conf.d
    local u src
    for u in $UNITS; do
        for src in /lib/systemd/system/$u /usr/lib/systemd/system/$u; do
            [ -e "$src" ] && { ln -s "$src" "/run/sdns/units/$u"; break; }
        done
    done
    cp "$DIR"/units/* /run/sdns/units/
    ln -s sdns.target /run/sdns/units/default.target
    printf '[Manager]\nRuntimeWatchdogSec=off\nRebootWatchdogSec=off\nKExecWatchdogSec=off\nCtrlAltDelBurstAction=none\n' \
        > /run/systemd/system.conf.d/50-sdns.conf
    printf '[Journal]\nStorage=volatile\nReadKMsg=no\nForwardToSyslog=no\nForwardToKMsg=no\nForwardToConsole=no\nForwardToWall=no\n' \
        > /run/systemd/journald.conf.d/50-sdns.conf
    date +%s > "$DIR/stage2.ok"
    if [ "${SDNS_DRYRUN:-0}" = 1 ]; then findmnt -o TARGET,FSTYPE,OPTIONS,PROPAGATION; exit 0; fi

    local bset="" c
    for c in ${DROP_CAPS//,/ }; do bset="$bset,-$c"; done
    exec env -i container=specbench-sdns \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
        SYSTEMD_UNIT_PATH=/run/systemd/system.control:/run/systemd/transient:/run/systemd/system:/run/sdns/units \
        SYSTEMD_GENERATOR_PATH=/run/sdns/empty SYSTEMD_ENVIRONMENT_GENERATOR_PATH=/run/sdns/empty \
        setpriv --bounding-set "${bset#,}" -- "$sd" --system --unit=sdns.target --show-status=yes 8<&- 9<&-
}

case "${1:-}" in
    start) shift; cmd_start "$@";;
    stop) shift; cmd_stop "$@";;
    __stage1) shift; stage1 "$@";;
    __stage2) shift; stage2 "$@";;
    *) die "usage: $PROG start DIR PORT PORT2 | stop DIR";;
esac

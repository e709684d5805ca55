"""Test doubles for ``systemd-run``, ``systemctl`` and ``journalctl`` (one script, three names).

They keep the output formats and failure modes of the real tools that the code relies on,
backed by real processes: ``systemd-run`` starts a supervisor process that runs the command
in its own session, writes its output as journal entries and the unit's state to files
under $SPECBENCH_FAKE_SYSTEMD. Only systemd itself (cgroups, D-Bus) is missing.

State: ``units/<unit>.json`` (a loaded unit), ``unit-files/<unit>.json`` (an installed,
non-transient unit: {"ExecStart": [...]}) and ``journal.jsonl`` (one entry per line).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

STATE = Path(os.environ.get("SPECBENCH_FAKE_SYSTEMD", "/nonexistent"))
UNITS = STATE / "units"
FILES = STATE / "unit-files"
JOURNAL = STATE / "journal.jsonl"
ACTIVE = ("active", "activating", "deactivating", "reloading")


def unit_of(name: str) -> str:
    return (
        name
        if "." in name and name.rsplit(".", 1)[1] in ("service", "scope")
        else name + ".service"
    )


def load(unit: str) -> dict | None:
    try:
        return json.loads((UNITS / f"{unit}.json").read_text())
    except (OSError, ValueError):
        return None


def save(unit: str, state: dict) -> None:
    UNITS.mkdir(parents=True, exist_ok=True)
    tmp = UNITS / f".{unit}.{os.getpid()}"
    tmp.write_text(json.dumps(state))
    os.replace(tmp, UNITS / f"{unit}.json")


def update(unit: str, **kw: object) -> None:
    state = load(unit) or {}
    state.update(kw)
    save(unit, state)


def journal(unit: str, message: bytes | str, pid: int, *, from_systemd: bool = False) -> None:
    raw = message.encode() if isinstance(message, str) else message
    try:
        text = raw.decode("utf-8")
        printable = all(c == "\t" or c >= " " for c in text)
    except UnicodeDecodeError:
        printable = False
    entry: dict[str, object] = {
        "MESSAGE": text if printable else list(raw),
        "_PID": str(pid),
        "__REALTIME_TIMESTAMP": str(time.time_ns() // 1000),
        "PRIORITY": "6",
    }
    if from_systemd:
        entry["UNIT"] = unit
        entry["_SYSTEMD_UNIT"] = "init.scope"
    else:
        entry["_SYSTEMD_UNIT"] = unit
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / "journal.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        seq = 1
        if JOURNAL.exists():
            with open(JOURNAL, "rb") as f:
                seq += sum(1 for _ in f)
        entry["__CURSOR"] = f"s=fake0;i={seq:x};b=boot;m={seq:x}"
        with open(JOURNAL, "a") as f:
            f.write(json.dumps(entry) + "\n")


# --- the supervisor (what systemd itself would do) --------------------------------------------


def supervise(unit: str) -> None:
    state = load(unit) or {}
    argv, env, cwd = state["argv"], state["env"], state.get("cwd")
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, **env},
        cwd=cwd,
        start_new_session=True,
    )
    update(unit, ActiveState="active", SubState="running", ExecMainPID=proc.pid)
    assert proc.stdout is not None
    for line in proc.stdout:
        journal(unit, line.rstrip(b"\n"), proc.pid)
    code = proc.wait()
    stopping = (load(unit) or {}).get("ActiveState") == "deactivating"
    if code < 0:
        name = signal.Signals(-code).name.removeprefix("SIG")
        journal(
            unit,
            f"{unit}: Main process exited, code=killed, status={-code}/{name}",
            1,
            from_systemd=True,
        )
        ok = stopping and -code in (signal.SIGTERM, signal.SIGKILL)
        result = "success" if ok else "signal"
        status = -code
    else:
        word = "SUCCESS" if code == 0 else "FAILURE"
        journal(
            unit,
            f"{unit}: Main process exited, code=exited, status={code}/{word}",
            1,
            from_systemd=True,
        )
        result = "success" if code == 0 else "exit-code"
        status = code
    if result == "success":
        journal(unit, f"{unit}: Deactivated successfully.", 1, from_systemd=True)
        update(
            unit,
            ActiveState="inactive",
            SubState="dead",
            Result=result,
            ExecMainStatus=status,
            ExecMainPID=0,
        )
    else:
        journal(unit, f"{unit}: Failed with result '{result}'.", 1, from_systemd=True)
        update(
            unit,
            ActiveState="failed",
            SubState="failed",
            Result=result,
            ExecMainStatus=status,
            ExecMainPID=0,
        )
    if (load(unit) or {}).get("collect"):
        (UNITS / f"{unit}.json").unlink(missing_ok=True)


def launch(unit: str, argv: list[str], env: dict, cwd: str | None, collect: bool) -> int:
    exe = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=env.get("PATH"))
    if not exe or not os.access(exe, os.X_OK):
        journal(
            unit,
            f"{unit}: Failed to locate executable {argv[0]}: No such file or directory",
            1,
            from_systemd=True,
        )
        journal(
            unit,
            f"{unit}: Failed at step EXEC spawning {argv[0]}: No such file or directory",
            1,
            from_systemd=True,
        )
        journal(
            unit, f"{unit}: Main process exited, code=exited, status=203/EXEC", 1, from_systemd=True
        )
        journal(unit, f"{unit}: Failed with result 'exit-code'.", 1, from_systemd=True)
        if not collect:
            save(
                unit,
                {
                    "ActiveState": "failed",
                    "SubState": "failed",
                    "Result": "exit-code",
                    "ExecMainStatus": 203,
                    "ExecMainPID": 0,
                },
            )
        return 1
    save(
        unit,
        {
            "ActiveState": "activating",
            "SubState": "start",
            "Result": "success",
            "ExecMainStatus": 0,
            "ExecMainPID": 0,
            "argv": argv,
            "env": env,
            "cwd": cwd,
            "collect": collect,
        },
    )
    subprocess.Popen(
        [sys.executable, __file__, "--supervise", unit],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while (load(unit) or {}).get("ActiveState") == "activating" and time.monotonic() < deadline:
        time.sleep(0.01)
    return 0


def systemd_run(args: list[str]) -> int:
    unit, env, cwd, collect, quiet, props = None, {}, None, False, False, {}
    while args and args[0] != "--":
        a = args.pop(0)
        if a.startswith("--unit="):
            unit = unit_of(a.split("=", 1)[1])
        elif a.startswith("--setenv="):
            k, _, v = a.split("=", 1)[1].partition("=")
            env[k] = v
        elif a.startswith("--property="):
            k, _, v = a.split("=", 1)[1].partition("=")
            props[k] = v
        elif a.startswith("--working-directory="):
            cwd = a.split("=", 1)[1]
        elif a == "--collect":
            collect = True
        elif a in ("--quiet", "-q"):
            quiet = True
        else:
            print(f"systemd-run: unrecognized option '{a}'", file=sys.stderr)
            return 1
    argv = args[1:]
    unit = unit or f"run-u{os.getpid()}.service"
    if not argv:
        print("Command line to execute required.", file=sys.stderr)
        return 1
    if props.get("Type") != "exec":
        print("this double only implements Type=exec", file=sys.stderr)
        return 1
    cur = load(unit)
    if cur is not None:
        print(
            f"Failed to start transient service unit: Unit {unit} was already loaded or has "
            "a fragment file.",
            file=sys.stderr,
        )
        return 1
    path_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
    if launch(unit, argv, path_env, cwd, collect) != 0:
        print(
            f'Job for {unit} failed.\nSee "systemctl status {unit}" and '
            f'"journalctl -xeu {unit}" for details.',
            file=sys.stderr,
        )
        return 1
    if not quiet:
        print(f"Running as unit: {unit}", file=sys.stderr)
    return 0


def systemctl(args: list[str]) -> int:
    props: list[str] = []
    value = False
    signame = "TERM"
    rest: list[str] = []
    it = iter(args)
    for a in it:
        if a == "-p":
            props += next(it).split(",")
        elif a.startswith("--property="):
            props += a.split("=", 1)[1].split(",")
        elif a == "--value":
            value = True
        elif a in ("--no-block", "--quiet", "-q", "--no-pager"):
            pass
        elif a.startswith("--signal=") or a == "-s":
            signame = a.split("=", 1)[1] if "=" in a else next(it)
        else:
            rest.append(a)
    verb, names = rest[0], [unit_of(n) for n in rest[1:]]
    rc = 0
    for unit in names:
        st = load(unit)
        if verb == "show":
            full = {
                "ActiveState": "inactive",
                "SubState": "dead",
                "Result": "success",
                "ExecMainStatus": 0,
                "ExecMainPID": 0,
                "LoadState": "not-found",
            }
            if st is not None:
                full.update({k: st[k] for k in full if k in st})
                full["LoadState"] = "loaded"
            order = [
                "LoadState",
                "ExecMainPID",
                "ExecMainStatus",
                "Result",
                "ActiveState",
                "SubState",
            ]  # systemd's own order, not the order asked for
            for k in order:
                if not props or k in props:
                    print(full[k] if value else f"{k}={full[k]}")
        elif verb == "is-active":
            state = st["ActiveState"] if st else "inactive"
            print(state)
            rc = rc or (0 if state == "active" else 3)
        elif verb in ("stop", "kill"):
            if st is None:
                print(f"Failed to {verb} {unit}: Unit {unit} not loaded.", file=sys.stderr)
                rc = 5
                continue
            pid = int(st.get("ExecMainPID") or 0)
            if st["ActiveState"] in ACTIVE and pid:
                if verb == "stop":
                    update(unit, ActiveState="deactivating", SubState="stop-sigterm")
                sig = (
                    signal.Signals["SIG" + signame.removeprefix("SIG")]
                    if verb == "kill"
                    else signal.SIGTERM
                )
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, sig)
            if verb == "stop":  # blocks until the unit is inactive (TimeoutStopSec, then KILL)
                deadline = time.monotonic() + 90
                while (s := load(unit)) is not None and s.get("ActiveState") in ACTIVE:
                    if time.monotonic() > deadline and pid:
                        os.killpg(pid, signal.SIGKILL)
                    time.sleep(0.02)
        elif verb == "start":
            try:
                spec = json.loads((FILES / f"{unit}.json").read_text())
            except OSError:
                print(f"Failed to start {unit}: Unit {unit} not found.", file=sys.stderr)
                rc = 5
                continue
            if st is not None and st.get("ActiveState") in ACTIVE:
                continue
            if (
                launch(unit, spec["ExecStart"], {"PATH": os.environ.get("PATH", "")}, None, False)
                != 0
            ):
                print(
                    f"Job for {unit} failed because the control process exited with error code.",
                    file=sys.stderr,
                )
                rc = 1
        elif verb == "reset-failed":
            if st is None:
                print(
                    f"Failed to reset failed state of unit {unit}: Unit {unit} not loaded.",
                    file=sys.stderr,
                )
                rc = 1
            elif st.get("ActiveState") == "failed":
                (UNITS / f"{unit}.json").unlink(missing_ok=True)
        else:
            print(f"Unknown command verb {verb}.", file=sys.stderr)
            return 1
    return rc


def cursor_seq(cursor: str) -> int:
    for part in cursor.split(";"):
        if part.startswith("i="):
            return int(part[2:], 16)
    raise SystemExit("Failed to seek to cursor: Invalid argument")


def journalctl(args: list[str]) -> int:
    unit, after, follow, n = None, 0, False, "10"
    it = iter(args)
    for a in it:
        if a == "-u":
            unit = unit_of(next(it))
        elif a.startswith("--unit="):
            unit = unit_of(a.split("=", 1)[1])
        elif a == "-o":
            if next(it) != "json":
                return 1
        elif a.startswith("--after-cursor="):
            after = cursor_seq(a.split("=", 1)[1])
            n = "all"
        elif a == "--after-cursor":
            after = cursor_seq(next(it))
            n = "all"
        elif a == "-f":
            follow = True
        elif a == "-n":
            n = next(it)
        elif a in ("--no-pager", "-q"):
            pass

    def match(e: dict) -> bool:
        return unit is None or unit in (e.get("_SYSTEMD_UNIT"), e.get("UNIT"))

    pos = 0
    entries: list[dict] = []
    if JOURNAL.exists():
        with open(JOURNAL) as f:
            data = f.read()
        pos = len(data.encode())
        entries = [json.loads(x) for x in data.splitlines() if x]
    sel = [e for e in entries if match(e) and cursor_seq(e["__CURSOR"]) > after]
    if n != "all":
        sel = sel[-int(n) :] if int(n) else []
    for e in sel:
        print(json.dumps(e), flush=True)
    while follow:
        time.sleep(0.05)
        if not JOURNAL.exists():
            continue
        with open(JOURNAL, "rb") as f:
            f.seek(pos)
            chunk = f.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        pos += len(complete)
        for x in complete.decode().splitlines():
            e = json.loads(x)
            if match(e) and cursor_seq(e["__CURSOR"]) > after:
                print(json.dumps(e), flush=True)
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--supervise"]:
        supervise(sys.argv[2])
        return 0
    name, args = sys.argv[2], sys.argv[3:]  # "--tool NAME ARGS..."
    try:
        if name == "systemd-run":
            return systemd_run(args)
        if name == "systemctl":
            return systemctl(args)
        if name == "journalctl":
            return journalctl(args)
    except BrokenPipeError:
        return 0
    print(f"unknown tool {name}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())


def install(fakebin: Path) -> None:
    """Put the three commands into ``fakebin`` (scripts running this file with this Python)."""
    for tool in ("systemd-run", "systemctl", "journalctl"):
        p = fakebin / tool
        p.write_text(f'#!/bin/sh\nexec {sys.executable} {__file__} --tool {tool} "$@"\n')
        p.chmod(0o755)

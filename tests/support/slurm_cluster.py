"""A real one-node Slurm cluster on this machine, for the tests: munged, slurmctld and
slurmd (Debian's slurm-wlm) as plain foreground processes, with every file of theirs
(config, key, socket, state, spool, logs) under one directory of the test's own, on ports
picked free. The node has eight fake GPUs: ``gres.conf`` names character devices made in
that directory with /dev/null's numbers (slurmd only wants devices to number them; nothing
opens them), so Slurm allocates them, and sets ``CUDA_VISIBLE_DEVICES``, as it does real ones.

Clients find the cluster through ``SLURM_CONF``: ``env`` is what a process (or a login
shell, through the plan's ``slurm.env``) needs to talk to it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

GPUS = 8
CPUS = 16  # more than the machine has: slurmd is told to trust the config (config_overrides)


@dataclass
class SlurmCluster:
    root: Path
    node: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            check=check,
            env={**os.environ, **self.env},
            timeout=60,
        )

    def jobs(self) -> dict[str, dict[str, str]]:
        """Every job the controller knows: id -> state, name, comment, node, reason."""
        out = self.run("squeue", "-h", "-t", "all", "-o", "%i|%T|%j|%k|%N|%r").stdout
        jobs = {}
        for line in out.splitlines():
            jid, state, name, comment, node, reason = line.split("|", 5)
            jobs[jid] = {
                "state": state,
                "name": name,
                "comment": comment,
                "node": node,
                "reason": reason,
            }
        return jobs

    def cancel_all(self) -> None:
        self.run("scancel", "-u", os.environ.get("USER") or "root", check=False)

    def log_tail(self, n: int = 40) -> str:
        out = []
        for name in ("slurmctld.log", "slurmd.log"):
            p = self.root / "log" / name
            if p.exists():
                out.append(f"--- {name}\n" + "\n".join(p.read_text().splitlines()[-n:]))
        return "\n".join(out)

    def ours(self) -> list[int]:
        """Processes this cluster started (step daemons, the jobs' tools and servers): they
        carry its SLURM_CONF in their environment."""
        mark = f"SLURM_CONF={self.conf}".encode()
        own = {p.pid for p in self.procs}
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) in own:
                continue
            try:
                env = Path(entry.path, "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if mark in env:
                found.append(int(entry.name))
        return found

    def stop(self) -> None:
        self.cancel_all()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # let the jobs end under their step daemons
            states = {j["state"] for j in self.jobs().values()} if self.procs else set()
            if not states & {"RUNNING", "COMPLETING", "CONFIGURING"}:
                break
            time.sleep(0.5)
        for pid in self.ours():  # a job's process that outlived its cancel
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self.procs.clear()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, ok, timeout_s: float, cluster: SlurmCluster) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not ok():
        for proc in cluster.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{what}: {proc.args[0]} exited\n{cluster.log_tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} within {timeout_s:g}s\n{cluster.log_tail()}")
        time.sleep(0.2)


def start_cluster(root: Path) -> SlurmCluster:
    """Start munged, slurmctld and slurmd under ``root``; returns once the node is idle."""
    for d in ("munge", "state", "spool", "log", "dev"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    for i in range(GPUS):
        dev = root / "dev" / f"nvidia{i}"
        if not dev.exists():
            os.mknod(dev, 0o600 | 0o020000, os.makedev(1, 3))  # a character device, like /dev/null
    node = socket.gethostname().split(".")[0]
    sock = root / "munge" / "munge.sock"
    node_line = (
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={CPUS} Boards=1 SocketsPerBoard=1 "
        f"CoresPerSocket={CPUS} ThreadsPerCore=1 RealMemory=8000 Gres=gpu:{GPUS} State=UNKNOWN"
    )
    conf = f"""\
ClusterName=specbench
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
GresTypes=gpu
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SlurmdParameters=config_overrides
MinJobAge=600
KillWait=10
{node_line}
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
    (root / "slurm.conf").write_text(conf)
    gres = f"AutoDetect=off\nName=gpu File={root}/dev/nvidia[0-{GPUS - 1}]\n"
    (root / "gres.conf").write_text(gres)
    cluster = SlurmCluster(root, node)
    env = {**os.environ, **cluster.env}

    def spawn(*argv: str, log: str) -> None:
        out = open(root / "log" / log, "wb")  # noqa: SIM115
        cluster.procs.append(
            subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, env=env)
        )

    try:
        spawn(
            "munged",
            "-F",
            "-f",
            f"--key-file={key}",
            f"--socket={sock}",
            f"--pid-file={root / 'munge' / 'munged.pid'}",
            f"--log-file={root / 'munge' / 'munged.log'}",
            f"--seed-file={root / 'munge' / 'seed'}",
            log="munged.out",
        )
        _wait("munged did not start", sock.exists, 20, cluster)
        spawn("slurmctld", "-D", "-i", "-f", str(root / "slurm.conf"), log="slurmctld.out")
        _wait(
            "slurmctld did not answer",
            lambda: cluster.run("sinfo", "-h", check=False).returncode == 0,
            30,
            cluster,
        )
        spawn("slurmd", "-D", "-f", str(root / "slurm.conf"), log="slurmd.out")
        _wait(
            "the node did not become idle",
            lambda: "idle" in cluster.run("sinfo", "-h", "-o", "%T", check=False).stdout,
            30,
            cluster,
        )
    except BaseException:
        cluster.stop()
        raise
    return cluster

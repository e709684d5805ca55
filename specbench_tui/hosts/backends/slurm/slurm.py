"""A Slurm cluster as the campaign reaches it: Slurm's own commands and the job files on the
shared filesystem, all through the login node's SSH connection (``SshConnection``).

Nothing is installed on the cluster for this: ``sbatch``, ``squeue``, ``scontrol``,
``scancel`` and ``sacct`` are the cluster's, and files are read and written with ``stat``,
``tail``, ``head``, ``base64``, ``cat`` and ``mv``. The plan's values reach the login shell
quoted. ``squeue``'s ``%`` format is used, not ``--json``, whose schema changes between Slurm
releases.

Submitting is the one step that must not happen twice: the remote script first asks squeue
whether a job with the submission's comment exists (a retry after a dropped connection, a
coordinator that died between ``sbatch`` and writing the id), and writes the id next to the
script in the same command.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
from collections.abc import Iterable, Mapping, Sequence

from specbench_tui import __version__
from specbench_tui.hosts.backends.slurm.slurm_jobs import (
    campaign_dir,
    campaign_key,
    job_script,
    sbatch_argv,
)
from specbench_tui.hosts.backends.slurm.slurm_table import SlurmSpec
from specbench_tui.hosts.batch import BatchError, JobEnd, JobInfo, JobStates
from specbench_tui.hosts.host import HostReport
from specbench_tui.hosts.shell import quote, remote_path
from specbench_tui.hosts.ssh import (
    CommandResult,
    SshConnectError,
    SshConnection,
    SshError,
    quote_command,
)
from specbench_tui.results.cells import ServiceGroup

#: Job states in which a job still holds (or waits for) an allocation, or comes back.
ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
        "SPECIAL_EXIT",
    }
)
#: Ends that say the node or the scheduler, not the job, ended it: worth a requeue even when
#: the tool never started.
NODE_ENDS = frozenset({"NODE_FAIL", "BOOT_FAIL", "PREEMPTED"})
#: Words in sbatch's errors that say the controller did not answer (worth a retry), not that
#: the request is wrong.
TRANSIENT = ("unable to contact", "timed out", "try again", "temporarily", "connection refused")
#: Most bytes of one file read per poll (the rest comes with the next).
READ_LIMIT = 4 << 20
_SQUEUE_FORMAT = "%i|%T|%N|%r|%k"


class SlurmError(BatchError):
    """A Slurm command failed; ``reason`` is its own last line."""


#: What the scheduler needs to know of Slurm's job states.
STATES = JobStates(
    pending="PENDING",
    running=frozenset({"RUNNING", "COMPLETING"}),
    cancelled=frozenset({"CANCELLED"}),
    timed_out=frozenset({"TIMEOUT"}),
    node_ends=NODE_ENDS,
)
#: The reason squeue gives a job its user held.
HELD_REASON = "JobHeldUser"


def parse_squeue(text: str) -> dict[str, JobInfo]:
    out = {}
    for line in text.splitlines():
        parts = line.split("|", 4)
        if len(parts) != 5 or not parts[0].strip():
            continue
        jid, state, node, reason, comment = (p.strip() for p in parts)
        node = "" if node in ("(null)", "n/a") else node
        reason = "" if reason in ("None", "(null)") else reason
        word = state.split()[0] if state else ""
        out[jid] = JobInfo(
            jid,
            word,
            node,
            reason,
            comment,
            active=word in ACTIVE_STATES,
            held=reason == HELD_REASON,
        )
    return out


def parse_scontrol_job(text: str) -> JobEnd | None:
    fields = dict(re.findall(r"(\w+)=(\S*)", text))
    if "JobState" not in fields:
        return None
    restarts = fields.get("Restarts", "0")
    node = fields.get("NodeList", "")
    return JobEnd(
        state=fields["JobState"],
        exit_code=fields.get("ExitCode", ""),
        restarts=int(restarts) if restarts.isdigit() else 0,
        node="" if node == "(null)" else node,
    )


def parse_sacct(text: str) -> JobEnd | None:
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3 and parts[0]:
            return JobEnd(state=parts[0].split()[0], exit_code=parts[1], node=parts[2])
    return None


def parse_chunks(text: str, n: int) -> list[bytes | None]:
    """What ``read_script`` printed for ``n`` files: None for a missing file."""
    lines = text.split("\n")
    out: list[bytes | None] = []
    for i in range(n):
        head = lines[2 * i].strip() if 2 * i < len(lines) else "-"
        body = lines[2 * i + 1].strip() if 2 * i + 1 < len(lines) else ""
        if head == "-" or not head.isdigit():
            out.append(None)
            continue
        try:
            out.append(base64.b64decode(body) if body else b"")
        except (binascii.Error, ValueError):
            out.append(b"")
    return out


def read_script(files: Sequence[tuple[str, int]], limit: int = READ_LIMIT) -> str:
    """Shell: for each ``(path, offset)`` the bytes past ``offset`` (at most ``limit``), as a
    count line and a base64 line; ``-`` for a file that is not there."""
    fn = (
        'r() { if s=$(stat -c %s -- "$1" 2>/dev/null); then n=$((s-$2)); '
        f'[ "$n" -gt {limit} ] && n={limit}; [ "$n" -lt 0 ] && n=0; echo "$n"; '
        'if [ "$n" -gt 0 ]; then tail -c +$(($2+1)) -- "$1" | head -c "$n" | base64 -w0; fi; '
        "echo; else echo -; echo; fi; }"
    )
    calls = "; ".join(f"r {remote_path(p)} {int(off)}" for p, off in files)
    return f"{fn}; {calls}"


def write_script(files: Mapping[str, str]) -> tuple[str, str]:
    """Shell and its input that write ``files`` (path -> text) in one command: the input is
    the texts one after the other, kept whole in a temp file first, then each cut out of it
    by its byte offset into its own temp file, renamed into place. A file is never seen half
    written; one that fails stops the rest (the caller writes them all again)."""
    q = remote_path
    data = "".join(files.values())
    dirs = sorted({path.rsplit("/", 1)[0] or "/" for path in files})
    first = next(iter(files))
    lines = [
        "set -e",
        f"mkdir -p -- {' '.join(q(d) for d in dirs)}",
        f"t={q(first)}.in.$$.tmp",
        "trap 'rm -f -- \"$t\"' EXIT",
        # An empty input sends no EOF (asyncssh writes EOF only after some data).
        'cat > "$t"' if data else ': > "$t"',
        'w() { tail -c +$(($2 + 1)) -- "$t" | head -c "$3" > "$1.tmp"; mv -- "$1.tmp" "$1"; }',
    ]
    at = 0
    for path, text in files.items():
        n = len(text.encode("utf-8"))
        lines.append(f"w {q(path)} {at} {n}")
        at += n
    return "\n".join(lines), data


class SlurmCluster:
    """The login node of one ``[hosts.NAME] slurm`` table, as a ``BatchSystem``. ``env`` goes
    in front of every Slurm command (PATH where a module would set it, SLURM_CONF)."""

    states = STATES
    errors: tuple[type[Exception], ...] = (SshError, SlurmError)
    submit_command = "sbatch"
    queue_command = "squeue"
    cancel_command = "scancel"

    def __str__(self) -> str:
        return str(self.ssh)

    def __init__(
        self,
        name: str,
        login: str,
        *,
        env: Mapping[str, str] | None = None,
        ssh_config: str | None = None,
        ssh: SshConnection | None = None,
    ) -> None:
        self.name = name
        self.env = dict(env or {})
        self.ssh = ssh or SshConnection(login, config=ssh_config)
        self.user_filter = '-u "$(id -un)"'

    async def close(self) -> None:
        await self.ssh.close()

    async def run(
        self,
        command: str | Sequence[str],
        *,
        input: str | None = None,
        timeout_s: float = 60.0,
    ) -> CommandResult:
        line = command if isinstance(command, str) else quote_command(command)
        if self.env:  # for the whole script, not only its first command (as ``env K=V`` is)
            line = "export " + " ".join(quote(f"{k}={v}") for k, v in self.env.items())
            line += "\n" + (command if isinstance(command, str) else quote_command(command))
        return await self.ssh.run(line, input=input, timeout_s=timeout_s)

    async def _checked(self, command: str | Sequence[str], **kw: object) -> CommandResult:
        res = await self.run(command, **kw)  # type: ignore[arg-type]
        if not res.ok:
            err = (res.stderr.strip().splitlines() or [f"exit status {res.exit_status}"])[-1]
            raise SlurmError(err, transient=any(w in err.lower() for w in TRANSIENT))
        return res

    # --- jobs -------------------------------------------------------------------------------

    async def submit(
        self, argv: Sequence[str], *, comment: str, id_file: str, timeout_s: float = 120.0
    ) -> str:
        """Submit once: the id of the job carrying ``comment`` if one exists, else sbatch's
        new one; written to ``id_file``. An sbatch that fails or answers no id may still have
        submitted the job (a lost reply; one that exits 1 saying nothing), so the job is
        looked up by its comment before the failure is believed: a group never gets two
        jobs. Raises SlurmError (``transient`` when the controller did not answer)."""
        q = quote
        script = (
            f"ours() {{ jobs=$(squeue -h -t all {self.user_filter} -o '%i|%k') || return 1\n"
            f"  printf '%s\\n' \"$jobs\" | awk -F'|' -v c={q(comment)} "
            "'$2 == c {print $1}' | tail -n 1; }\n"
            "old=$(ours) || exit 1\n"
            'if [ -n "$old" ]; then id=$old; '
            f"else id=$({' '.join(q(a) for a in argv)}); rc=$?; id=${{id%%;*}}\n"
            '  if [ "$rc" -ne 0 ] || [ -z "$id" ]; then\n'
            '    id=$(ours) || exit "$(( rc ? rc : 1 ))"\n'
            '    if [ -z "$id" ] && [ "$rc" -ne 0 ]; then exit "$rc"; fi\n'
            '    [ -z "$id" ] || echo "sbatch ended with status $rc, and job $id carries this '
            "submission's comment: taken as its job\" >&2\n"
            "  fi\n"
            "fi\n"
            "id=${id%%;*}\n"
            f'printf "%s\\n" "$id" > {q(id_file)}.tmp && mv {q(id_file)}.tmp {q(id_file)}\n'
            'printf "%s\\n" "$id"'
        )
        res = await self._checked(script, timeout_s=timeout_s)
        words = res.stdout.split()
        if not words or not words[-1].split("_")[0].isdigit():
            raise SlurmError(f"sbatch gave no job id (stdout {res.stdout.strip()!r})")
        return words[-1]

    async def queue(self) -> dict[str, JobInfo]:
        """This user's jobs the controller knows (finished ones for a few minutes too)."""
        res = await self._checked(f"squeue -h -t all {self.user_filter} -o {quote(_SQUEUE_FORMAT)}")
        return parse_squeue(res.stdout)

    async def ended(self, job_id: str) -> JobEnd:
        res = await self.run(["scontrol", "show", "job", "-o", job_id])
        end = parse_scontrol_job(res.stdout) if res.ok else None
        if end is not None:
            return end
        res = await self.run(
            ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,ExitCode,NodeList"]
        )
        end = parse_sacct(res.stdout) if res.ok else None
        return end or JobEnd("UNKNOWN")

    @staticmethod
    def _if_ours(job_id: str, comment: str | None, command: Sequence[str]) -> str:
        """``command`` run only when the controller's job ``job_id`` still carries
        ``comment``: after a controller lost its state, an id may name someone else's job.
        A job the controller no longer lists is left to the command (it says so itself)."""
        line = quote_command(command)
        if comment is None:
            return line
        q = quote
        return (
            f"c=$(squeue -h -t all -j {q(job_id)} -o %k 2>/dev/null)\n"
            f'if [ -n "$c" ] && [ "$c" != {q(comment)} ]; then '
            f'echo "job {job_id} is not this campaign\'s (its comment is $c)" >&2; exit 3; fi\n'
            + line
        )

    async def cancel(
        self,
        job_id: str,
        *,
        signal: str | None = None,
        batch: bool = False,
        comment: str | None = None,
    ) -> None:
        argv = ["scancel"]
        if signal:
            argv.append(f"--signal={signal}")
        if batch:
            argv.append("--batch")
        await self.run(self._if_ours(job_id, comment, [*argv, job_id]))

    async def stop(self, job_id: str, *, comment: str | None = None) -> None:
        """SIGTERM to the job's batch shell, where the tool runs: it stops its server and
        keeps what it measured."""
        await self.cancel(job_id, signal="TERM", batch=True, comment=comment)

    async def requeue(self, job_id: str, *, comment: str | None = None) -> None:
        """Put an ended (or running) job back in the queue, eligible at once: Slurm holds a
        requeued job back two minutes, which the coordinator, requeueing a job whose node
        it saw released, does not need. With ``comment``, only the job that carries it."""
        await self._checked(self._if_ours(job_id, comment, ["scontrol", "requeue", job_id]))
        await self.run(["scontrol", "update", f"jobid={job_id}", "starttime=now"])

    async def hold(self, job_ids: Iterable[str]) -> None:
        ids = ",".join(job_ids)
        if ids:
            await self.run(["scontrol", "hold", ids])

    async def release(self, job_ids: Iterable[str]) -> None:
        ids = ",".join(job_ids)
        if ids:
            await self.run(["scontrol", "release", ids])

    # --- files on the shared filesystem -------------------------------------------------------

    async def write_files(self, files: Mapping[str, str]) -> None:
        """Write text files whole (temp file, then rename), creating their directories: all
        of them in one command, their texts one after the other on its input."""
        if not files:
            return
        script, data = write_script(files)
        await self._checked(script, input=data or None, timeout_s=120)

    async def append_line(self, path: str, line: str) -> None:
        await self._checked(f"printf '%s\\n' {quote(line)} >> {remote_path(path)}")

    async def read_new(
        self, files: Sequence[tuple[str, int]], limit: int = READ_LIMIT
    ) -> list[bytes | None]:
        """The bytes of each file past its offset, in one round trip; None where a file is
        missing."""
        if not files:
            return []
        res = await self.run(read_script(files, limit), timeout_s=120)
        return parse_chunks(res.stdout, len(files))

    async def list_dirs(self, dirs: Sequence[str]) -> list[list[str]]:
        """The names in each directory, in one round trip; empty for one not there."""
        if not dirs:
            return []
        calls = "; ".join(
            f"echo /{i}; ls -1 -- {remote_path(d)} 2>/dev/null" for i, d in enumerate(dirs)
        )
        res = await self._checked(calls + "; :")
        out: list[list[str]] = [[] for _ in dirs]
        at = -1
        for line in res.stdout.splitlines():
            if line.startswith("/") and line[1:].isdigit():
                at = int(line[1:])
            elif 0 <= at < len(out) and line:
                out[at].append(line)
        return out

    async def ended_all(self, job_ids: Sequence[str], *, at_once: int = 4) -> list[JobEnd]:
        """``ended`` of several jobs, ``at_once`` of them in flight together (each is its own
        channel of the one connection; sshd allows ten sessions per connection)."""
        gate = asyncio.Semaphore(max(1, at_once))

        async def one(job_id: str) -> JobEnd:
            async with gate:
                return await self.ended(job_id)

        return list(await asyncio.gather(*(one(j) for j in job_ids)))

    async def read_bytes(self, path: str) -> bytes | None:
        """A whole file; None when it is not there. Raises SlurmError when it is there but
        cannot be read (the caller tries again)."""
        q = remote_path(path)
        res = await self.run(
            f"if [ -e {q} ]; then base64 -w0 -- {q} && echo; else echo -; fi", timeout_s=300
        )
        text = res.stdout.strip()
        if res.ok and text == "-":
            return None
        try:
            if not res.ok:
                raise ValueError(res.stderr.strip() or f"exit status {res.exit_status}")
            return base64.b64decode(text)
        except (binascii.Error, ValueError) as exc:
            raise SlurmError(f"cannot read {path} on {self.ssh}: {exc}") from None

    async def submissions(self, groups_dir: str) -> dict[str, list[int]]:
        """The submission directories already there, by group (``<dir>/<group>/<n>/job.json``)."""
        res = await self.run(
            f"cd {remote_path(groups_dir)} 2>/dev/null && ls -1d -- */*/job.json 2>/dev/null"
        )
        out: dict[str, list[int]] = {}
        for line in res.stdout.splitlines():
            parts = line.strip().split("/")
            if len(parts) == 3 and parts[1].isdigit():
                out.setdefault(parts[0], []).append(int(parts[1]))
        return {g: sorted(ns) for g, ns in out.items()}

    # --- before the campaign --------------------------------------------------------------------

    async def check(
        self,
        *,
        shared_dir: str,
        venv: str,
        tests: Sequence[tuple[str, Sequence[str], str]],
        version: str,
    ) -> HostReport:
        """Reach the login node and ask what a campaign will need: Slurm's commands and its
        controller, a writable shared directory, this tool in the venv, and ``sbatch
        --test-only`` of one job script per TP size (``tests``: label, argv, script), which
        catches a wrong partition, account, QoS, time limit or GPU count. Submits nothing."""
        report = HostReport(self.name, "slurm")
        try:
            await self.ssh.connection()
        except SshConnectError as e:
            report.problems.append(e.reason)
            return report
        report.facts.append(f"login node {self.ssh}")
        try:
            res = await self.run("sbatch --version && squeue -h -o %i -j 0 >/dev/null 2>&1; :")
        except SshError as e:
            report.problems.append(e.reason)
            return report
        if not res.ok or not res.stdout.strip():
            err = (res.stderr.strip().splitlines() or ["sbatch not found"])[-1]
            report.problems.append(f"Slurm's sbatch does not run on the login node: {err}")
            return report
        report.facts.append(res.stdout.strip().splitlines()[0])
        res = await self.run(f"squeue -h {self.user_filter} -o %i")
        if not res.ok:
            err = (res.stderr.strip().splitlines() or [f"exit {res.exit_status}"])[-1]
            report.problems.append(f"squeue cannot reach the Slurm controller: {err}")
            return report
        q = quote
        res = await self.run(f"mkdir -p {q(shared_dir)} && test -w {q(shared_dir)}")
        if not res.ok:
            report.problems.append(f"shared directory {shared_dir} cannot be created or written")
        else:
            report.facts.append(f"shared directory {shared_dir}")
        tool = f"{venv.rstrip('/')}/bin/specbench-tui"
        res = await self.run(
            f"test -x {q(tool)} && {q(venv.rstrip('/') + '/bin/python')} -c "
            "'import specbench_tui; print(specbench_tui.__version__)'"
        )
        if not res.ok:
            report.problems.append(
                f"{tool} is not there (install this tool into the venv the plan names: "
                f"python3 -m venv {venv} && {venv}/bin/pip install specbench-tui)"
            )
        else:
            theirs = res.stdout.strip()
            report.facts.append(f"specbench-tui {theirs} in {venv}")
            if theirs != version:
                report.warnings.append(
                    f"the cluster's specbench-tui is {theirs}, this one is {version}: the "
                    "jobs run that version"
                )
        for label, argv, script in tests:
            res = await self.run([*argv[:1], "--test-only", *argv[1:]], input=script)
            text = (res.stderr.strip() or res.stdout.strip()).splitlines()
            if res.ok:
                report.facts.append(f"{label}: {text[-1] if text else 'accepted'}")
            else:
                report.problems.append(f"{label}: {text[-1] if text else 'sbatch refused it'}")
        return report


def _tests(
    campaign: str, slurm: SlurmSpec, groups: list[ServiceGroup]
) -> list[tuple[str, list[str], str]]:
    """One ``sbatch --test-only`` per TP size: what the cluster says of such a job."""
    key = campaign_key(slurm, campaign)
    seen: dict[int, ServiceGroup] = {}
    for g in groups:
        seen.setdefault(g.tp, g)
    return [
        (
            f"TP{tp} job ({g.id})",
            sbatch_argv(slurm, "")[:-1],
            job_script(slurm, campaign, g, 1, key),
        )
        for tp, g in sorted(seen.items())
    ]


def cluster_of(slurm: SlurmSpec, host: str, ssh_config: str | None) -> SlurmCluster:
    """The login node of the plan's Slurm host ``host``."""
    return SlurmCluster(host, slurm.login, env=slurm.env, ssh_config=ssh_config)


async def check_slurm(
    slurm: SlurmSpec, host: str, campaign: str, groups: list[ServiceGroup], ssh_config: str | None
) -> HostReport:
    """``--dry-run --check`` of a Slurm host: submits nothing."""
    cluster = cluster_of(slurm, host, ssh_config)
    try:
        return await cluster.check(
            shared_dir=campaign_dir(slurm, campaign),
            venv=slurm.venv,
            tests=_tests(campaign, slurm, groups),
            version=__version__,
        )
    finally:
        await cluster.close()

"""A server that prints a 50 MB line without a newline, followed over a real sshd in process
mode: the line is cut at 1 MiB in the campaign's copy of the log, the lines after it arrive,
the cells finish, and the tool spends time linear in the bytes on it (the follower once joined
and split the whole pending line at every chunk: 36 s of event loop for 50 MB). A NUL in a
plan value meant for the host is a located plan error before any link is opened."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, free_port
from sshd_fixture import Sshd, sshd  # noqa: F401 (the fixture)

from specbench_tui.hosts.lines import CUT_MARK, MAX_LINE

pytestmark = pytest.mark.system

LINE_BYTES = 50_000_000
# The server's start is wrapped: one line of LINE_BYTES 'x' and no newline (in 1 MB pieces),
# then a short line, then the server, all into the log the campaign follows over SSH (before
# the server, so that none of its own lines lands inside the long one).
WRAPPER = (
    'i=0; while [ $i -lt {pieces} ]; do head -c 1000000 /dev/zero | tr "\\000" x; '
    'i=$((i+1)); done; echo; echo after-the-long-line; exec "$@"'
)

PLAN = """\
[campaign]
name = "longline"
baseline = "ar"

[hosts.box]
ssh = "sbtest"
gpus = 4
services = "process"
workdir = "{workdir}"

[server]
python = "{python}"
model = "{model}"
port = {port}
launch = ["sh", "-c", '{wrapper}', "sh",
          "{{python}}", "-m", "specbench_tui.sim", "--model-path", "{{model}}", "--tp-size",
          "{{tp}}", "--host", "127.0.0.1", "--port", "{{port}}", "--speed", "10",
          "--sim-require-model"]
ready_timeout = "60s"

[configs.ar]

[matrix]
configs = ["ar"]
tp = [1]

[workloads.single]
kind = "single"
prompts = ["chat", "code"]
samples = 4
max_tokens = [128, 256]
"""


def _no_tex(where: Path) -> str:
    """A PATH entry whose TeX engines fail at once: the PDF is not what this test measures."""
    from specbench_tui.report.render import TEX_ENGINES

    where.mkdir(exist_ok=True)
    for name in TEX_ENGINES:
        (where / name).write_text("#!/bin/sh\nexit 1\n")
        (where / name).chmod(0o755)
    return str(where)


def _cli(plan: Path, results: Path, sshd: Sshd) -> list[str]:  # noqa: F811
    cli = [sys.executable, "-m", "specbench_tui", str(plan), "--headless"]
    return [*cli, "--results", str(results), "--ssh-config", str(sshd.config)]


def _run(plan: Path, results: Path, sshd: Sshd, tmp_path: Path) -> tuple[int, str, float]:  # noqa: F811
    """The headless run's exit status, output, and the CPU seconds the tool itself used."""
    env = os.environ | {"PATH": f"{_no_tex(tmp_path / 'no-tex')}:{os.environ['PATH']}"}
    out = tmp_path / "headless.out"
    with open(out, "w") as f:
        proc = subprocess.Popen(
            _cli(plan, results, sshd),
            stdout=f,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=env,
        )
        deadline = time.monotonic() + 240
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"no end in 240 s: {out.read_text()[-3000:]}")
            time.sleep(0.2)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, out.read_text(), usage.ru_utime + usage.ru_stime


def test_a_50_mb_line_without_newline_over_ssh(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    model = tmp_path / "model"
    model.mkdir()
    plan = tmp_path / "plan.toml"
    plan.write_text(
        PLAN.format(
            workdir=tmp_path / "remote",
            python=sys.executable,
            model=model,
            port=free_port(),
            wrapper=WRAPPER.format(pieces=LINE_BYTES // 1_000_000),
        )
    )
    code, out, cpu_s = _run(plan, tmp_path / "res", sshd, tmp_path)
    print(f"\n[long line] tool CPU {cpu_s:.1f} s for a {LINE_BYTES / 1e6:.0f} MB line")
    assert code == 0, out[-3000:]
    root = tmp_path / "res" / "longline"
    events = [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]
    assert sum(e["event"] == "cell_finished" for e in events) == 4, out[-3000:]
    remote = tmp_path / "remote" / "longline" / "logs" / "box.ar.tp1.log"
    assert remote.stat().st_size > LINE_BYTES  # the host's log holds the line whole
    lines = (root / "logs" / "box.ar.tp1.log").read_bytes().split(b"\n")
    long = [x for x in lines if x.startswith(b"xxxx")]
    assert long == [b"x" * MAX_LINE + CUT_MARK], [len(x) for x in long]
    assert b"after-the-long-line" in lines  # what followed it came through
    # Reading 50 MB over SSH is about a second of CPU; the quadratic split was over 30.
    assert cpu_s < 25, f"the tool used {cpu_s:.1f} s of CPU"


@pytest.mark.parametrize(
    "where,line",
    [
        ("args", 'args = ["--note", "a\\u0000b"]'),
        ("env", 'env = { NOTE = "a\\u0000b" }'),
        ("model", 'model = "/models/a\\u0000b"'),
    ],
)
def test_a_nul_meant_for_the_host_is_a_plan_error_not_a_link_drop(
    sshd: Sshd,  # noqa: F811
    tmp_path: Path,
    where: str,
    line: str,
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    text = PLAN.format(
        workdir=tmp_path / "remote",
        python=sys.executable,
        model=model,
        port=free_port(),
        wrapper=WRAPPER.format(pieces=0),
    )
    text = (
        text.replace(f'model = "{model}"\n', f"{line}\n")
        if where == "model"
        else text.replace("[configs.ar]\n", f"[configs.ar]\n{line}\n")
    )
    plan = tmp_path / "plan.toml"
    plan.write_text(text)
    proc = subprocess.run(
        _cli(plan, tmp_path / "res", sshd),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (err,) = proc.stderr.strip().splitlines()
    assert f"plan.toml:{text.splitlines().index(line) + 1}:" in err
    assert "holds a NUL character" in err
    assert not (tmp_path / "res").exists()  # refused before anything ran

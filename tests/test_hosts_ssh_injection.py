"""No plan value reaches a shell: every plan field that ends up in a command run on an SSH
host (the host's workdir, the server's python, model, args and env) is fed shell
metacharacters (``;``, ``$()``, backticks, quotes, a newline) that would each create a file if
a shell ever read them as syntax. A whole campaign runs, in process mode over a real sshd and
in systemd mode on a real systemd; no file appears, and the server records, from inside, that
each value arrived exactly as written. Fields that cannot hold such a value are refused when
the plan is read (ssh destination, stop_before); ``prepare`` is a shell command by design."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from sshd_fixture import Sshd, sshd  # noqa: F401 (the fixture)
from support.ssh_scenarios import HeadlessRun, PlanValues, kill_pids, servers_left, tally
from support.systemd_host import SystemdHost, systemd_host  # noqa: F401 (the fixture)

pytestmark = pytest.mark.system


def payload(tag: str, canary: str | None = None) -> str:
    """Each of ``;``, ``$()``, backticks and a newline would run ``touch`` if a shell parsed
    the value; quotes of both kinds would unbalance any quoting done by hand. Without a
    ``/`` (``canary`` None) the value fits in one path component: the file would land next
    to the directory ``$SPECBENCH_SIM_NVML`` names, which both test hosts' logins set."""
    where = f"{canary}/{tag}" if canary else f"$SPECBENCH_SIM_NVML.{tag}"
    touch = f"touch\t{where}"  # a tab splits words as a space does (and braces are placeholders)
    return f"v;{touch}1;$({touch}2)`{touch}3`'\"\n{touch}4 #"


RECORDER = """#!{python}
import json, os, sys
with open(os.environ["SPECBENCH_TEST_RECORD"], "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd(),
                        "value": os.environ.get("SPECBENCH_TEST_VALUE")}}) + "\\n")
os.execv({python!r}, [{python!r}, *sys.argv[1:]])
"""


def injected_plan(base: Path, canary: Path, name: str, alias: str, services: str) -> PlanValues:
    path_part = payload("P")  # no "/": a file or directory name
    # A program path cannot hold a newline (systemd refuses to run one; the plan check says
    # so, see below); every other character stays.
    python = base / "bin" / path_part.replace("\n", ";")
    python.parent.mkdir(parents=True)
    python.write_text(RECORDER.format(python=sys.executable))
    python.chmod(0o755)
    model = base / "models" / path_part
    model.mkdir(parents=True)
    env = {
        "SPECBENCH_TEST_RECORD": str(base / "record.jsonl"),
        "SPECBENCH_TEST_VALUE": payload("E", str(canary)),
    }
    return PlanValues(
        name=name,
        alias=alias,
        services=services,
        workdir=str(base / "work" / path_part),
        model=str(model),
        python=str(python),
        args=["--note", payload("A", str(canary)), "--note-path", path_part],
        env=env,
        tp=[1],
        samples=1,
        max_tokens=[8],
    )


def check_arrived(values: PlanValues, base: Path, canary: Path) -> None:
    made = sorted(str(p) for p in canary.parent.glob("*") if ".P" in p.name or p.parent == canary)
    made += sorted(str(p) for p in canary.glob("*"))
    assert not made, f"a plan value was run as shell syntax: {made}"
    records = [json.loads(x) for x in (base / "record.jsonl").read_text().splitlines()]
    servers = [r for r in records if r["argv"][:2] == ["-m", "specbench_tui.sim"]]
    assert servers, records
    for r in servers:
        argv = r["argv"]
        assert argv[argv.index("--model-path") + 1] == values.model
        assert argv[argv.index("--note") + 1] == values.args[1]
        assert argv[argv.index("--note-path") + 1] == values.args[3]
        assert r["value"] == values.env["SPECBENCH_TEST_VALUE"]
        assert r["cwd"] == values.workdir  # the server runs in the workdir, in both modes
    assert Path(values.workdir).is_dir()


def run_injected(values: PlanValues, tmp_path: Path, ssh_config: Path) -> HeadlessRun:
    run = HeadlessRun(
        values.write(tmp_path / "plan.toml"), tmp_path / "res", ssh_config, values.name
    )
    code = run.wait(300)
    done, failed, left = tally(
        run.root, f"{values.services}, plan values full of shell syntax", values.model
    )
    assert code == 0, run.output()
    assert (done, failed, left) == (2, 0, 0)
    return run


def test_no_plan_value_reaches_a_shell_process_mode(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    canary = tmp_path / "canary"
    canary.mkdir()
    (sshd.root / "simgpu").mkdir(exist_ok=True)
    values = injected_plan(tmp_path / "h", canary, "inject", "sbtest", "process")
    try:
        run = run_injected(values, tmp_path, sshd.config)
        check_arrived(values, tmp_path / "h", canary)
        assert (Path(values.workdir) / values.name / "logs" / "box.ar.tp1.log").exists()
        assert not list(sshd.root.glob("simgpu.P*"))
        assert "ready to roll" in (run.root / "logs" / "box.ar.tp1.log").read_text()
    finally:
        kill_pids(servers_left(values.model))


def test_no_plan_value_reaches_a_shell_systemd_mode(
    systemd_host: SystemdHost,  # noqa: F811
    tmp_path: Path,
) -> None:
    base = systemd_host.root / "inject"
    canary = systemd_host.root / "inject-canary"
    canary.mkdir()
    values = injected_plan(base, canary, "inject-sd", "sdns-sim", "systemd")
    values.env |= {"SPECBENCH_SIM_STATE": str(systemd_host.simgpu), "SPECBENCH_SIM_GPUS": "4"}
    try:
        run_injected(values, tmp_path, systemd_host.config)
        check_arrived(values, base, canary)
        assert not list(systemd_host.root.glob("simgpu.P*"))
        assert systemd_host.active_units("specbench-inject-sd-*") == []
    finally:
        kill_pids(servers_left(values.model))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ssh", "box;touch x"),
        ("stop_before", ["a.service; touch x"]),
        ("python", "/usr/bin/python3\ntouch x"),
    ],
)
def test_fields_that_cannot_hold_shell_syntax_are_refused(
    tmp_path: Path, key: str, value: object
) -> None:
    model = tmp_path / "m"
    model.mkdir()
    values = PlanValues(
        name="refuse", alias="sbtest", services="systemd", workdir=str(tmp_path), model=str(model)
    )
    if key == "python":
        values.python = str(value)
    text = values.text()
    line = f"{key} = {json.dumps(value)}"
    if key != "python":
        text = text.replace('ssh = "sbtest"', line if key == "ssh" else f'ssh = "sbtest"\n{line}')
    plan = tmp_path / "plan.toml"
    plan.write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "specbench_tui", str(plan), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    print(f"\n[message] {proc.stderr.strip()}")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()

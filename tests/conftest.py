"""Shared fixtures (plan files written into a temporary directory, free loopback ports) and
the test tiers.

Tiers: ``unit`` (every test without another tier mark: pure and fast, what ``pytest -q``
runs), ``console`` (drives the Textual console), ``system`` (drives a real external program,
or processes of the tool's own: servers, agents, whole campaigns) and ``timing`` (asserts a
timing bound). ``pytest -m ''`` runs every tier. A unit test that reaches for a real program
(``need_program``, the sshd, systemd or Slurm fixtures) fails naming the mark it needs, so a
test added without its mark is found the first time it runs, not by a slow default run.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import sweep

ROOT = Path(__file__).resolve().parent.parent
PLANS = ROOT / "plans"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
TIERS = ("unit", "console", "system", "timing")
# Fixtures that start a real external program: a test using one belongs to the system tier.
SYSTEM_FIXTURES = frozenset({"sshd", "killable_sshd", "systemd_host", "slurm", "clean_slurm"})
_current: list[pytest.Item] = []  # the test being run (need_program reads its tier)
_NOT_RUN: dict[str, int] = {}  # tier -> tests ``-m`` or ``-k`` left out
_UNIT_S: dict[str, float] = {}  # unit test -> seconds (setup, call and teardown)
UNIT_SLOW_S = 2.0  # a unit test slower than this is named at the end of the run


_SWEPT: dict[str, list[str]] = {}  # when -> what the session sweep stopped


def _end_on_signal(signum: int, _frame: object) -> None:
    """SIGTERM or SIGHUP (a CI limit, a closed terminal) ends the run as ctrl-c does: the
    summary of what ran is printed and the session's fixtures are torn down."""
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def _catch_end_signals() -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not _end_on_signal:  # an event loop's handler replaced it
            signal.signal(sig, _end_on_signal)


def pytest_configure(config: pytest.Config) -> None:
    """Every process the suite starts inherits the session's mark (``.ci/run`` sets one for
    its whole run), so what a killed session left can be found and stopped."""
    os.environ.setdefault(sweep.MARK, sweep.mark_of(os.getpid()))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker of `-n`: a mark of its own below
        os.environ[sweep.MARK] = sweep.worker_mark(os.environ[sweep.MARK], os.getpid())
    _catch_end_signals()


def pytest_sessionstart(session: pytest.Session) -> None:
    _SWEPT["left by a test session that was killed"] = sweep.sweep(dead_owners=True)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """After the fixtures' teardown: whatever the suite started and is still running (a test
    cut short, a teardown that failed) is stopped, and named in the summary."""
    _SWEPT["left by this session"] = sweep.sweep(os.environ.get(sweep.MARK))
    out = getattr(session.config, "workeroutput", None)
    if out is not None:  # a worker of `-n`: what the summary says goes to the controller
        scenarios = sys.modules.get("support.ssh_scenarios")
        out["specbench"] = {
            "not_run": _NOT_RUN,
            "swept": _SWEPT,
            "scenarios": list(getattr(scenarios, "SCENARIO_LINES", [])),
        }


_WORKER_LINES: list[str] = []  # the outage scenarios' tallies the workers of `-n` sent


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """A worker of `-n` is done: its summary lines join the controller's (every worker
    collects every test, so the tiers left out are counted once)."""
    got = getattr(node, "workeroutput", {}).get("specbench")
    if not got:
        return
    for tier, n in got["not_run"].items():
        _NOT_RUN[tier] = max(_NOT_RUN.get(tier, 0), n)
    for when, lines in got["swept"].items():
        _SWEPT.setdefault(when, []).extend(lines)
    _WORKER_LINES.extend(got["scenarios"])


def tiers_of(item: pytest.Item) -> set[str]:
    """The tiers a test is marked with; ``slow``, the older mark, counts as ``system``."""
    names = {m.name for m in item.iter_markers()}
    out = names & set(TIERS)
    if "slow" in names:
        out.add("system")
    return out or {"unit"}


def tier_runs(config: pytest.Config, *marks: str) -> bool:
    """Whether ``-m`` selects a test carrying exactly these marks, for work done at collection
    that only such tests need (a recording run), so the unit tier does not pay for it."""
    from _pytest.mark.expression import Expression

    expr = config.getoption("markexpr") or ""
    if not expr:
        return True
    return Expression.compile(expr).evaluate(lambda name, **_: name in marks)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test gets its tier marks before ``-m`` selects: an unmarked test is a unit test."""
    for item in items:
        for tier in sorted(tiers_of(item) - {m.name for m in item.iter_markers()}):
            item.add_marker(tier)
        item.add_marker(pytest.mark.xdist_group(worker_group(item)))


#: Tests that run a real vLLM or the Slurm cluster: one worker of `-n` runs them one at a time
#: (two vLLM engines on two cores starve each other past their ready timeouts).
HEAVY_GROUP = "vllm-and-slurm"


def worker_group(item: pytest.Item) -> str:
    """Which tests one worker of `-n --dist loadgroup` runs together: a file's tests (its
    module fixtures are made once), and every test of a real vLLM or Slurm in one group."""
    names = set(getattr(item, "fixturenames", ()))
    if "vllm" in item.nodeid or {"slurm", "clean_slurm"} & names:
        return HEAVY_GROUP
    return item.nodeid.split("::", 1)[0]


def pytest_deselected(items: list[pytest.Item]) -> None:
    for item in items:
        for tier in tiers_of(item):
            _NOT_RUN[tier] = _NOT_RUN.get(tier, 0) + 1


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A unit test that asks for a real external program fails before it starts one."""
    _current[:] = [item]
    _catch_end_signals()
    wanted = SYSTEM_FIXTURES & set(getattr(item, "fixturenames", ()))
    if wanted and tiers_of(item) == {"unit"}:
        pytest.fail(
            f"{item.nodeid} uses {', '.join(sorted(wanted))}, a real external program, but "
            "is not marked: mark it @pytest.mark.system (a module: pytestmark = "
            "pytest.mark.system)",
            pytrace=False,
        )


def pytest_runtest_logfinish() -> None:
    _current.clear()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "unit" in report.keywords and not {"console", "system", "timing"} & set(report.keywords):
        _UNIT_S[report.nodeid] = _UNIT_S.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """What the tiers left out and which unit tests were slow (said, not failed: a duration
    on a shared machine is too noisy to fail on), then the outage scenarios' tallies (cells
    done and failed, servers left on the host), shown whether their tests passed or not."""
    if _NOT_RUN:
        left = ", ".join(f"{tier} {n}" for tier, n in sorted(_NOT_RUN.items()))
        terminalreporter.write_line(f"tiers not run: {left} (pytest -m '' runs every tier)")
    slow = sorted(((s, n) for n, s in _UNIT_S.items() if s > UNIT_SLOW_S), reverse=True)
    if slow:
        terminalreporter.section("unit tests slower than 2 s: make them faster or mark them")
        for seconds, nodeid in slow:
            terminalreporter.write_line(f"{seconds:6.2f}s {nodeid}")
    for when, lines in _SWEPT.items():
        if lines:
            terminalreporter.section(f"processes {when}, stopped")
            for line in lines:
                terminalreporter.write_line(line)
    scenarios = sys.modules.get("support.ssh_scenarios")
    lines: list[str] = getattr(scenarios, "SCENARIO_LINES", []) + _WORKER_LINES
    if lines:
        terminalreporter.section("outage scenarios")
        for line in lines:
            terminalreporter.write_line(line)


def need_program(name: str) -> str:
    """A system program a test needs: skipped on a developer's machine, a failure under CI,
    and a failure in a test of the unit tier, which must not need one."""
    if _current and tiers_of(_current[-1]) == {"unit"}:
        pytest.fail(
            f"{_current[-1].nodeid} needs {name}, a real external program, but is not "
            "marked: mark it @pytest.mark.system",
            pytrace=False,
        )
    path = shutil.which(name)
    if path is None:
        if IN_CI:
            pytest.fail(f"{name} is required under CI but is not installed")
        pytest.skip(f"{name} not installed")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MINIMAL_PLAN = """\
[campaign]
name = "t"
baseline = "ar"

[hosts.sim]
sim = true
gpus = 4
speed = 50

[server]
port = {port}

[configs.ar]
label = "AR"

[configs.dflash]
args = ["--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "8"]

[matrix]
configs = ["ar", "dflash"]
tp = [1]

[workloads.single]
kind = "single"
prompts = ["chat"]
samples = 2
max_tokens = [32]
"""


@pytest.fixture
def write_plan(tmp_path: Path) -> Callable[..., Path]:
    def write(text: str = MINIMAL_PLAN, name: str = "plan.toml") -> Path:
        path = tmp_path / name
        path.write_text(text.replace("{port}", str(free_port())))
        return path

    return write


def tiny_model(where: Path) -> str:
    """A model directory for plans whose server is the simulator (it loads nothing, but the
    preflight checks that a local server's model is there)."""
    model = where / "tiny-model"
    model.mkdir(exist_ok=True)
    return str(model)


def start_headless(plan: Path, results: Path) -> subprocess.Popen[str]:
    """A headless campaign in its own process; returns once its control socket is there
    (the campaign has started and can be attached to)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results", str(results)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    sock = results / tomllib.loads(plan.read_text())["campaign"]["name"] / "control.sock"
    deadline = time.monotonic() + 30
    while not sock.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no control socket at {sock}: {proc.communicate()[0]}")
        time.sleep(0.05)
    return proc

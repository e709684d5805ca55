"""Servers the tool does not own (a config's ``url``), and the one-line form.

The unit tests check the plan side: what a running server's config may not say, how its group
expands, how an engine is told from a launch command or a server's ``/v1/models``, and the
plan the one-line form writes. The system tests start recording stand-in servers (the
simulator with ``--sim-record``: every request it answered, with its times) as processes of
their own, outside the tool, and run the tool against them through its command line: every
cell runs, the servers are left running with the same pids, their requests are the tool's
rows, a speed-up comes with its audit; a server killed mid-cell fails that cell with its
reason and the campaign finishes; the one-line form writes a plan that runs again; the gate
fails on a planted regression and passes a rerun.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import polars as pl
import pytest

from specbench_tui.engines.registry import engine_owning, engine_starting
from specbench_tui.errors import InputError
from specbench_tui.plan.expand import expand
from specbench_tui.plan.loader import load_plan
from specbench_tui.plan.one_line import OneLine, config_name, plan_text
from tests.conftest import ROOT, free_port

CAPTURES = ROOT.parent / "shared" / "captures"

PLAN = """\
[campaign]
name = "running"
baseline = "plain"
{campaign}
[hosts.here]
local = true
gpus = 1

[configs.plain]
url = "http://127.0.0.1:{plain}"

[configs.eagle]
url = "http://127.0.0.1:{eagle}"
{extra}
[matrix]
configs = ["plain", "eagle"]
tp = [1]
{matrix}
[workloads.single]
kind = "single"
prompts = ["chat"]
samples = {samples}
max_tokens = [{max_tokens}]
repeats = 3
"""


def write_plan(tmp: Path, **kw: object) -> Path:
    values = {"campaign": "", "extra": "", "matrix": "", "samples": 3, "max_tokens": 48}
    values.update(kw)
    values.setdefault("plain", 18101)
    values.setdefault("eagle", 18102)
    path = tmp / "plan.toml"
    path.write_text(PLAN.format(**values))
    return path


def refusal(tmp: Path, **kw: object) -> str:
    with pytest.raises(InputError) as err:
        load_plan(write_plan(tmp, **kw))
    return str(err.value)


# --- the plan side ----------------------------------------------------------------------------


def test_a_running_servers_config_refuses_what_would_start_one(tmp_path: Path) -> None:
    said = refusal(tmp_path, extra='args = ["--speculative-algorithm", "EAGLE3"]\n')
    assert "configs.eagle.args" in said and "never starts" in said
    assert "pack" in refusal(tmp_path, campaign="pack = true\n")
    assert "restarted" in refusal(tmp_path, campaign="runs = 2\n")


def test_a_running_server_runs_at_one_tp_size(tmp_path: Path) -> None:
    path = write_plan(tmp_path)
    text = path.read_text().replace("tp = [1]", "tp = [1, 2]").replace("gpus = 1", "gpus = 2")
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_plan(path)
    assert "one TP size" in str(err.value) and "[[matrix.exclude]]" in str(err.value)


def test_a_running_servers_group_has_no_command_and_its_address_in_its_id(tmp_path: Path) -> None:
    plan = load_plan(write_plan(tmp_path))
    groups = {g.config: g for g in expand(plan).groups}
    g = groups["eagle"]
    assert g.url == "http://127.0.0.1:18102" and g.command == () and g.port == 18102
    assert g.gpu_ids == () and g.api == "openai" and g.chat_template_on == "server"
    other = load_plan(write_plan(tmp_path, eagle=18103))
    ids = {c.id for c in expand(plan).cells}
    moved = {c.id for c in expand(other).cells}
    assert len(ids & moved) == 1  # the plain server's cell is the same; the moved one is not


def test_a_rehearsal_simulates_a_running_servers_config(tmp_path: Path) -> None:
    plan = load_plan(write_plan(tmp_path))
    groups = expand(plan, sim=True).groups
    assert all(g.url is None and g.command for g in groups)


def test_an_engine_is_told_by_its_launch_command_and_by_its_models_owner() -> None:
    assert engine_starting(["{python}", "-m", "vllm.entrypoints.openai.api_server"]) == "vllm"
    assert engine_starting(["vllm", "serve", "m"]) == "vllm"
    assert engine_starting(["python", "-m", "sglang.launch_server", "--model", "vllm"]) == "sglang"
    assert engine_starting(["/opt/bin/trtllm-serve", "m"]) == "trtllm"
    assert engine_starting(["./serve.sh", "--name", "vllm"]) is None
    vllm = json.loads((CAPTURES / "vllm-0.32-cpu" / "nospec.models.body").read_text())
    sglang = json.loads((CAPTURES / "sglang-0.5.23-cpu" / "ar" / "v1_models.json").read_text())
    assert engine_owning(vllm) == "vllm" and engine_owning(sglang) == "sglang"
    assert engine_owning({"data": [{"owned_by": "openai"}]}) is None


def test_a_plan_that_launches_vllm_and_names_no_engine_is_measured_as_vllms(
    tmp_path: Path,
) -> None:
    text = write_plan(tmp_path).read_text()
    text = text.replace(
        'url = "http://127.0.0.1:18102"',
        'launch = ["{python}", "-m", "vllm.entrypoints.openai.api_server", "--model", '
        '"{model}", "--port", "{port}"]\nmodel = "/models/tiny"\napi = "openai"',
    )
    (tmp_path / "plan.toml").write_text(text)
    groups = {g.config: g for g in expand(load_plan(tmp_path / "plan.toml")).groups}
    assert groups["eagle"].engine == "vllm" and groups["eagle"].url is None


def test_the_one_line_form_writes_a_plan_that_loads(tmp_path: Path) -> None:
    form = OneLine(urls=("http://10.0.0.5:8000", "http://[::1]:8001"), levels=(1, 4))
    path = tmp_path / "p.toml"
    path.write_text(plan_text(form))
    plan = load_plan(path)
    assert plan.spec.campaign.baseline == config_name(form.urls[0]) == "10.0.0.5-8000"
    assert [c.url for c in plan.spec.configs.values()] == list(form.urls)
    assert set(plan.spec.workloads) == {"single", "concurrency"}
    assert OneLine(urls=form.urls).name != OneLine(urls=form.urls, repeats=5).name


# --- against servers the tool does not own ------------------------------------------------------


class StandIn:
    """A recording simulated server started outside the tool, in a session of its own."""

    def __init__(self, tmp: Path, name: str, *args: str, speed: float = 20.0) -> None:
        self.port = free_port()
        self.record = tmp / f"{name}.jsonl"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "specbench_tui.sim", "--port", str(self.port),
             "--model-path", "tiny", "--speed", f"{speed:g}", "--sim-record", str(self.record),
             *args],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"stand-in {name} did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def requests(self) -> int:
        if not self.record.exists():
            return 0
        return sum(1 for line in self.record.read_text().splitlines() if line.strip())

    def kill(self) -> None:
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def stand_ins(tmp_path: Path) -> Iterator[tuple[StandIn, StandIn]]:
    plain = StandIn(tmp_path, "plain")
    eagle = StandIn(
        tmp_path,
        "eagle",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-num-draft-tokens",
        "4",
    )
    try:
        yield plain, eagle
    finally:
        plain.kill()
        eagle.kill()


def tool(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specbench_tui", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.mark.system
def test_a_plan_of_running_servers_measures_them_and_leaves_them_as_they_were(
    tmp_path: Path, stand_ins: tuple[StandIn, StandIn]
) -> None:
    plain, eagle = stand_ins
    pids = (plain.proc.pid, eagle.proc.pid)
    plan = write_plan(tmp_path, plain=plain.port, eagle=eagle.port)
    check = tool(str(plan), "--dry-run", "--check", cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    assert "speculative decoding: EAGLE3" in check.stdout and "no speculation" in check.stdout
    run = tool(str(plan), "--headless", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"measuring the running server at {eagle.url}" in run.stdout
    assert plain.alive() and eagle.alive() and (plain.proc.pid, eagle.proc.pid) == pids
    root = tmp_path / "results" / "running"
    cells = pl.read_parquet(root / "cells.parquet")
    assert cells["status"].to_list() == ["done", "done"]
    requests = pl.read_parquet(root / "requests.parquet")
    # Every request the tool stored is one each server answered (no warm-up in this plan).
    assert plain.requests() + eagle.requests() == requests.height == 18
    manifest = json.loads((root / "manifest.json").read_text())["groups"]
    eagle_entry = manifest["here.eagle.tp1"]
    assert eagle_entry["url"] == eagle.url and eagle_entry["settings"]
    assert "not probed" in eagle_entry["probe"]["error"]
    comparisons = pl.read_parquet(root / "comparisons.parquet")
    speedup = comparisons.filter(
        (pl.col("config") == "eagle") & (pl.col("figure") == "decode speed-up")
    )
    assert speedup.height == 1 and speedup["comparable"].dtype == pl.Boolean
    assert speedup["ratio"][0] > 1.0


@pytest.mark.system
def test_a_running_server_killed_mid_cell_fails_that_cell_and_the_campaign_finishes(
    tmp_path: Path,
) -> None:
    plain = StandIn(tmp_path, "plain", speed=20)
    eagle = StandIn(
        tmp_path,
        "eagle",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-num-draft-tokens",
        "4",
        speed=0.5,
    )
    try:
        plan = write_plan(tmp_path, plain=plain.port, eagle=eagle.port, samples=6, max_tokens=256)
        proc = subprocess.Popen(
            [sys.executable, "-m", "specbench_tui", str(plan), "--headless"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:  # the killing waits on the tool's own line, never on time
            lines.append(line)
            if "here.eagle.tp1: ready" in line:
                while eagle.requests() < 2:
                    time.sleep(0.05)
                eagle.kill()
        proc.wait(120)
        out = "".join(lines)
        assert proc.returncode == 1, out
        assert "FAILED here.eagle.tp1" in out and "cannot restart it" in out, out
        assert "finished running: 1 done, 1 failed" in out, out
        assert plain.alive()
    finally:
        plain.kill()
        eagle.kill()


@pytest.mark.system
def test_the_one_line_form_runs_writes_its_plan_and_the_gate_judges_two_runs(
    tmp_path: Path, stand_ins: tuple[StandIn, StandIn]
) -> None:
    plain, eagle = stand_ins
    knobs = ["--samples", "3", "--repeats", "3", "--max-tokens", "48"]
    first = tool(plain.url, eagle.url, "--headless", *knobs, "--results", "a", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    written = list((tmp_path / "a").glob("servers-*.toml"))
    assert len(written) == 1 and "the plan of this run is" in first.stderr
    again = tool(str(written[0]), "--headless", "--results", "b", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    name = written[0].stem
    old, new = tmp_path / "a" / name, tmp_path / "b" / name
    same = tool("--report", str(old), str(new), "--fail-on-regression", "50", cwd=tmp_path)
    assert same.returncode == 0, same.stdout + same.stderr
    # A planted regression: the baseline's server restarted four times slower. (The
    # baseline's own decode rate is gated whatever the client's lag; a speed-up is not where
    # the audit finds its two sides unlike, which a loaded machine can make them.)
    plain.kill()
    slow = StandIn(tmp_path, "slow", speed=5)
    try:
        text = written[0].read_text().replace(plain.url, slow.url)
        (tmp_path / "slow.toml").write_text(text)
        third = tool(str(tmp_path / "slow.toml"), "--headless", "--results", "c", cwd=tmp_path)
        assert third.returncode == 0, third.stdout + third.stderr
        gate = tool(
            "--report", str(old), str(tmp_path / "c" / name), "--fail-on-regression", "50",
            "--json", cwd=tmp_path,
        )  # fmt: skip
    finally:
        slow.kill()
    assert gate.returncode == 1, gate.stdout + gate.stderr
    verdict = json.loads(gate.stdout)
    regressed = [r for r in verdict["rows"] if r["verdict"] == "regressed"]
    assert [(r["config"], r["figure"]) for r in regressed] == [
        (config_name(plain.url), "decode tok/s")
    ]


@pytest.mark.system
def test_a_concurrency_levels_warm_up_sends_rounds_of_its_size_and_measures_none(
    tmp_path: Path,
) -> None:
    server = StandIn(tmp_path, "warm")
    try:
        plan = tmp_path / "warm.toml"
        plan.write_text(
            PLAN.split("[configs.plain]")[0].format(campaign="")
            + f'[configs.plain]\nurl = "{server.url}"\n\n[matrix]\nconfigs = ["plain"]\n'
            'tp = [1]\n\n[workloads.load]\nkind = "concurrency"\nlevels = [3]\n'
            "requests = 6\nwarmup = 2\nmax_tokens = 16\n"
        )
        run = tool(str(plan), "--headless", cwd=tmp_path)
        assert run.returncode == 0, run.stdout + run.stderr
        stored = pl.read_parquet(tmp_path / "results" / "running" / "requests.parquet")
        assert stored.height == 6  # the measured ones
        assert server.requests() == 6 + 2 * 3  # and two rounds of three before them
        # Each warm-up is kept with the cell (for what the server's log counts), sent first.
        cells = pl.read_parquet(tmp_path / "results" / "running" / "cells.parquet")
        warm = cells["warmup_requests"].to_list()[0]
        assert len(warm) == 2 * 3 and all(w[2] and w[2] > 0 for w in warm)
        assert max(w[0] for w in warm) < stored["started_at"].min()
    finally:
        server.kill()


async def test_a_server_of_another_engine_than_the_configs_fails_naming_the_engine(
    tmp_path: Path,
) -> None:
    """A plan that says SGLang (or says nothing) before a vLLM server: one line naming the
    engine to set, from the server's own /v1/models, instead of a run with no acceptance."""
    from dataclasses import replace

    from specbench_tui.engines.inspect import inspect_server

    models = (CAPTURES / "vllm-0.32-cpu" / "nospec.models.body").read_bytes()

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, content=models)
        return httpx.Response(404)

    plan = load_plan(write_plan(tmp_path))
    group = replace(expand(plan).groups[0], engine="sglang")
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        facts = await inspect_server(group, "http://server", client=client)
    assert any("set engine = 'vllm'" in p for p in facts.problems), facts.problems

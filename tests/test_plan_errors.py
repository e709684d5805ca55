"""Every kind of bad plan gives exit status 2 and one located line on stderr, no traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from specbench_tui.cli import main
from tests.conftest import MINIMAL_PLAN


def run(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    code = main([str(path), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    assert 1 <= len(err.strip().splitlines()) <= 2, err
    return err


CASES: list[tuple[str, str, str, str]] = [
    # (name, old, new, expected pattern in the message)
    ("malformed toml", 'label = "AR"', 'label = "AR', r"plan\.toml:\d+:\d+: not valid TOML"),
    (
        "unknown key with suggestion",
        'label = "AR"',
        'lable = "AR"',
        r"plan\.toml:\d+: configs\.ar\.lable: unknown key 'lable'; did you mean 'label'\?",
    ),
    (
        "unknown table",
        "[matrix]",
        "[matrx]\nconfigs=[]\n[matrix]",
        r"matrx: unknown key 'matrx'; did you mean 'matrix'\?",
    ),
    ("wrong type", "gpus = 4", 'gpus = "four"', r"hosts\.sim\.gpus: .*integer"),
    (
        "missing required key",
        'kind = "single"\nprompts = ["chat"]\nsamples = 2\nmax_tokens = [32]',
        'kind = "single"\nsamples = 2\nmax_tokens = [32]',
        r"workloads\.single\.prompts: missing required key",
    ),
    (
        "tp larger than gpus",
        "tp = [1]",
        "tp = [1, 8]",
        r"matrix\.tp: TP 8 needs 8 GPUs but host 'sim' has gpus = 4",
    ),
    (
        "unknown config in matrix",
        'configs = ["ar", "dflash"]',
        'configs = ["ar", "dflsh"]',
        r"matrix\.configs\[1\]: no config named 'dflsh'; did you mean 'dflash'\?",
    ),
    (
        "unknown host in matrix",
        "tp = [1]",
        'tp = [1]\nhosts = ["gpu1"]',
        r"matrix\.hosts\[0\]: no host named 'gpu1'",
    ),
    (
        "unknown config in workload",
        "max_tokens = [32]",
        'max_tokens = [32]\nconfigs = ["eagle"]',
        r"workloads\.single\.configs\[0\]: no config named 'eagle'",
    ),
    (
        "unknown prompt set",
        'prompts = ["chat"]',
        'prompts = ["poetry"]',
        r"workloads\.single\.prompts\[0\]: no prompt set 'poetry'.*shipped set \(chat, code",
    ),
    (
        "empty params list",
        'label = "AR"',
        'label = "AR"\nparams = { budget = [] }',
        r"configs\.ar\.params\.budget: empty list",
    ),
    (
        "duplicate expanded names",
        "[matrix]",
        "[configs.x]\nparams = { b = [1] }\n[configs.x-1]\n[matrix]",
        r"plan\.toml:\d+: configs\.x(-1)?(\.params)?: expands to the name 'x-1'",
    ),
    (
        "unsafe campaign name",
        'name = "t"',
        'name = "My Campaign; rm -rf /"',
        r"campaign\.name: 'My Campaign; rm -rf /' is not a safe campaign name",
    ),
    (
        "unsafe service name",
        "speed = 50",
        'speed = 50\nstop_before = ["x.service; reboot"]',
        r"hosts\.sim\.stop_before\[0\]: .*unsafe in a systemd unit name",
    ),
    (
        "unknown launch placeholder",
        'label = "AR"',
        'label = "AR"\nlaunch = ["{python}", "-m", "sglang.launch_server", "--tp", "{tpsize}"]',
        r"configs\.ar\.launch: unknown placeholder \{tpsize\}",
    ),
    (
        "baseline not in matrix",
        'baseline = "ar"',
        'baseline = "eagle"',
        r"campaign\.baseline: baseline 'eagle' is not in matrix\.configs",
    ),
    (
        "not exactly one host kind",
        "sim = true",
        'sim = true\nssh = "root@gpu1"',
        r"hosts\.sim: set exactly one of",
    ),
    (
        "bad duration",
        "max_tokens = [32]",
        'max_tokens = [32]\ntimeout = "ten minutes"',
        r"workloads\.single\.timeout: 'ten minutes' is not a duration",
    ),
    (
        "bad workload kind",
        'kind = "single"',
        'kind = "batch"',
        r"workloads\.single\.kind: 'kind' must be one of",
    ),
    (
        "workload tp outside matrix",
        "max_tokens = [32]",
        "max_tokens = [32]\ntp = [2]",
        r"workloads\.single\.tp: TP 2 is not in matrix\.tp",
    ),
    (
        "bad logs regex",
        "[matrix]",
        "[logs]\nx = 'accept (?P<a[0-9]'\n[matrix]",
        r"logs\.x: not a valid regular expression",
    ),
    (
        "format spec in a placeholder",
        'args = ["--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "8"]',
        'args = ["--x", "{tp:>200000000}"]',
        r"configs\.dflash\.args: '\{tp:>200000000\}': format specs and conversions are not "
        r"supported in plan templates; write \{tp\}",
    ),
    (
        "NaN duration",
        "max_tokens = [32]",
        "max_tokens = [32]\ntimeout = nan",
        r"workloads\.single\.timeout: nan is not a finite duration",
    ),
    (
        "zero duration",
        "[server]\n",
        '[server]\nready_timeout = "0s"\n',
        r"server\.ready_timeout: a duration must be more than zero",
    ),
    (
        "negative duration",
        "max_tokens = [32]",
        "max_tokens = [32]\ntimeout = -5",
        r"workloads\.single\.timeout: a duration must be more than zero",
    ),
    (
        "unknown engine",
        "port = {port}",
        'port = {port}\nengine = "tgi"',
        r"server\.engine: unknown engine 'tgi'; known: 'sglang', 'vllm', 'trtllm'$",
    ),
    (
        "vllm has no native api",
        "port = {port}",
        'port = {port}\nengine = "vllm"\napi = "sglang"',
        r"server\.api: api = 'sglang' but config 'ar' runs on vLLM, which serves only 'openai'",
    ),
    # A bad value is named with its value; a value of the wrong type is refused, never
    # converted (a quoted number, a float for an integer, a bool for a count).
    (
        "value out of bounds",
        "samples = 2",
        "samples = 0",
        r"workloads\.single\.samples: input should be greater than or equal to 1 \(got 0\)$",
    ),
    (
        "value not among the choices",
        "sim = true",
        'sim = true\nservices = "proc"',
        r"hosts\.sim\.services: input should be 'systemd' or 'process' \(got 'proc'\)$",
    ),
    (
        "kind not among the choices",
        'kind = "single"',
        'kind = "singel"',
        r"workloads\.single\.kind: 'kind' must be one of .* \(got 'singel'\)$",
    ),
    ("quoted integer", "samples = 2", 'samples = "2"', r"samples: .*integer \(got str '2'\)$"),
    ("float for an integer", "samples = 2", "samples = 2.0", r"integer \(got float 2\.0\)$"),
    ("bool for an integer", "gpus = 4", "gpus = true", r"hosts\.sim\.gpus: .* \(got bool True\)$"),
    ("quoted port", "port = {port}", 'port = "8000"', r"server\.port: .* \(got str '8000'\)$"),
    (
        "quoted item of a list",
        "max_tokens = [32]",
        'max_tokens = [32, "64"]',
        r"workloads\.single\.max_tokens\[1\]: .*integer \(got str '64'\)$",
    ),
    (
        "quoted number",
        "max_tokens = [32]",
        'max_tokens = [32]\ntemperature = "0"',
        r"workloads\.single\.temperature(\[0\])?: .*number \(got str '0'\)$",
    ),
    (
        "label of 100 KB",
        'label = "AR"',
        'label = "' + "A" * 100_000 + '"',
        r"plan\.toml:\d+: configs\.ar\.label: string should have at most 200 characters",
    ),
    (
        "argument of 1 MB",
        "max_tokens = [32]",
        'max_tokens = [32]\n[server.env]\nX = "' + "x" * 1_000_000 + '"',
        r"server\.env\.X: string should have at most 16384 characters",
    ),
    (
        "CUDA_VISIBLE_DEVICES in env",
        "max_tokens = [32]",
        'max_tokens = [32]\n[server.env]\nCUDA_VISIBLE_DEVICES = "2,3"',
        r"server\.env: the tool sets CUDA_VISIBLE_DEVICES from the GPUs .* gpu_ids = \[\.\.\.\]",
    ),
    (
        "json flag with single braces",
        'args = ["--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "8"]',
        'args = ["--speculative-config", \'{"method": "ngram"}\']',
        r"configs\.dflash\.args: unknown placeholder \{\"method\"\}.*literal braces.*"
        r"'\{\{\"method\": \"ngram\"\}\}'",
    ),
]


@pytest.mark.parametrize(("name", "old", "new", "pattern"), CASES, ids=[c[0] for c in CASES])
def test_bad_plan(
    capsys: pytest.CaptureFixture[str],
    write_plan: Callable[..., Path],
    name: str,
    old: str,
    new: str,
    pattern: str,
) -> None:
    assert old in MINIMAL_PLAN, name
    path = write_plan(MINIMAL_PLAN.replace(old, new, 1))
    err = run(capsys, path)
    assert re.search(pattern, err), err


def test_error_names_the_right_line(
    capsys: pytest.CaptureFixture[str], write_plan: Callable[..., Path]
) -> None:
    path = write_plan(MINIMAL_PLAN.replace('label = "AR"', 'lable = "AR"'))
    err = run(capsys, path)
    line = int(re.search(r"plan\.toml:(\d+):", err).group(1))  # type: ignore[union-attr]
    assert path.read_text().splitlines()[line - 1].startswith("lable")


def test_missing_plan_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = run(capsys, tmp_path / "nope.toml")
    assert "no such plan file" in err


@pytest.mark.system
def test_cli_process_exit_code_and_no_traceback(write_plan: Callable[..., Path]) -> None:
    path = write_plan(MINIMAL_PLAN.replace("tp = [1]", "tp = [16]"))
    proc = subprocess.run(
        [sys.executable, "-m", "specbench_tui", str(path), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "TP 16 needs 16 GPUs" in proc.stderr


def test_bad_argument_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--no-such-flag"])
    assert exc.value.code == 2


def test_a_broken_prompt_file_is_found_by_the_dry_run(
    capsys: pytest.CaptureFixture[str], write_plan: Callable[..., Path]
) -> None:
    path = write_plan(MINIMAL_PLAN.replace('prompts = ["chat"]', 'prompts = ["mine.jsonl"]'))
    (path.parent / "mine.jsonl").write_text('{"id": "a", "prompt": "x"}\n{"id": broken\n')
    err = run(capsys, path)
    assert re.search(r"workloads\.single\.prompts\[0\]: .*mine\.jsonl:2: not valid JSON", err), err

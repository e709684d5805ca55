"""Values no campaign can run are refused when the plan is read, each with one located line
(exit 2, no traceback): integers past their bounds (a ``max_tokens`` of 2^64 once passed the
dry run and failed every row write), plans that multiply out past what a machine can hold,
NUL and control characters in values sent to a host, environment names a shell cannot take,
TOML nested deeper than the parser recurses. Tabs and line breaks still arrive literally."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specbench_tui.cli import main
from specbench_tui.errors import InputError
from specbench_tui.plan.loader import load_plan
from tests.conftest import MINIMAL_PLAN

BASE = MINIMAL_PLAN.replace("{port}", "39999")
SINGLE = 'kind = "single"\nprompts = ["chat"]\nsamples = 2\nmax_tokens = [32]'
CONCURRENCY = '[workloads.conc]\nkind = "concurrency"\nlevels = [1]\nrequests = 4\n'
DFLASH_ARGS = 'args = ["--speculative-algorithm", "DFLASH", "--speculative-num-draft-tokens", "8"]'


def _many(n: int) -> str:
    return ", ".join(str(i) for i in range(n))


CASES: list[tuple[str, str, str, str]] = [
    # (name, old, new, expected pattern in the message)
    (
        "max_tokens of 2^64",
        "max_tokens = [32]",
        "max_tokens = [18446744073709551616]",
        r"plan\.toml:\d+: workloads\.single\.max_tokens\[0\]: .*less than or equal to 16777216",
    ),
    (
        "max_tokens of an agentic workload",
        "[workloads.single]",
        '[workloads.ag]\nkind = "agentic"\nmax_tokens = 99999999999\n\n[workloads.single]',
        r"workloads\.ag\.max_tokens: .*16777216",
    ),
    (
        "a concurrency level past its bound",
        "[workloads.single]",
        CONCURRENCY.replace("[1]", "[1, 1000000000]") + "\n[workloads.single]",
        r"workloads\.conc\.levels\[1\]: .*100000",
    ),
    (
        "requests past their bound",
        "[workloads.single]",
        CONCURRENCY.replace("requests = 4", "requests = 10000000000") + "\n[workloads.single]",
        r"workloads\.conc\.requests: .*1000000",
    ),
    (
        "repeats past their bound",
        "max_tokens = [32]",
        "max_tokens = [32]\nrepeats = 9223372036854775807",
        r"workloads\.single\.repeats: .*10000",
    ),
    (
        "a seed past int64",
        'baseline = "ar"',
        'baseline = "ar"\nseed = 9223372036854775808',
        r"campaign\.seed: .*9223372036854775807",
    ),
    (
        "a timeout of 1e300 seconds",
        "max_tokens = [32]",
        "max_tokens = [32]\ntimeout = 1e300",
        r"workloads\.single\.timeout: a duration must be at most 365d",
    ),
    (
        "params that multiply past the bound",
        'label = "AR"',
        f'label = "AR"\nparams = {{ a = [{_many(400)}], b = [{_many(400)}] }}',
        r"plan\.toml:\d+: configs\.ar\.params: expands to 160,000 configs",
    ),
    (
        "a plan of too many cells",
        'label = "AR"\n',
        f'label = "AR {{a}}"\nparams = {{ a = [{_many(1000)}] }}\n'
        f"[workloads.long]\n{SINGLE.replace('[32]', f'[{_many(1001)[3:]}]')}\n",
        r"plan\.toml:\d+: workloads\.long: with the other workloads names up to 1,002,001 cells "
        r"\(1,001 service groups x 1,001 cells each\); at most 1,000,000",
    ),
    (
        "a plan of too many service groups",
        "tp = [1]",
        f"tp = [1, 2, 3, 4]\n[configs.many]\nparams = {{ a = [{_many(300)}], b = [{_many(100)}] }}",
        r"plan\.toml:\d+: matrix: names up to 120,008 service groups \(1 host\(s\) x 4 TP",
    ),
    (
        "a NUL in an arg",
        DFLASH_ARGS,
        DFLASH_ARGS.replace('"8"]', '"8", "a\\u0000b"]'),
        r"plan\.toml:\d+: configs\.dflash\.args\[4\]: 'a\\x00b' holds a NUL character",
    ),
    (
        "a NUL in an env value",
        "[server]",
        '[server]\nenv = { X = "1\\u0000" }',
        r"server\.env\.X: .* holds a NUL character",
    ),
    (
        "a NUL in the model path",
        "[server]",
        '[server]\nmodel = "/models/q\\u0000wen"',
        r"server\.model: .* holds a NUL character",
    ),
    (
        "a NUL in a key",
        'label = "AR"',
        'label = "AR"\nenv = { "A\\u0000B" = "1" }',
        r"configs\.ar\.env: the key .* holds a NUL character",
    ),
    (
        "an ESC in an arg",
        DFLASH_ARGS,
        DFLASH_ARGS.replace('"8"]', '"8", "\\u001b[2J"]'),
        r"configs\.dflash\.args\[4\]: .* U\+001B \(ESC\) at character 1",
    ),
    (
        "a BEL in the workdir",
        "speed = 50",
        'speed = 50\nworkdir = "/tmp/x\\u0007"',
        r"hosts\.sim\.workdir: .* U\+0007 \(BEL\)",
    ),
    (
        "a C1 control in a prepare line",
        "speed = 50",
        'speed = 50\nprepare = ["echo \\u009b31m"]',
        r"hosts\.sim\.prepare\[0\]: .* U\+009B",
    ),
    (
        "an env name a shell cannot take",
        "[server]",
        '[server]\nenv = { "CUDA-VISIBLE" = "0" }',
        r"plan\.toml:\d+: server\.env\.CUDA-VISIBLE: 'CUDA-VISIBLE' is not an environment",
    ),
    (
        "an env name of a config starting with a digit",
        'label = "AR"',
        'label = "AR"\nenv = { 1X = "0" }',
        r"configs\.ar\.env\.1X: '1X' is not an environment variable name",
    ),
]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("name", "old", "new", "pattern"), CASES, ids=[c[0] for c in CASES])
def test_refused_with_one_located_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, old: str, new: str, pattern: str
) -> None:
    assert old in BASE, name
    path = _write(tmp_path, BASE.replace(old, new, 1))
    code = main([str(path), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and 1 <= len(err.strip().splitlines()) <= 2, err
    assert re.search(pattern, err), err


@pytest.mark.parametrize("depth", [500, 50_000])
def test_toml_nested_too_deeply_is_a_clean_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, depth: int
) -> None:
    path = _write(tmp_path, BASE + "\n[logs]\nx = " + "[" * depth + "]" * depth + "\n")
    code = main([str(path), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and "nested too deeply" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_tabs_and_line_breaks_still_arrive_and_bounds_allow_real_plans(tmp_path: Path) -> None:
    text = BASE.replace(DFLASH_ARGS, DFLASH_ARGS.replace('"8"]', '"8", "--note", "a\\tb\\nc"]'))
    text = text.replace("max_tokens = [32]", "max_tokens = [32, 16777216]\nrepeats = 10000")
    text = text.replace("[server]", '[server]\nenv = { _X1 = "tab\\there" }')
    plan = load_plan(_write(tmp_path, text))
    assert "a\tb\nc" in plan.spec.configs["dflash"].args
    assert plan.spec.server.env == {"_X1": "tab\there"}


def test_the_seed_campaign_is_within_every_bound() -> None:
    root = Path(__file__).resolve().parent.parent
    for name in ("ddtree-qwen36-ct200.toml", "demo.toml"):
        try:
            load_plan(root / "plans" / name)
        except InputError as exc:  # pragma: no cover - the message is the failure
            pytest.fail(str(exc))

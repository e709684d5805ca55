"""The simulator and the report ask the engine adapters for each engine's specifics (its
speculation flags, its log lines, its name, its counting words) instead of naming engines
themselves: a new engine's adapter is heard without a change to ``sim/`` or the report
(``tests/test_names.py`` holds the whole product to it)."""

from __future__ import annotations

import io
from datetime import datetime
from types import SimpleNamespace

import pytest

from specbench_tui.engines.adapter import LaunchArgsError, LaunchSpeculation
from specbench_tui.engines.registry import SIMULATED_ENGINE, adapter, adapters
from specbench_tui.report.sections import forced, server_view
from specbench_tui.sim import config as sim_config
from specbench_tui.sim.config import SimArgsError, parse_args
from specbench_tui.sim.logfmt import ServerLog
from specbench_tui.sim.server import usage


def test_simulated_lines_are_read_back_by_the_engines_own_parser() -> None:
    out = io.StringIO()
    log = ServerLog(out)
    log.line(log.fmt.decode_line(3, 900, 0.25, 2.5, 0.5, 123.4, 1))
    line = out.getvalue().strip()
    face = adapter(SIMULATED_ENGINE)
    stats = face.parse_stats_line(line)
    assert stats is not None
    assert stats["accept_len"] == 2.5 and stats["running_req"] == 3 and stats["queue_req"] == 1
    stamp = face.log_stamp(line, 2026)
    assert stamp is not None and abs((datetime.now() - stamp[0]).total_seconds()) < 120


class _FakeAdapter:
    """An engine the simulator has never heard of, stating speculation its own way."""

    name = "fake"
    label = "Fake"
    speculation_flags = ("--fake-spec",)
    log_format = None

    def launch_speculation(self, flags, env, algorithms):  # type: ignore[no-untyped-def]
        if "--fake-spec" not in flags:
            return None
        if flags["--fake-spec"] == "bad":
            raise LaunchArgsError("--fake-spec bad: no such drafter")
        return LaunchSpeculation(named_algorithm="fakedraft", num_steps=5, forced_accept=2.0)


def test_speculation_flags_are_each_adapters_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator reads no speculation flag of its own: an adapter it is offered states
    what its flag means, and the simulator runs it (an unknown method as a chain)."""
    fake = _FakeAdapter()
    monkeypatch.setattr(sim_config, "adapters", lambda: (*adapters(), fake))
    cfg = parse_args(["--fake-spec", "x"], env={})
    assert (cfg.algorithm, cfg.named_algorithm, cfg.num_steps) == ("EAGLE", "fakedraft", 5)
    assert cfg.forced_accept == 2.0 and "fake_spec" not in cfg.extra
    with pytest.raises(SimArgsError, match="no such drafter"):
        parse_args(["--fake-spec", "bad"], env={})
    # Without the adapter the flag is just one more the server keeps.
    monkeypatch.setattr(sim_config, "adapters", adapters)
    assert parse_args(["--fake-spec", "x"], env={}).algorithm is None


def test_each_engines_flags_reach_the_simulator() -> None:
    cfg = parse_args(
        ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}'], env={}
    )
    assert (cfg.algorithm, cfg.named_algorithm, cfg.num_steps) == ("EAGLE", "mtp", 2)
    cfg = parse_args(
        ["--speculative-algorithm", "ddtree", "--speculative-ddtree-budget", "8"],
        env={"SGLANG_SIMULATE_ACC_LEN": "3"},
    )
    assert (cfg.algorithm, cfg.ddtree_budget, cfg.forced_accept) == ("DDTREE", 8, 3.0)
    with pytest.raises(SimArgsError, match="--speculative-num-steps needs an integer"):
        parse_args(["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "x"], env={})


def test_the_engine_the_server_stands_in_for_is_told() -> None:
    assert parse_args([], env={}).engine == SIMULATED_ENGINE
    with pytest.raises(SimArgsError, match="unknown engine"):
        parse_args(["--sim-engine", "nope"], env={})
    without = next(a for a in adapters() if a.log_format is None)
    with pytest.raises(SimArgsError, match="has no simulated server"):
        parse_args(["--sim-engine", without.name], env={})
    text = usage()
    assert f"A simulated {adapter(SIMULATED_ENGINE).label} server" in text
    for a in adapters():
        for flag in a.speculation_flags:
            assert flag in text


def _inputs(engine: str) -> SimpleNamespace:
    group = SimpleNamespace(engine=engine, group=None)
    return SimpleNamespace(state=SimpleNamespace(groups={"g": group}))


def test_report_prose_names_the_engines_that_ran() -> None:
    vllm, sglang = adapter("vllm"), adapter("sglang")
    intro = forced._intro(_inputs("vllm"))  # type: ignore[arg-type]
    assert f"({vllm.label}'s {vllm.forced_accept_knob}):" in intro
    assert sglang.forced_accept_knob not in intro
    assert "{knobs}" not in forced._intro(_inputs("trtllm"))  # type: ignore[arg-type]
    lines = server_view._stats_lines(_inputs("sglang"))  # type: ignore[arg-type]
    assert lines == f" ({sglang.label} {sglang.stats_lines_name}), "
    assert server_view._stats_lines(_inputs("trtllm")) == ", "  # type: ignore[arg-type]

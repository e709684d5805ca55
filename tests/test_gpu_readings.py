"""A GPU sample's readings are defined once (``results/gpu_readings.py``) and every shape of
a sample carries them: the agent's line, the reader's sample, the live event (as JSON, as
the control socket sends it), a ``telemetry.parquet`` row as the store writes it and the
report reads it, and the event the Slurm path rebuilds from a job's row.

The last test adds a reading to the definition alone (its source, patched in a child
interpreter) and follows it through every shape: a new reading is one field there and the
agent's line that reads it, and nothing in between is a second list to keep in step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from specbench_tui.engine.store import ResultsStore
from specbench_tui.hosts import gpu_agent
from specbench_tui.hosts.gpu_agent import parse_smi
from specbench_tui.hosts.host import FAKE_NVML_PATH
from specbench_tui.hosts.telemetry import GpuSample
from specbench_tui.report.inputs import read_telemetry
from specbench_tui.results import events
from specbench_tui.results import gpu_readings as definition
from specbench_tui.results.events import Event
from specbench_tui.results.layout import ResultsLayout
from specbench_tui.results.progress import CampaignProgress
from specbench_tui.results.schema import TELEMETRY_SCHEMA
from specbench_tui.tui.gpu_history import GpuHistory

H200 = Path(__file__).parent / "support" / "nvidia-smi-h200"


def agent_keys() -> set[str]:
    return {*definition.AGENT_IDENTITY, *definition.READING_NAMES}


def test_the_agent_writes_every_reading_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent cannot import the definition (it is piped to ``python -`` on hosts without
    this package), so its lines are held to it here: from NVML (simulated)."""
    (tmp_path / "gpu0.json").write_text(
        json.dumps({"gpu": 0, "pid": os.getpid(), "name": "sim", "mem_used_mib": 80000})
    )
    monkeypatch.setenv("SPECBENCH_SIM_NVML", str(tmp_path))
    monkeypatch.setenv("SPECBENCH_SIM_NVML_MODULE", str(FAKE_NVML_PATH))
    monkeypatch.setenv("SPECBENCH_SIM_GPUS", "1")
    source = gpu_agent.NvmlSource()
    try:
        (line,) = json.loads(json.dumps(source.samples([0])))
    finally:
        source.close()
    assert set(line) == agent_keys()
    missing = [k for k in definition.READING_NAMES if line[k] is None]
    assert not missing, f"the simulated NVML does not give {missing}"


def test_the_energy_counter_is_traced_between_samples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads of the energy counter alone between two samples come with the next line, in
    time order and before it, and only there (``AGENT_EXTRAS``)."""
    (tmp_path / "gpu0.json").write_text(json.dumps({"gpu": 0, "name": "sim"}))
    monkeypatch.setenv("SPECBENCH_SIM_NVML", str(tmp_path))
    monkeypatch.setenv("SPECBENCH_SIM_NVML_MODULE", str(FAKE_NVML_PATH))
    monkeypatch.setenv("SPECBENCH_SIM_GPUS", "1")
    source = gpu_agent.NvmlSource()
    try:
        source.samples([0])
        for _ in range(3):
            source.trace([0])
        (line,) = json.loads(json.dumps(source.samples([0])))
        (after,) = source.samples([0])
    finally:
        source.close()
    assert set(line) == agent_keys() | set(definition.AGENT_EXTRAS)
    trace = line["energy_trace"]
    assert len(trace) == 3 and all(len(p) == 2 for p in trace)
    assert [t for t, _ in trace] == sorted(t for t, _ in trace) and trace[-1][0] <= line["t"]
    assert "energy_trace" not in after


def test_nvidia_smi_lines_have_the_same_keys() -> None:
    (line,) = parse_smi(
        (H200 / "load.query-gpu.csv").read_text(), (H200 / "load.query-apps.csv").read_text()
    )
    assert set(line) == agent_keys()


def distinct_line() -> dict[str, Any]:
    """An agent line with a value of its own in every reading (so that a reading dropped or
    swapped on the way shows)."""
    line: dict[str, Any] = {"t": 1_700_000_000.5, "gpu": 3, "name": "H200", "processes": []}
    for i, name in enumerate(definition.READING_NAMES):
        tp = definition.READING_TYPES[name]
        line[name] = f"r{i}" if tp is str else tp(i + 11)
    line["processes"] = [{"pid": 42, "name": "python", "mem_mib": 1.0, "cmd": "serve"}]
    return line


def round_trip(tmp: Path) -> dict[str, dict[str, Any]]:
    """One agent line through every shape; the readings each shape ends with, by shape."""
    line = json.loads(json.dumps(distinct_line()))
    sample = GpuSample.from_json("h", line)
    live = Event.from_json(json.loads(json.dumps(sample.event().to_json())))
    assert isinstance(live, events.GpuSample)
    layout = ResultsLayout(tmp)
    layout.telemetry_parts.mkdir(parents=True, exist_ok=True)
    ResultsStore._write_telemetry([sample.row()], layout.telemetry_parts / "000001.parquet")
    notes: list[str] = []
    df = read_telemetry(layout, notes)
    assert df is not None and not notes
    assert dict(df.schema) == TELEMETRY_SCHEMA
    (row,) = df.to_dicts()
    from_job = events.GpuSample.from_row(row)
    assert (from_job.host, from_job.gpu, from_job.ts) == ("h", 3, line["t"])
    assert (live.host, live.gpu, live.processes) == ("h", 3, [sample.processes[0].describe()])
    return {
        "line": {k: line[k] for k in definition.READING_NAMES},
        "sample": sample.readings(),
        "event": live.readings(),
        "row": {k: row[k] for k in definition.READING_NAMES},
        "event from a job's row": from_job.readings(),
    }


def test_every_reading_survives_every_shape(tmp_path: Path) -> None:
    shapes = round_trip(tmp_path)
    want = shapes.pop("line")
    assert set(want) == set(definition.READING_NAMES)
    for shape, got in shapes.items():
        assert got == want, shape
    assert list(TELEMETRY_SCHEMA) == list(definition.TELEMETRY_COLUMNS)


def test_a_reading_the_gpu_does_not_report_is_none_and_drawn_as_zero() -> None:
    """What the console drew before the readings were defined once: 0 for a missing one."""
    line = {"t": 1.0, "gpu": 0, "util_pct": None, "mem_used_mib": 5.0, "mem_total_mib": None}
    ev = GpuSample.from_json("h", line).event()
    assert ev.util_pct is None and ev.power_w is None and ev.energy_mj is None
    p = CampaignProgress()
    p.apply(ev)
    gpu = p.gpus[("h", 0)]
    assert (gpu.util_pct, gpu.mem_used_mib, gpu.mem_total_mib, gpu.power_w, gpu.temp_c) == (
        0.0,
        5.0,
        0.0,
        0.0,
        0.0,
    )
    history = GpuHistory()
    history.ingest([ev])
    assert list(history.util[("h", 0)]) == [0.0] and list(history.mem[("h", 0)]) == [0.0]


def test_a_malformed_reading_is_refused() -> None:
    with pytest.raises(ValueError):
        GpuSample.from_json("h", {"t": 1.0, "gpu": 0, "power_w": "lots"})


@pytest.mark.system  # a child interpreter of its own
def test_a_reading_added_to_the_definition_alone_reaches_every_shape(tmp_path: Path) -> None:
    """Patch one field into the definition's source (in a child interpreter, before anything
    imports it) and run the same round trip: the new reading is in every shape, the parquet
    schema and the agent's expected keys, with no other file edited."""
    source = Path(definition.__file__).read_text()
    anchor = "    def readings(self) -> dict[str, Any]:"
    assert anchor in source
    patched = source.replace(
        anchor, '    fan_pct: float | None = _reading("%", "fan speed")\n\n' + anchor
    )
    child = textwrap.dedent(
        f"""
        import json, runpy, sys, types
        name = "specbench_tui.results.gpu_readings"
        import specbench_tui.results
        module = types.ModuleType(name)
        module.__file__ = {definition.__file__!r}
        sys.modules[name] = module
        exec(compile({patched!r}, module.__file__, "exec"), module.__dict__)
        specbench_tui.results.gpu_readings = module
        from pathlib import Path
        test = runpy.run_path({__file__!r})
        shapes = test["round_trip"](Path({str(tmp_path)!r}))
        print(json.dumps({{
            "shapes": shapes,
            "schema": list(test["TELEMETRY_SCHEMA"]),
            "agent": sorted(test["agent_keys"]()),
        }}))
        """
    )
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    want = got["shapes"].pop("line")
    assert "fan_pct" in want
    for shape, readings in got["shapes"].items():
        assert readings == want, shape
    assert "fan_pct" in got["schema"] and "fan_pct" in got["agent"]

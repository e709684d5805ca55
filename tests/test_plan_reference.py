"""The shipped plan-format reference is the plan model's: every key with its meaning, the
docs' tables exactly what the model generates, the JSON Schema from the same source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT

from specbench_tui.cli import main
from specbench_tui.plan.reference import BEGIN, END, json_schema, markdown, missing_meanings, tables

DOCS = ROOT / "docs" / "plan-format.md"


def test_every_key_of_the_model_says_what_it_means() -> None:
    assert missing_meanings() == [], (
        "keys without a comment beside them in their model: " + ", ".join(missing_meanings())
    )


def test_the_docs_hold_the_tables_the_model_generates() -> None:
    text = DOCS.read_text(encoding="utf-8")
    shipped = text[text.index(BEGIN) : text.index(END) + len(END)] + "\n"
    assert shipped == markdown(), (
        "docs/plan-format.md is out of date with the plan model: run "
        "`python -m specbench_tui.plan.reference docs/plan-format.md`"
    )


def test_every_table_and_key_is_there() -> None:
    paths = {t.path for t in tables()}
    for table in (
        "campaign",
        "hosts.NAME",
        "hosts.NAME.slurm",
        "server",
        "configs.NAME",
        "matrix",
        "matrix.exclude[]",
        "checks",
        "estimate",
    ):
        assert table in paths, table
    assert {'workloads.NAME (kind = "single")', 'workloads.NAME (kind = "agentic")'} <= paths
    server = next(t for t in tables() if t.path == "server")
    port = next(k for k in server.keys if k.name == "port")
    assert (port.type, port.bounds) == ("integer", ">= 1, <= 65535")
    config = next(t for t in tables() if t.path == "configs.NAME")
    assert config.also == "server"
    assert {k.name for k in config.keys} == {"label", "params", "forced_accept", "control"}


def test_plan_schema_prints_the_same_contract(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--plan-schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema == json.loads(json.dumps(json_schema()))
    host = schema["$defs"]["HostSpec"]["properties"]
    assert "stay away" in host["reconnect_timeout"]["description"]
    assert {"type": "string"} in host["reconnect_timeout"]["anyOf"]  # "10m" is a duration
    assert set(schema["required"]) >= {"campaign", "hosts", "configs", "matrix", "workloads"}


def test_plan_schema_takes_no_plan(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main([str(tmp_path / "p.toml"), "--plan-schema"]) == 2
    assert "--plan-schema takes no plan" in capsys.readouterr().err

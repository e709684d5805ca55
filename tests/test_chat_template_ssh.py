"""A model's template files, and a cell's host CPU counters, read over SSH the way a campaign
reads them on an SSH host: against a real sshd on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sshd_fixture import Sshd, sshd  # noqa: F401 (the fixture)

from specbench_tui.bench.conditions import cpu_conditions
from specbench_tui.engine.cell_runner import read_cpu
from specbench_tui.engine.templates import GroupTemplates
from specbench_tui.engines.tiny_model import CHAT_TEMPLATE
from specbench_tui.hosts.backends.ssh.ssh_host import SshHost
from specbench_tui.hosts.host import SshSettings
from specbench_tui.results.cells import ServiceGroup

pytestmark = pytest.mark.system


class Notices:
    def __init__(self) -> None:
        self.said: list[tuple[str, str]] = []

    def notice(self, text: str, level: str = "info") -> None:
        self.said.append((level, text))


async def test_template_read_over_ssh(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    model = tmp_path / "my model $(x)"
    model.mkdir()
    (model / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    (model / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    empty = tmp_path / "bare"
    empty.mkdir()
    host = SshHost("gpu", 1, SshSettings("sbtest", "t", ssh_config=str(sshd.config)))
    try:
        got = await host.read_files([str(model / "chat_template.jinja"), str(empty / "x.json")])
        assert got == {
            str(model / "chat_template.jinja"): CHAT_TEMPLATE,
            str(empty / "x.json"): None,
        }
        notices = Notices()
        templates = GroupTemplates(notices)  # type: ignore[arg-type]
        group = ServiceGroup(
            "gpu.ar.tp1", "gpu", "ssh", "ar", "AR", 1, (0,), 1, ("x",), (), "sglang", 60, False,
            model=str(model),
        )  # fmt: skip
        prompting = await templates.prompting(group, host)
        assert prompting.template.text == CHAT_TEMPLATE
        assert prompting.template.source == f"{model}/chat_template.jinja"
        assert dict(prompting.template.special_tokens) == {"eos_token": "<|im_end|>"}
        assert notices.said == []
        bare = ServiceGroup(
            "gpu.b.tp1", "gpu", "ssh", "b", "B", 1, (0,), 1, ("x",), (), "sglang", 60, False,
            model=str(empty),
        )  # fmt: skip
        fallback = await templates.prompting(bare, host)
        assert fallback.template.fallback
        await templates.prompting(bare, host)  # the same model again: said once
        ((level, text),) = notices.said
        assert level == "warning" and f"gpu:{empty} has neither chat_template.jinja" in text
        assert "ChatML (the fallback)" in text
    finally:
        await host.close()


async def test_cpu_counters_read_over_ssh(sshd: Sshd) -> None:  # noqa: F811
    """A cell's host CPU conditions come from the server's host: /proc read through the
    same transport as every other host read."""
    host = SshHost("gpu", 1, SshSettings("sbtest", "t", ssh_config=str(sshd.config)))
    try:
        before = await read_cpu(host)
        after = await read_cpu(host)
        assert before is not None and after is not None and after.cpus >= 1
        got = cpu_conditions(before, after)
        if got:  # the two reads a jiffy apart at least
            assert 0 <= got["host_cpu_busy"] <= 1 and got["host_load_per_cpu"] >= 0
        assert (before.pressure_us is None) == (not Path("/proc/pressure/cpu").exists())
    finally:
        await host.close()

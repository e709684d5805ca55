"""ESC, BEL and the other control characters a title, a label, a reason or a server's log line
may hold never reach a terminal or ``report.md`` raw: the dry run, the headless lines and the
report show them as escapes (``\\x1b``), so nothing is obeyed and nothing is lost."""

from __future__ import annotations

import asyncio
import io
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.results_builder import ResultsBuilder

from specbench_tui.cli import main
from specbench_tui.engine.headless import print_events
from specbench_tui.printable import printable
from specbench_tui.report.build import build_report
from specbench_tui.report.render import render_texts
from specbench_tui.results.events import CampaignStarted, CellFailed, Event, Notice
from specbench_tui.results.layout import ResultsLayout
from tests.conftest import MINIMAL_PLAN

EVIL = "evil \x1b]0;pwned\x07 \x1b[31mred\x9b2J"
# What a terminal would obey: C0 controls but tab and line feed, DEL, C1 controls.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def test_printable_escapes_controls_and_keeps_tabs_and_lines() -> None:
    assert printable(EVIL) == "evil \\x1b]0;pwned\\x07 \\x1b[31mred\\x9b2J"
    assert printable("a\tb\nc") == "a\tb\nc"
    assert printable("a\nb\r", one_line=True) == "a\\nb\\x0d"
    assert printable("plain ünïcode") == "plain ünïcode"


def test_the_dry_run_escapes_a_title_and_a_label(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = MINIMAL_PLAN.replace("{port}", "39998").replace(
        'baseline = "ar"', 'baseline = "ar"\ntitle = "evil \\u001b]0;pwned\\u0007 \\u001b[31mred"'
    )
    text = text.replace('label = "AR"', 'label = "AR \\u001b[5mblink"')
    plan = tmp_path / "plan.toml"
    plan.write_text(text)
    assert main([str(plan), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert not RAW.search(out), repr(out[:300])
    assert "Campaign t: evil \\x1b]0;pwned\\x07 \\x1b[31mred" in out
    assert "AR \\x1b[5mblink" in out


def test_report_md_escapes_what_the_log_carries(tmp_path: Path) -> None:
    b = ResultsBuilder(tmp_path / "syn", title=EVIL)
    b.cell("c1", "ar", 1, "single", "single", label="AR \x1b[5m")
    b.cell("c2", "ar", 1, "single", "single", max_tokens=128)
    b.ready("sim.ar.tp1")
    b.finished("c1", [dict(prompt_id="p0", repeat=0)])
    b.failed("c2", "server said \x1b[2J\x07 and died")
    b.write()
    md, tex = render_texts(build_report(b.root))
    assert not RAW.search(md), [m.group() for m in RAW.finditer(md)]
    assert "\\x1b" in md and "and died" in md
    assert not RAW.search(tex)


class _Campaign:
    """What the headless printer reads of a campaign: its events and where its rows are."""

    def __init__(self, events: list[Event], root: Path) -> None:
        self.events = events
        self.layout = ResultsLayout(root)

    async def subscribe(self) -> AsyncIterator[Event]:
        for ev in self.events:
            yield ev


def test_headless_lines_escape_controls_and_stay_one_line(tmp_path: Path) -> None:
    events: list[Event] = [
        CampaignStarted(campaign="t", pid=os.getpid(), results_dir=str(tmp_path)),
        Notice(level="warning", text="a log said \x1b]0;pwned\x07\nand more"),
        CellFailed(cell_id="c1", cell="g/single", reason="\x1b[31mboom\x1b[0m"),
    ]
    out = io.StringIO()
    asyncio.run(print_events(_Campaign(events, tmp_path), out))  # type: ignore[arg-type]
    lines = out.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert not RAW.search(out.getvalue())
    assert lines[1].endswith("a log said \\x1b]0;pwned\\x07\\nand more")
    assert "\\x1b[31mboom\\x1b[0m" in lines[2]

"""Which cells the plan tree shows: a filter typed by the operator (ctrl+f), by name and by
status, so that one config, one prompt set or every failed TP4 cell of a 480-cell plan is a
few keys away.

The text is words; a word that names a status (``done``, ``failed``, ``running``,
``pending``, ``skipped``, ``held``, ``check`` for a failed correctness check) keeps cells in
that status, any other word must occur in the cell's name (host, group, config, TP, workload,
prompt set, tokens, level), its id or its config's label, case-insensitively; a word that
is a config's name keeps that config only (``ar`` is not every name with an "ar" in it). A
cell shows when it matches every name word and, where status words are given, one of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Input

from specbench_tui.results.progress import CampaignProgress
from specbench_tui.results.state import CellState

STATUS_WORDS: dict[str, str] = {
    "done": "done",
    "failed": "failed",
    "running": "running",
    "pending": "pending",
    "skipped": "skipped",
    "held": "held",
    "check": "failed_check",
}


@dataclass(frozen=True)
class PlanFilter:
    text: str = ""

    @property
    def words(self) -> list[str]:
        return self.text.lower().split()

    @property
    def active(self) -> bool:
        return bool(self.words)

    def matches(self, c: CellState, p: CampaignProgress, configs: frozenset[str]) -> bool:
        statuses = {STATUS_WORDS[w] for w in self.words if w in STATUS_WORDS}
        names = [w for w in self.words if w not in STATUS_WORDS]
        if statuses and _status(c) not in statuses:
            return False
        g = p.groups.get(c.group)
        hay = " ".join(
            (c.id, c.cell.name if c.cell is not None else c.group, c.config, g.label if g else "")
        ).lower()
        return all(c.config.lower() == w if w in configs else w in hay for w in names)

    def cells(self, p: CampaignProgress) -> frozenset[str]:
        configs = frozenset(c.config.lower() for c in p.cells.values())
        return frozenset(c.id for c in p.cells.values() if self.matches(c, p, configs))


def _status(c: CellState) -> str:
    if c.failed_check:
        return "failed_check"
    if c.held:
        return "held"
    return c.status


class FilterSet(Message):
    """The operator applied (enter) or cleared (esc) the plan filter."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class PlanFilterInput(Input):
    """One line under the plan tree: enter applies, esc clears."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def __init__(self) -> None:
        super().__init__(
            placeholder="filter the plan: name words, or failed/running/done/… (esc: clear)",
            id="tree-filter",
            compact=True,
        )

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.post_message(FilterSet(event.value))

    def action_clear_filter(self) -> None:
        self.value = ""
        self.post_message(FilterSet(""))

"""Modal screens: the help (generated from the key table, so it cannot drift from the keys)
and the yes/no confirmation used before abort and quit."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static

from specbench_tui.tui.look import MARKS

PANES_HELP = (
    (
        "Plan",
        "host > service group > workload > cell; marks: "
        + "  ".join(f"{m} {s.replace('_', ' ')}" for s, m in MARKS.items())
        + " (done, but its config failed a correctness check: not a speed-up). Collapsed "
        "nodes count what they hide. The running cell is followed (f); F shows only failed "
        "cells.",
    ),
    (
        "Detail",
        "the selected node: parameters, server command line, figures or failure "
        "reason with the log tail.",
    ),
    (
        "Service & GPUs",
        "server state, the running group's cells settled, elapsed and ETA, the server "
        "log's latest figures; per GPU a sparkline of recent utilization, memory, power, "
        "temperature and the holding process (● = used by this group).",
    ),
    (
        "Live",
        "output tok/s per request, server gen throughput, accept length, TTFT; one labelled "
        "series per running group (▸ the selected one); x is seconds since the campaign "
        "started. At 80x24 two plots show; z on the pane shows all four.",
    ),
    (
        "Results",
        "the comparison table as the report computes it, rebuilt when a cell finishes: per "
        "TP, each config's tok/s and speed-up over the baseline (± a 95% interval when "
        "repeats allow), accept length; ★ best where it is distinguishable, ⚠ a config "
        "that failed a check; one row per prompt set and length (v: pooled), n/m on a row "
        "with cells still to run (never ★). o / O sort, [ ] change TP.",
    ),
    (
        "Log",
        "the selected group's server log (a group, or one of its workloads or cells; n "
        "cycles the running groups); the title says whose it is and whether it still "
        "runs, and an ended group's log is read from logs/<group>.log. Decode/Prefill "
        "batch lines show their figures (accept, gen tok/s first); lines the plan's "
        "[logs] patterns matched start with ◆ and what they extracted. / filters, l "
        "freezes the view (the campaign keeps running), w wraps long lines; else ← → "
        "scroll the focused log sideways.",
    ),
)


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q,f1", "app.pop_screen", "Close help", id="help.close"),
    ]

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 96; max-width: 100%; height: auto; max-height: 100%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    """

    def __init__(self, keys: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True)
        table.add_column()
        table.add_column(style="dim")
        for key, desc, longer in self.keys:
            table.add_row(Text(key), Text(desc), Text(longer))
        panes = Table.grid(padding=(0, 2))
        panes.add_column(style="bold", no_wrap=True)
        panes.add_column()
        for name, text in PANES_HELP:
            panes.add_row(Text(name), Text(text))
        with VerticalScroll() as v:
            v.border_title = "specbench console · help"
            v.border_subtitle = "esc to close"
            yield Static(Text("Keys (also in the command palette, ctrl+p)", style="bold"))
            yield Static(table)
            yield Static(Text("\nPanes", style="bold"))
            yield Static(panes)
            yield Static(
                Text(
                    "\nCommands go to the campaign; its answer shows as a "
                    "notification. Tab moves between panes.",
                    style="dim",
                )
            )


class ConfirmScreen(ModalScreen[bool | str]):
    """Yes/no, keyboard first: y or enter confirms, n or escape cancels. ``other`` adds a
    third answer, by its button or its label's first letter (the quit question's Detach),
    and the screen then answers with that label in lower case."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]

    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical {
        width: 64; max-width: 100%; height: auto;
        border: thick $error; background: $surface; padding: 1 2;
    }
    ConfirmScreen Label { width: 100%; }
    ConfirmScreen Horizontal { height: auto; align: center middle; margin-top: 1; }
    ConfirmScreen Button { margin: 0 2; }
    """

    def __init__(
        self,
        question: str,
        yes: str = "Yes",
        no: str = "No",
        *,
        purpose: str = "",
        other: str | None = None,
    ) -> None:
        super().__init__()
        self.question, self.yes, self.no, self.other = question, yes, no, other
        self.purpose = purpose  # "quit": a second ctrl+c answers yes

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.question, markup=False)
            with Horizontal():
                yield Button(f"{self.yes} (y)", variant="error", id="yes")
                if self.other:
                    key = self.other[0].lower()
                    yield Button(f"{self.other} ({key})", variant="warning", id="other")
                yield Button(f"{self.no} (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()  # the safe answer is the default

    def on_key(self, event: events.Key) -> None:
        if self.other and event.character == self.other[0].lower():
            event.stop()
            self.dismiss(self.other.lower())

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "other" and self.other:
            self.dismiss(self.other.lower())
            return
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)

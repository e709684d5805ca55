"""The console's keys as data: the footer, the help screen and the palette are all built from
this table, so a key cannot exist without a description (or be described and not exist).

Every binding has an id (``area.name``) and a one-word description for the footer; ``HELP``
holds the longer sentence the help screen and the palette show. ``FOOTER_WIDE_ONLY`` names the
actions that leave the footer on a compact (80-column) terminal, so that Help and Quit always
stay visible there; their keys work at every size.
"""

from __future__ import annotations

from textual.binding import Binding, BindingType

BINDINGS: list[BindingType] = [
    Binding("space,p", "toggle_pause", "Pause", id="campaign.pause", key_display="p"),
    Binding("s", "skip", "Skip", id="campaign.skip"),
    Binding("u", "undo_skip", "Undo skip", id="campaign.undo_skip", show=False),
    Binding("r", "rerun", "Rerun", id="campaign.rerun"),
    Binding("R", "rerun_failed", "Rerun failed", id="campaign.rerun_failed", show=False),
    Binding("g", "retry_group", "Retry group", id="campaign.retry_group", show=False),
    Binding("a", "abort", "Abort", id="campaign.abort"),
    Binding("f", "toggle_follow", "Follow", id="view.follow"),
    Binding("F", "toggle_failed_only", "Failed only", id="view.failed_only", show=False),
    Binding("n", "next_running_group", "Next group", id="view.next_group", show=False),
    Binding("slash", "search_log", "Search", id="view.search"),
    Binding("ctrl+f", "filter_tree", "Filter plan", id="view.filter_tree", show=False),
    Binding("l", "freeze_log", "Freeze log", id="view.freeze_log", show=False),
    Binding("w", "wrap_log", "Wrap log", id="view.wrap_log", show=False),
    Binding("6", "toggle_pane('results')", "Results", id="view.pane.results"),
    Binding("z", "maximize_pane", "Zoom", id="view.maximize"),
    Binding("1", "toggle_pane('tree')", "Plan pane", id="view.pane.tree", show=False),
    Binding("2", "toggle_pane('detail')", "Detail pane", id="view.pane.detail", show=False),
    Binding("3", "toggle_pane('health')", "Health pane", id="view.pane.health", show=False),
    Binding("4", "toggle_pane('plots')", "Plots pane", id="view.pane.plots", show=False),
    Binding("5", "toggle_pane('logpane')", "Log pane", id="view.pane.log", show=False),
    Binding("t", "next_theme", "Theme", id="view.theme", show=False),
    Binding("ctrl+s", "save_screenshot", "Screenshot", id="view.screenshot", show=False),
    Binding("question_mark,f1", "help", "Help", id="app.help"),
    Binding("d", "detach", "Detach", id="app.detach", show=False),
    Binding("q", "request_quit", "Quit", id="app.quit"),
    # Ctrl-C and Ctrl-Q ask like q does (a terminal's reflex must not cost a running cell).
    Binding("ctrl+c,ctrl+q", "request_quit", "Quit", id="app.quit_ctrl", show=False, priority=True),
]

#: Bindings that are aliases of another row: not listed twice in help and palette.
ALIASES: frozenset[str] = frozenset({"app.quit_ctrl"})

#: Footer entries shown only when the terminal is wide enough (see the module docstring).
FOOTER_WIDE_ONLY: frozenset[str] = frozenset(
    {"toggle_follow", "maximize_pane", "toggle_pane('results')"}
)

#: Actions that change a campaign: a read-only view (nothing runs the campaign) leaves them
#: out of the footer and answers them with why and how to run it again.
MUTATIONS: frozenset[str] = frozenset(
    {"toggle_pause", "skip", "undo_skip", "rerun", "rerun_failed", "retry_group", "abort"}
)

#: Longer words for the help screen and the palette, keyed by action.
HELP: dict[str, str] = {
    "toggle_pause": "pause after the running cell, or resume; after the end, run what is left",
    "skip": "skip the selected cell or group (the running cell while following); asks "
    "first, with the counts, when that skips more than one cell",
    "undo_skip": "take back the last skip (within a minute, while the campaign runs): its "
    "cells are queued again",
    "rerun": "queue the selected cell, workload or group again (asks before re-measuring "
    "finished cells); after the end, runs them again",
    "rerun_failed": "queue every failed cell again; after the end, runs them again",
    "abort": "stop the campaign (asks first, saying what it stops); finished results are kept",
    "retry_group": "restart the selected (or current) service group's server (asks first: "
    "minutes on a large model); after the end, runs its failed cells again",
    "toggle_follow": "follow the running cell in the plan tree, or stop following",
    "toggle_failed_only": "show only failed cells (and configs that failed a check) in the plan",
    "next_running_group": "select the next running service group: the log shows its lines "
    "and the plots mark its series (the log always shows the selected group's)",
    "search_log": "filter the log for a text; esc clears",
    "filter_tree": "filter the plan tree: words of a cell's name (config, TP, prompt set, "
    "tokens, level) and status words (failed, running, done, pending, skipped, held, check); "
    "enter applies, esc clears",
    "freeze_log": "freeze the log view; the campaign keeps running",
    "wrap_log": "wrap long log lines, or cut them (then ← → scroll the focused log sideways)",
    "toggle_pane('results')": "show or hide the results table (per TP; o sorts, [ ] change TP)",
    "maximize_pane": "zoom the focused pane to the whole screen, or back",
    "toggle_pane('tree')": "show or hide the plan tree",
    "toggle_pane('detail')": "show or hide the detail pane",
    "toggle_pane('health')": "show or hide service and GPU health",
    "toggle_pane('plots')": "show or hide the live plots",
    "toggle_pane('logpane')": "show or hide the log",
    "next_theme": "switch to the next console theme",
    "save_screenshot": "save an SVG of the screen into the results directory",
    "help": "this screen",
    "detach": "leave the console and let the campaign it started go on in its own process; "
    "specbench-tui --attach DIR comes back to it (also in the quit question)",
    "request_quit": "leave the console (asks first while the campaign runs: stop it, or "
    "detach); also ctrl+c",
}

#: Palette titles where the footer word is too short to find an action by name.
PALETTE_TITLES: dict[str, str] = {
    "skip": "Skip selected cell",
    "undo_skip": "Undo the last skip",
    "rerun": "Rerun selected",
    "abort": "Abort campaign",
    "toggle_follow": "Follow running cell (toggle)",
    "toggle_failed_only": "Plan: failed cells only (toggle)",
    "next_running_group": "Next running group's log",
    "search_log": "Search log",
    "filter_tree": "Filter plan by name or status",
    "wrap_log": "Wrap log lines (toggle)",
    "maximize_pane": "Maximize focused pane (toggle)",
    "next_theme": "Next theme",
    "save_screenshot": "Screenshot (SVG into the results directory)",
    "help": "Help (keys and panes)",
    "request_quit": "Quit console",
    "detach": "Detach (the campaign goes on headless)",
    "toggle_pane('results')": "Toggle results table",
}

#: Keys that only act inside one pane, for the help screen: (key, what, longer).
PANE_KEYS: list[tuple[str, str, str]] = [
    ("tab", "Next pane", "move the focus between panes"),
    ("ctrl+p", "Palette", "every action by name, themes too"),
    (
        "enter",
        "Expand",
        "expand or collapse a tree node, at once (a key typed after it moves in what it opened)",
    ),
    ("← →", "Scroll log", "in the focused log, when lines are cut (w wraps them instead)"),
    ("o / O", "Sort results", "in the results table: next sort column / reverse the order"),
    ("[ ]", "Results TP", "in the results table: previous / next TP size"),
    (
        "v",
        "Pooled results",
        "in the results table: the pooled row per workload, or one row per prompt set and length",
    ),
]

"""The log pane's half of the console: whose log it shows (the selected group's), read from where
(the event stream, or the stored log), and the log's keys.

A mixin of ``ConsoleApp`` (tui/app.py), which holds the state these read."""

from __future__ import annotations

import time

from specbench_tui.results.layout import ResultsLayout
from specbench_tui.tui.group_logs import stored_log_tail
from specbench_tui.tui.log_pane import LogPane
from specbench_tui.tui.plan_tree import NodeRef, PlanTree


class LogView:
    """The log pane's half of the console."""

    def selected_group(self) -> str | None:
        """The group the selection belongs to (a group, one of its workloads or cells), else
        the latest running group of a selected host, else the current group, else the one
        started last (an ended campaign)."""
        p = self.progress
        ref = self._selected
        if ref is not None:
            if ref.kind == "group" and ref.key in p.groups:
                return ref.key
            if ref.kind == "workload":
                gid = ref.key.rpartition("/")[0]
                if gid in p.groups:
                    return gid
            if ref.kind == "cell" and ref.key in p.cells:
                return p.cells[ref.key].group
            if ref.kind == "host":
                on = p.running_on(ref.key)
                if on:
                    return on[-1].id
        if p.current_group is not None:
            return p.current_group
        started = [g for g in p.groups.values() if g.started_at is not None]
        if started:
            return max(started, key=lambda g: g.started_at or 0.0).id
        return next(iter(p.groups), None)

    def group_status(self, gid: str) -> str:
        """Whether a group still runs, for the log pane's title."""
        p = self.progress
        g = p.groups.get(gid)
        if g is None:
            return ""
        if self.read_only:
            return "stored log (not running)"
        if gid in p.running_groups:
            return "running" if g.server != "starting" else "running · server starting"
        if g.status == "pending" and g.server == "pending":
            return "not started"
        return f"ended ({g.status})" if g.status not in ("pending", "running") else "stopped"

    def _group_lines(self, gid: str) -> list[str]:
        """What is kept of a group's log; a group the console has no lines of and that no
        longer runs (it ran before the console attached, or nothing runs the campaign) is
        read from its stored log, once. In the console that runs the campaign a running
        group waits for its lines: they are on their way in the event stream, and reading
        its file too would show them twice. An attached console reads the file of every
        group it shows, running or not, once: the stream replays only the campaign's last
        events, which may hold an earlier server's crash and none of the newer runs' lines;
        the stream's lines from before the read are dropped (they are in the file)."""
        attached = not self.control.owns_engine and not self.read_only
        if attached and gid not in self._seeded:
            self._seeded.add(gid)
            read_at = time.time()
            root = self.results_root()
            stored = stored_log_tail(ResultsLayout(root).log_of(gid)) if root else None
            if stored is not None:  # else the stream's lines are all there is
                self._log_read[gid] = read_at
                self.group_logs.seed(gid, stored, replace=True)
            return self.group_logs.lines(gid)
        if (
            not self.group_logs.has(gid)
            and gid not in self._seeded
            and gid not in self.progress.running_groups
        ):
            self._seeded.add(gid)
            root = self.results_root()
            stored = stored_log_tail(ResultsLayout(root).log_of(gid)) if root else None
            if stored:
                self.group_logs.seed(gid, stored)
        return self.group_logs.lines(gid)

    def _sync_log(self) -> None:
        """Show the selected group's log, its title saying whose it is and whether it runs."""
        gid = self.selected_group()
        logpane = self.main.query_one(LogPane)
        if gid is None:
            return
        running = list(self.progress.running_groups)
        hint = ""
        if len(running) > 1:
            where = f"{running.index(gid) + 1} of " if gid in running else ""
            hint = f"{where}{len(running)} running (n: next)"
        lines = self._group_lines(gid) if gid != logpane.group else []
        logpane.show_group(gid, lines, self.group_status(gid), hint)
        if self.read_only and not logpane.lines and gid != self._noted:
            self._noted = gid
            root = self.results_root()
            logpane.note(f"(no stored log for {gid} in {root}/logs/)")

    def action_next_running_group(self) -> None:
        """Cycle the selection (and with it the log and the plots' marked series) through
        the groups that run now, in start order; following stops, as for any move."""
        running = list(self.progress.running_groups)
        if not running:
            self._say_view("no group is running now", timeout=3)
            return
        current = self.selected_group()
        nxt = (
            running[(running.index(current) + 1) % len(running)]
            if current in running
            else running[0]
        )
        self.follow = False
        self._selected = NodeRef("group", nxt)
        self.main.query_one(PlanTree).reveal(self._selected)
        self._show_detail()
        self._sync_log()
        self._redraw_plots(force=True)

    def action_search_log(self) -> None:
        self._user_display["logpane"] = True
        self._apply_panes()
        self.main.query_one(LogPane).open_search()

    def action_freeze_log(self) -> None:
        frozen = self.main.query_one(LogPane).toggle_freeze()
        self.notify(
            "log view frozen; the campaign keeps running (l to follow)"
            if frozen
            else "log view following again",
            timeout=3,
        )

    def action_wrap_log(self) -> None:
        wrapped = self.main.query_one(LogPane).toggle_wrap()
        self._user_wrap = wrapped
        self.notify(
            "log lines wrap (w cuts them again)"
            if wrapped
            else "log lines cut at the edge: ← → scroll the focused log sideways",
            timeout=3,
        )

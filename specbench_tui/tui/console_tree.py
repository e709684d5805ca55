"""The plan tree's half of the console: painting the tree, following the running cell, the
selection and what it holds, and the keys that narrow the tree (follow, failed only, the
filter).

A mixin of ``ConsoleApp`` (tui/app.py), which holds the state these read."""

from __future__ import annotations

from textual import events
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from specbench_tui.tui.console_layout import PANE_TITLES
from specbench_tui.tui.frame import (
    TreeRepaint,
)
from specbench_tui.tui.plan_filter import FilterSet, PlanFilter, PlanFilterInput
from specbench_tui.tui.plan_tree import NodeRef, PlanTree


class PlanNavigated(events.Event):
    """The operator moved the tree cursor themselves: stop following the running cell."""


class TreeView:
    """The plan tree's half of the console."""

    def _paint_tree(self, tree: PlanTree, plan: TreeRepaint) -> None:
        if plan.rebuild:
            self._rebuild_tree()
        elif plan.relabel_all:
            tree.relabel_all()
        else:
            for cid in plan.cells:
                tree.relabel_cell(cid)
            for gid in plan.groups:
                tree.relabel_group(gid)

    def _rebuild_tree(self) -> None:
        tree = self.main.query_one(PlanTree)
        tree.build(self.progress)
        self._followed = None
        title = PANE_TITLES["tree"]
        if tree.only_failed:
            title += " · failed only (F: all)"
        if tree.filter.active:
            title += f" · {tree.filter.text.strip()} ({len(tree.shown_matches)})"
        self.main.query_one("#tree").border_title = title
        narrowed = tree.filter.active or tree.only_failed
        hidden = self._selected is not None and self._selected.kind != "root"
        if narrowed and hidden and self._selected not in tree.nodes_by_ref:
            # The detail must not stay on what the tree no longer shows: the first cell the
            # tree keeps, or nothing.
            kept = [r for r in tree.nodes_by_ref if r.kind == "cell"]
            self._selected = kept[0] if kept else None
            self._show_detail()
        if not self.follow and self._selected is not None:
            tree.reveal(self._selected)

    def _follow_target(self) -> NodeRef | None:
        """What following shows: the running cell of the group it shows while that group
        runs one (packed groups start cells in turn: hopping between them every second or
        two left no time to act on one), else the running cell started last, else the
        current group."""
        p = self.progress
        shown = self._selected.key if self._selected is not None else None
        group = p.groups.get(p.cells[shown].group) if shown in p.cells else None
        if group is not None:  # its own cells, not the campaign's: this runs every frame
            own = [p.cells[c] for c in group.cells if p.cells[c].status == "running"]
            if own:
                return NodeRef("cell", max(own, key=lambda c: c.started_at or 0.0).id)
        if p.current_cell:
            return NodeRef("cell", p.current_cell)
        return NodeRef("group", p.current_group) if p.current_group else None

    def _follow_current(self) -> None:
        tree = self.main.query_one(PlanTree)
        ref = self._follow_target()
        if ref is None or ref.key == self._followed:
            return
        if tree.reveal(ref, collapse_others=True) is None:
            return  # not in the tree (filtered out)
        if self._followed is not None:  # a move from one shown target to another
            self.followed_at = self.now_mono()
        self._followed = ref.key
        self._selected = ref
        self._show_detail()
        self._sync_log()

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[NodeRef]) -> None:
        self._selected = event.node.data
        if not self.screen_stack:  # a highlight still queued as the console closes
            return
        self._show_detail()
        self._sync_log()
        self._redraw_plots(force=True)

    def on_tree_node_expanded(self, event: Tree.NodeExpanded[NodeRef]) -> None:
        self.main.query_one(PlanTree).relabel_node(event.node)

    def on_tree_node_collapsed(self, event: Tree.NodeCollapsed[NodeRef]) -> None:
        self.main.query_one(PlanTree).relabel_node(event.node)

    def on_plan_navigated(self, _event: PlanNavigated) -> None:
        if self.follow:
            self.follow = False
            self.notify("following off: f follows the running cell again", timeout=3)

    def _selected_node(self) -> TreeNode[NodeRef] | None:
        return self.main.query_one(PlanTree).cursor_node

    def selected_ref(self) -> NodeRef | None:
        node = self._selected_node()
        return node.data if node is not None else None

    def cell_ids_under(self, ref: NodeRef) -> list[str]:
        return self.main.query_one(PlanTree).cell_ids_under(ref)

    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        self._followed = None
        if self.follow:
            self._follow_current()
        self.notify("following the running cell" if self.follow else "following off", timeout=2)

    def action_toggle_failed_only(self) -> None:
        tree = self.main.query_one(PlanTree)
        tree.only_failed = not tree.only_failed
        self._rebuild_tree()
        n = len(tree.shown_failures)
        self.notify(
            f"plan: failed cells only ({n})" if tree.only_failed else "plan: every cell",
            timeout=3,
        )

    def action_filter_tree(self) -> None:
        """ctrl+f: type words of a name or a status; the tree keeps the cells that match."""
        self._user_display["tree"] = True
        self._apply_panes()
        box = self.main.query_one(PlanFilterInput)
        box.display = True
        box.value = self.main.query_one(PlanTree).filter.text
        box.focus()

    def on_filter_set(self, message: FilterSet) -> None:
        tree = self.main.query_one(PlanTree)
        tree.filter = PlanFilter(message.text)
        box = self.main.query_one(PlanFilterInput)
        box.display = tree.filter.active
        self._rebuild_tree()
        tree.focus()
        if tree.filter.active:
            n = len(tree.shown_matches)
            self.notify(f"plan: {n} cell{'s' * (n != 1)} match (ctrl+f, esc clears)", timeout=3)

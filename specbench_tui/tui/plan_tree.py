"""The plan as a tree: host > service group > workload > cell, with a status mark per node.

Node labels are computed from ``CampaignProgress`` (never stored state of their own), and only
the nodes an event touched are relabelled, so a long campaign's tree costs nothing per frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from specbench_tui.results.progress import CampaignProgress, Counts
from specbench_tui.tui.look import MARKS, SERVER_MARKS, Palette, palette_for, shown_status
from specbench_tui.tui.plan_filter import PlanFilter

NodeKind = Literal["root", "host", "group", "workload", "cell"]


@dataclass(frozen=True)
class NodeRef:
    """What a tree node stands for; ``key`` is a host name, group id, ``group/workload`` or
    cell id."""

    kind: NodeKind
    key: str


def status_of(counts: Counts, running: bool = False, failed_checks: int = 0) -> str:
    """The mark of a node that holds several cells: running wins, then failed, then a failed
    check, then done once every cell is settled, else pending."""
    if running or counts.running:
        return "running"
    if counts.failed:
        return "failed"
    if failed_checks:
        return "failed_check"
    if counts.total and counts.pending == 0:
        return "done" if counts.done else "skipped"
    return "pending"


class PlanTree(Tree[NodeRef]):
    """The plan tree. Space is the campaign's pause key everywhere, so it is taken back from
    Tree (which uses it to expand); enter still expands and collapses, at once (see
    ``action_select_cursor``)."""

    ICON_NODE = "+ "
    ICON_NODE_EXPANDED = "- "

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "app.toggle_pause", "Pause/resume", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("plan", data=NodeRef("root", ""), id=id)
        self.show_root = False
        self.guide_depth = 2
        self.auto_expand = False  # enter expands in ``action_select_cursor``, not later
        self.nodes_by_ref: dict[NodeRef, TreeNode[NodeRef]] = {}
        self._progress: CampaignProgress | None = None
        self._pal: Palette | None = None
        self.only_failed = False
        self.filter = PlanFilter()  # the operator's filter by name and status (ctrl+f)
        self.shown_matches: frozenset[str] = frozenset()  # the cells that filter let through
        self._moved_to: TreeNode[NodeRef] | None = None  # the node ``reveal`` scrolled to
        self.shown_failures: frozenset[str] = frozenset()  # the failing cells a filtered tree shows

    def action_select_cursor(self) -> None:
        """Enter expands or collapses the node under the cursor before the next key is read.

        Textual's Tree expands when its ``NodeSelected`` message is handled, which comes after
        keys already queued: enter then down on a collapsed group went past the group, and a
        following ``s`` skipped the next group. Toggling here changes the lines the next key
        moves over; the message still goes out for whoever listens."""
        if self.cursor_line < 0:
            return
        node = self.cursor_node
        if node is None:
            return
        if node.allow_expand:
            node.toggle()
        self.post_message(Tree.NodeSelected(node))

    # --- building ---------------------------------------------------------------------------

    @staticmethod
    def failing(p: CampaignProgress) -> frozenset[str]:
        """Cells the failed-only view shows: failed ones and finished ones whose config
        failed a correctness check."""
        return frozenset(c.id for c in p.cells.values() if c.status == "failed" or c.failed_check)

    def needs_rebuild(self, p: CampaignProgress) -> bool:
        """Whether a narrowed tree shows other cells than it would now (a cell failed, one
        matching a status filter started or ended)."""
        if self.only_failed and self.failing(p) != self.shown_failures:
            return True
        return self.filter.active and self.filter.cells(p) != self.shown_matches

    def build(self, p: CampaignProgress) -> None:
        """Rebuild from the plan (on campaign_started, or when the failed-only filter or the
        set of failing cells changes); cheap for hundreds of cells."""
        self._progress = p
        self._pal = palette_for(self.app)
        self.clear()
        self.nodes_by_ref = {}
        self.shown_failures = self.failing(p)
        self.shown_matches = self.filter.cells(p) if self.filter.active else frozenset()
        narrowed = self.only_failed or self.filter.active
        hosts: dict[str, TreeNode[NodeRef]] = {}
        for gid, g in p.groups.items():
            cids = [
                c
                for c in g.cells
                if (not self.only_failed or c in self.shown_failures)
                and (not self.filter.active or c in self.shown_matches)
            ]
            if not cids:
                continue
            host = g.host or "?"
            if host not in hosts:
                hosts[host] = self._add(self.root, NodeRef("host", host), expand=True)
            gnode = self._add(hosts[host], NodeRef("group", gid), expand=narrowed)
            workloads: dict[str, TreeNode[NodeRef]] = {}
            for cid in cids:
                cell = p.cells[cid]
                wkey = f"{gid}/{cell.workload}"
                if wkey not in workloads:
                    workloads[wkey] = self._add(gnode, NodeRef("workload", wkey), expand=True)
                self._add(workloads[wkey], NodeRef("cell", cid), leaf=True)
        if narrowed and not hosts:
            why = (
                f"no cell matches {self.filter.text.strip()!r} (ctrl+f, esc clears)"
                if self.filter.active
                else "no failed cells (F shows every cell)"
            )
            self.root.add_leaf(Text(why, style="dim"), data=NodeRef("root", "empty"))
        self.relabel_all()

    def _add(
        self, parent: TreeNode[NodeRef], ref: NodeRef, *, expand: bool = False, leaf: bool = False
    ) -> TreeNode[NodeRef]:
        node = parent.add_leaf("", data=ref) if leaf else parent.add("", data=ref, expand=expand)
        self.nodes_by_ref[ref] = node
        return node

    # --- labels -----------------------------------------------------------------------------

    def relabel_all(self) -> None:
        self._pal = palette_for(self.app)
        for node in self.nodes_by_ref.values():
            self._relabel(node)

    def relabel_cell(self, cell_id: str) -> None:
        """Relabel a cell and its ancestors (their counts changed with it)."""
        node = self.nodes_by_ref.get(NodeRef("cell", cell_id))
        while node is not None and node.data is not None and node.data.kind != "root":
            self._relabel(node)
            node = node.parent

    def relabel_host(self, host: str) -> None:
        node = self.nodes_by_ref.get(NodeRef("host", host))
        if node is not None:
            self._relabel(node)

    def relabel_group(self, gid: str) -> None:
        node = self.nodes_by_ref.get(NodeRef("group", gid))
        if node is not None:
            self._relabel(node)

    def relabel_node(self, node: TreeNode[NodeRef]) -> None:
        self._relabel(node)

    def _relabel(self, node: TreeNode[NodeRef]) -> None:
        if node.data is not None and self._progress is not None:
            node.set_label(self.label_for(node.data, expanded=node.is_expanded))

    def cell_ids_under(self, ref: NodeRef) -> list[str]:
        p = self._progress
        if p is None:
            return []
        if ref.kind == "cell":
            return [ref.key]
        if ref.kind == "group":
            return list(p.groups[ref.key].cells) if ref.key in p.groups else []
        if ref.kind == "workload":
            gid, _, wl = ref.key.rpartition("/")
            g = p.groups.get(gid)
            return [c for c in (g.cells if g else []) if p.cells[c].workload == wl]
        if ref.kind == "host":
            return [c.id for c in p.cells.values() if (c.host or p.groups[c.group].host) == ref.key]
        return list(p.cells)

    def label_for(self, ref: NodeRef, *, expanded: bool) -> Text:
        p = self._progress
        pal = self._pal or palette_for(self.app)
        assert p is not None
        t = Text(no_wrap=True, overflow="ellipsis")
        if ref.kind == "cell":
            c = p.cells[ref.key]
            status = shown_status(c.status, c.failed_check)
            t.append(MARKS[status] + " ", style=pal.status(status))
            prefix = f"{c.group}/{c.workload}/"
            short = c.name[len(prefix) :] if c.name.startswith(prefix) else c.workload
            t.append(short or c.workload, style=pal.bold if c.status == "running" else "")
            if c.status == "running" and c.requests_total:
                t.append(f" {c.requests_done}/{c.requests_total}", style=pal.accent)
            if c.attempt > 1 or (c.status == "pending" and c.attempt >= 1):
                nxt = c.attempt + 1 if c.status == "pending" else c.attempt
                t.append(f" #{nxt}", style=pal.warning)
            if c.failed_check:
                t.append(" failed check", style=pal.warning)
            if c.resumed:
                t.append(" (earlier run)", style=pal.muted)
            return t
        under = self.cell_ids_under(ref)
        counts = p.counts_of(under)
        checks = sum(1 for cid in under if p.cells[cid].failed_check)
        if ref.kind == "group":
            g = p.groups[ref.key]
            status = status_of(
                counts,
                running=g.id in p.running_groups and g.server != "stopped",
                failed_checks=checks,
            )
            t.append(MARKS[status] + " ", style=pal.status(status))
            t.append(g.config or g.id, style=pal.bold)
            t.append(f" TP{g.tp}", style=pal.primary)
            if g.gpu_ids:
                t.append(f" [{','.join(str(i) for i in g.gpu_ids)}]", style=pal.muted)
            if g.server != "pending":
                t.append(f" {SERVER_MARKS[g.server]} {g.server}", style=pal.status(g.server))
        elif ref.kind == "workload":
            status = status_of(counts, failed_checks=checks)
            t.append(MARKS[status] + " ", style=pal.status(status))
            t.append(ref.key.rpartition("/")[2])
        else:  # host: running while one of its groups is (its server starting counts)
            running = bool(p.running_on(ref.key))
            status = status_of(counts, running=running, failed_checks=checks)
            t.append(MARKS[status] + " ", style=pal.status(status))
            t.append(ref.key, style=pal.bold)
            away = p.host_states.get(ref.key)
            if away is not None and away.state != "connected":
                t.append(
                    f" ⚠ {away.state}",
                    style=pal.error if away.state == "unreachable" else pal.warning,
                )
        t.append("  ")
        t.append_text(self._counts_text(counts, pal, full=not expanded))
        return t

    @staticmethod
    def _counts_text(c: Counts, pal: Palette, *, full: bool) -> Text:
        """Collapsed nodes say what they hide (done, failed, skipped of total); expanded ones
        only the fraction settled, since their children show the rest."""
        t = Text()
        if full:
            for status, n in (("done", c.done), ("failed", c.failed), ("skipped", c.skipped)):
                if n:
                    t.append(f"{MARKS[status]}{n} ", style=pal.status(status))
            t.append(f"/{c.total}", style=pal.muted)
        else:
            t.append(f"{c.settled}/{c.total}", style=pal.muted)
        return t

    def on_resize(self) -> None:
        """A followed node is placed for the height the tree had; when that changes (the
        layout settling, a terminal resized), place it again, unless the operator moved on."""
        node = self._moved_to
        if node is not None and self.cursor_node is node:
            self.call_after_refresh(self._move_to, node)

    # --- following --------------------------------------------------------------------------

    def reveal(self, ref: NodeRef, *, collapse_others: bool = False) -> TreeNode[NodeRef] | None:
        """Expand the way to ``ref`` and put the cursor on it; when following, the groups that
        are not current fold away so the running one stays on screen at 80x24."""
        node = self.nodes_by_ref.get(ref)
        if node is None:
            return None
        if collapse_others:
            keep = set()
            n: TreeNode[NodeRef] | None = node
            while n is not None:
                keep.add(n.id)
                n = n.parent
            for r, gnode in self.nodes_by_ref.items():
                if r.kind == "group" and gnode.id not in keep and gnode.is_expanded:
                    gnode.collapse()
        parent = node.parent
        while parent is not None:
            if not parent.is_expanded:
                parent.expand()
            parent = parent.parent
        self.call_after_refresh(self._move_to, node)
        return node

    def _move_to(self, node: TreeNode[NodeRef], tries: int = 5) -> None:
        """Deferred until the tree has laid out its lines (a node has no line before), then
        keep the followed node near the middle, so what comes next is visible too, but never
        so low that its service group's line (which says what runs) leaves the top."""
        self.move_cursor(node)
        self._moved_to = node
        line = node.line
        if line < 0:
            return
        height = max(self.scrollable_content_region.height, 1)
        top = line - height // 2
        group = node
        while group is not None and (group.data is None or group.data.kind != "group"):
            group = group.parent
        if group is not None and group.line >= 0 and line - group.line < height:
            top = min(top, group.line)
        top = max(0, min(top, self.last_line - height + 1))
        if top > self.max_scroll_y and tries > 0:
            # the tree's size has not caught up with its lines yet: once more, later
            self.call_after_refresh(self._move_to, node, tries - 1)
            return
        self.scroll_to(y=top, animate=False, immediate=True)

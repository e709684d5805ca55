"""Service and GPU health: per host whether its link is up (a host that is reconnecting or
unreachable says so, with why, first), then each running group's server (several at once
when groups are packed) with its GPUs and port, its progress, elapsed time and ETA, and the
server's latest log figures; per GPU a sparkline of recent utilization, a memory bar with
its numbers, power, temperature and the process holding it.

Idle GPUs fold into one line when the pane is short (80x24), so the ones that matter, those
of the running groups and any held by a foreign process, always stay visible; packed groups
then keep one line each.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from specbench_tui.results.eta import group_left
from specbench_tui.results.events import TelemetryChosen
from specbench_tui.results.progress import CampaignProgress, GpuState, GroupState, format_clock
from specbench_tui.tui.gpu_history import GpuHistory, sparkline
from specbench_tui.tui.look import SERVER_MARKS, Palette, bar, palette_for


def _telemetry_line(ev: TelemetryChosen, pal: Palette) -> Text:
    """How the host's GPUs are read; with none, that GPU freedom is not verified."""
    if ev.source == "none":
        return Text(
            " no GPU telemetry: GPUs not read, freedom not verified before starts",
            style=pal.warning,
            no_wrap=True,
            overflow="ellipsis",
        )
    return Text(
        f" GPUs via {ev.text or ev.source}", style=pal.muted, no_wrap=True, overflow="ellipsis"
    )


def group_eta_s(p: CampaignProgress, gid: str, now: float) -> float | None:
    """Seconds the group still needs: the plan's estimate of each cell still to run,
    corrected by what this run measured (results/eta.py); where no estimate was recorded, the
    mean measured duration of its kind (of all kinds before its kind has one), less what
    the running cell has had. None before anything can be said."""
    left = group_left(p, gid, now)
    if left is not None:
        return left.seconds
    g = p.groups.get(gid)
    means = p.mean_durations()
    if g is None or not means:
        return None
    overall = sum(means.values()) / len(means)
    total = 0.0
    for cid in g.cells:
        c = p.cells[cid]
        expected = means.get(c.kind, overall)
        if c.status == "pending" and c.selected:
            total += expected
        elif c.status == "running":
            ran = now - c.started_at if c.started_at is not None else 0.0
            total += max(expected - ran, 0.0)
    return total


def _away_line(host: str, why: str, pal: Palette) -> Text:
    """``sim ⚠ reconnecting: <reason>``: the host's work waits (or, unreachable, fails)."""
    style = pal.error if why.startswith("unreachable") else pal.warning
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(f"{host} ", style=pal.bold)
    t.append(f"⚠ {why}", style=style)
    return t


def _server_line(
    lead: str, g: GroupState, p: CampaignProgress, pal: Palette, now: float, width: int
) -> Text:
    """``sim ● ready dflash TP4  3/8  0:32 ETA 0:06  [4,5,6,7] :31000``. Where it listens
    comes last, and only where it fits whole (the tree and the GPU lines say it too); a
    line too long for the pane leaves out the server's elapsed time before the ETA is cut."""
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(lead, style=pal.bold)
    t.append(f"{SERVER_MARKS[g.server]} {g.server}", style=pal.status(g.server))
    t.append(f" {g.config} TP{g.tp}", style=pal.primary)
    counts = p.group_counts(g.id)
    t.append(f"  {counts.settled}/{counts.total}", style=pal.muted)
    if g.started_at is not None:
        elapsed = f"  {format_clock(now - g.started_at)}"
        eta = group_eta_s(p, g.id, now)
        left = format_clock(eta) if eta is not None else "—"
        if len(t.plain) + len(elapsed) + 5 + len(left) <= width:
            t.append(elapsed)
            t.append(" ETA ", style=pal.muted)
        else:
            t.append("  ETA ", style=pal.muted)
        t.append(left)
    where = f"[{','.join(str(i) for i in g.gpu_ids)}]" if g.gpu_ids else ""
    job = p.jobs.get(g.id)  # a batch host's group: on the node its batch job got
    node = job.node if job is not None else ""
    if g.port or node:
        where += f" {node}:{g.port}" if g.port else f" {node}"
    where = where.strip()
    if where and len(t.plain) + 2 + len(where) <= width:
        t.append(f"  {where}", style=pal.muted)
    return t


def _state_line(g: GroupState, pal: Palette, now: float) -> Text:
    """How the server is doing: healthy for how long with its latest log figures, waiting
    for health, or why it is unhealthy."""
    s = Text(no_wrap=True, overflow="ellipsis")
    up = g.uptime_s(now)
    if up is not None:
        s.append("  healthy", style=pal.success)
        s.append(f" up {format_clock(up)}")
    elif g.gpu_wait is not None:  # before the start: what holds its GPUs, never silent
        w = g.gpu_wait
        waited = w.waited_s + max(0.0, now - w.ts)
        s.append(f"  waiting {format_clock(waited)} for GPUs: ", style=pal.warning)
        s.append("; ".join(w.held), style=pal.warning)
    elif g.server == "starting" and g.started_at is not None:
        s.append(f"  waiting for health for {format_clock(now - g.started_at)}", style=pal.accent)
    elif g.server == "failed":
        s.append("  unhealthy", style=pal.error)
        if g.reason:
            s.append(f": {g.reason}", style=pal.error)
    stats = g.last_stats
    if stats and g.server == "ready":
        for key, label, fmt in (
            ("gen_throughput", "gen", "{:.0f} tok/s"),
            ("accept_len", "accept", "{:.2f}"),
            ("running_req", "run", "{:.0f}"),
            ("queue_req", "queue", "{:.0f}"),
        ):
            if key in stats:
                s.append(f"  {label} ", style=pal.muted)
                s.append(fmt.format(stats[key]), style=pal.bold)
    return s


def _queued_line(host: str, p: CampaignProgress, pal: Palette) -> Text | None:
    """``  · 3 jobs queued (Resources)``: a batch host's groups whose jobs wait, as the batch
    system last said, and why."""
    waiting = [
        j
        for j in p.jobs.values()
        if j.host == host and j.state == "PENDING" and j.group not in p.running_groups
    ]
    if not waiting:
        return None
    reasons = sorted({j.reason for j in waiting if j.reason})
    n = len(waiting)
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(" " * (len(host) + 1) + f"· {n} job{'s' * (n != 1)} queued", style=pal.muted)
    if reasons:
        t.append(f" ({', '.join(reasons)})", style=pal.muted)
    return t


def _server_lines(
    host: str, groups: list[GroupState], p: CampaignProgress, pal: Palette, now: float, width: int
) -> tuple[list[Text], dict[int, tuple[Text, bool]]]:
    """Each running group's line and its state line (what a short pane drops first when
    several groups share the host), or ``no server``. The host is named once; the lines of
    other groups beside it are indented under the first."""
    if not groups:
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f"{host} ", style=pal.bold)
        t.append("○ no server", style=pal.muted)
        return [t], {}
    lines: list[Text] = []
    states: dict[int, tuple[Text, bool]] = {}
    for i, g in enumerate(groups):
        lead = f"{host} " if i == 0 else " " * (len(host) + 1)
        line = _server_line(lead, g, p, pal, now, width)
        lines.append(line)
        state = _state_line(g, pal, now)
        if state.plain:
            # why it failed, or what holds its GPUs, stays when a short pane drops the rest
            states[id(line)] = (state, g.server == "failed" or g.gpu_wait is not None)
    return lines, states


def _gpu_line(
    gpu: GpuState, in_use: bool, width: int, pal: Palette, history: GpuHistory | None
) -> Text:
    """``●GPU0 ▁▂▅▇██ 88% ███░ 83.5/96G 363W 49°C  pid …``: the sparkline is recent
    utilization (oldest left), so a GPU that went idle mid-cell shows it at a glance."""
    spark_w = max(4, min(24, (width - 40) // 2))
    bar_w = max(3, min(12, (width - 40) - spark_w))
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(f"{'●' if in_use else ' '}GPU{gpu.gpu:<2}", style=pal.accent if in_use else pal.muted)
    util = gpu.util_pct / 100.0
    recent = history.util.get((gpu.host, gpu.gpu)) if history is not None else None
    style = pal.error if util > 0.95 else pal.primary
    if recent:
        t.append(sparkline(recent, spark_w), style=style)
    else:
        t.append_text(bar(util, spark_w, style, pal.muted))
    t.append(f"{gpu.util_pct:4.0f}% ")
    mem = gpu.mem_used_mib / gpu.mem_total_mib if gpu.mem_total_mib else 0.0
    t.append_text(bar(mem, bar_w, pal.warning if mem > 0.9 else pal.success, pal.muted))
    t.append(f"{gpu.mem_used_mib / 1024:5.1f}/{gpu.mem_total_mib / 1024:.0f}G ")
    t.append(f"{gpu.power_w:4.0f}W ")
    t.append(f"{gpu.temp_c:3.0f}°C", style=pal.error if gpu.temp_c >= 85 else "")
    if gpu.processes:
        t.append("  " + ",".join(gpu.processes), style=pal.muted)
    return t


def _gpus_summary(busy: list[GpuState], idle: list[GpuState], pal: Palette) -> Text:
    """A host's GPUs in one line, for a pane too short for a line each: ``●GPU 0,1,2,3:
    83% busy, 81.2/96G · 4,5,6,7 idle`` (mean utilization, the fullest memory)."""
    t = Text(no_wrap=True, overflow="ellipsis")
    if busy:
        util = sum(g.util_pct for g in busy) / len(busy)
        top = max(busy, key=lambda g: g.mem_used_mib)
        ids = ",".join(str(g.gpu) for g in busy)
        t.append(f"●GPU {ids}: ", style=pal.accent)
        t.append(f"{util:.0f}% busy, {top.mem_used_mib / 1024:.1f}/{top.mem_total_mib / 1024:.0f}G")
    if idle:
        t.append(" · " if busy else " GPU ", style=pal.muted)
        t.append(",".join(str(g.gpu) for g in idle) + " idle", style=pal.muted)
    return t


@dataclass
class _HostBlock:
    """What the pane says of one host, before it knows how much room there is."""

    host: str
    running: list[GroupState]
    head: list[Text]  # the away line, then a line per running group (or "no server")
    # a group line's state line and whether its server failed, by id() of the group line
    states: dict[int, tuple[Text, bool]]
    gpus: list[GpuState]
    in_use: set[int]
    states_shown: bool = True
    gpus_summed: bool = False
    gpus_hidden: bool = False

    @classmethod
    def of(cls, host: str, p: CampaignProgress, pal: Palette, now: float, width: int) -> _HostBlock:
        running = p.running_on(host)
        head, states = _server_lines(host, running, p, pal, now, width)
        why = p.host_away(host)
        if why:
            head.insert(0, _away_line(host, why, pal))
        queued = _queued_line(host, p, pal)
        if queued is not None:
            head.append(queued)
        gpus = sorted((g for (h, _), g in p.gpus.items() if h == host), key=lambda g: g.gpu)
        in_use = {i for g in running for i in g.gpu_ids}
        return cls(host, running, head, states, gpus, in_use)

    @property
    def full_height(self) -> int:
        return len(self.head) + len(self.states) + len(self.gpus)


class HealthPane(VerticalScroll):
    ALLOW_MAXIMIZE = True

    _shown: Text | None = None  # what is on screen: unchanged text is not repainted

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)

    def compose(self):  # type: ignore[no-untyped-def]
        yield Static("waiting for telemetry…", id="health-text")

    def show(self, p: CampaignProgress, now: float, history: GpuHistory | None = None) -> None:
        pal = palette_for(self.app)
        width = max(self.size.width - 2, 40)
        # Two measures of room: ``room``, the lines shown now, decides the idle-GPU fold and
        # the telemetry footnote (so a quiet pane stays short and leaves room below it);
        # ``most``, the lines it can grow to, decides what several groups or hosts give up
        # so that every server line stays in view.
        room = max(self.size.height - 2, 3) if not self.is_maximized else 10_000
        most = self._capacity()
        hosts = p.hosts or sorted({h for h, _ in p.gpus} | set(p.telemetry))
        shown_width = self.scrollable_content_region.width or width
        blocks = [_HostBlock.of(host, p, pal, now, shown_width) for host in hosts]
        # short of room: packed groups keep their own line, not their state line
        short = sum(b.full_height for b in blocks) > most
        for b in blocks:
            b.states_shown = not short or len(b.running) <= 1
        lines = self._lines(blocks, p, pal, width, room, history)
        # several hosts: every host's servers stay in view, its GPUs summed up in one line
        # if need be, left to the zoomed pane (z) if even that is too much
        for step in ("gpus_summed", "gpus_hidden"):
            for b in blocks:
                if all(at < most for at in self._head_rows(blocks, lines)):
                    break
                setattr(b, step, True)
                lines = self._lines(blocks, p, pal, width, room, history)
        if not lines:
            lines.append(Text("waiting for telemetry…", style=pal.muted))
        t = Text("\n", no_wrap=True).join(lines)
        if t != self._shown:  # telemetry at a steady state changes nothing on screen
            self._shown = t
            self.query_one("#health-text", Static).update(t)

    def _capacity(self) -> int:
        """The most lines the pane can show: its maximum height, where the layout caps it
        (its height follows its content, so its current size says only what it shows)."""
        if self.is_maximized:
            return 10_000
        most = self.styles.max_height
        if most is not None and most.is_cells:
            return max(int(most.value) - 2, 3)
        return max(self.size.height - 2, 3)

    @staticmethod
    def _head_rows(blocks: list[_HostBlock], lines: list[Text]) -> list[int]:
        """Rows of each host's last server line."""
        ids = {id(b.head[-1]) for b in blocks if b.head}
        return [i for i, line in enumerate(lines) if id(line) in ids]

    @staticmethod
    def _lines(
        blocks: list[_HostBlock],
        p: CampaignProgress,
        pal: Palette,
        width: int,
        room: int,
        history: GpuHistory | None,
    ) -> list[Text]:
        lines: list[Text] = []
        for b in blocks:
            for line in b.head:
                lines.append(line)
                state, failed = b.states.get(id(line), (None, False))
                if state is not None and (b.states_shown or failed):  # why it failed stays
                    lines.append(state)
            busy = [g for g in b.gpus if g.gpu in b.in_use or g.processes or g.util_pct > 1]
            idle = [g for g in b.gpus if g not in busy]
            chosen = p.telemetry.get(b.host)
            # how the GPUs are read is a footnote, unless they are not read at all: it gives
            # way to the GPU lines when they do not fit (several groups packed)
            fits = len(lines) + 1 + len(busy) + min(len(idle), 1) <= room
            if chosen is not None and (chosen.source == "none" or (room > 4 and fits)):
                lines.append(_telemetry_line(chosen, pal))
            if b.gpus_hidden:
                continue
            if b.gpus_summed and b.gpus:
                lines.append(_gpus_summary(busy, idle, pal))
                continue
            fold = len(lines) + len(b.gpus) > room and len(idle) > 1
            for g in b.gpus:
                if fold and g in idle:
                    continue
                lines.append(_gpu_line(g, g.gpu in b.in_use, width, pal, history))
            if fold:
                free = " ".join(str(g.gpu) for g in idle)
                lines.append(Text(f" GPU {free}: idle, free", style=pal.muted))
        return lines

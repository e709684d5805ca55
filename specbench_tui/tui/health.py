"""Service and GPU health: per host the server's state, the running group's progress with
its elapsed time and ETA, the server's latest log figures; per GPU a sparkline of recent
utilization, a memory bar with its numbers, power, temperature and the process holding it.

Idle GPUs fold into one line when the pane is short (80x24), so the ones that matter, those
of the running group and any held by a foreign process, always stay visible.
"""

from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

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
    """Seconds the group still needs: for each of its cells still to run, the mean measured
    duration of its kind (of all kinds before its kind has one), less what the running cell
    has had. None before any cell was measured (as for the campaign's ETA)."""
    g = p.groups.get(gid)
    means = p.mean_durations()
    if g is None or not means:
        return None
    overall = sum(means.values()) / len(means)
    left = 0.0
    for cid in g.cells:
        c = p.cells[cid]
        expected = means.get(c.kind, overall)
        if c.status == "pending" and c.selected:
            left += expected
        elif c.status == "running":
            ran = now - c.started_at if c.started_at is not None else 0.0
            left += max(expected - ran, 0.0)
    return left


def _server_lines(
    host: str, g: GroupState | None, p: CampaignProgress, pal: Palette, now: float
) -> list[Text]:
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(f"{host} ", style=pal.bold)
    if g is None:
        t.append("○ no server", style=pal.muted)
        return [t]
    t.append(f"{SERVER_MARKS[g.server]} {g.server}", style=pal.status(g.server))
    t.append(f" {g.config} TP{g.tp}", style=pal.primary)
    counts = p.group_counts(g.id)
    t.append(f"  {counts.settled}/{counts.total}", style=pal.muted)
    if g.started_at is not None:
        t.append(f"  {format_clock(now - g.started_at)}")
        eta = group_eta_s(p, g.id, now)
        t.append(" ETA ", style=pal.muted)
        t.append(format_clock(eta) if eta is not None else "—")
    lines = [t]
    s = Text(no_wrap=True, overflow="ellipsis")
    up = g.uptime_s(now)
    if up is not None:
        s.append("  healthy", style=pal.success)
        s.append(f" up {format_clock(up)}")
    elif g.server == "starting" and g.started_at is not None:
        s.append(f"  waiting for health for {format_clock(now - g.started_at)}", style=pal.accent)
    elif g.server == "failed":
        s.append("  unhealthy", style=pal.error)
        if g.reason:
            s.append(f": {g.reason}", style=pal.error)
    stats = g.last_stats
    if stats and g.server == "ready":
        figures = [
            (key, label, fmt)
            for key, label, fmt in (
                ("gen_throughput", "gen", "{:.0f} tok/s"),
                ("accept_len", "accept", "{:.2f}"),
                ("running_req", "run", "{:.0f}"),
                ("queue_req", "queue", "{:.0f}"),
            )
            if key in stats
        ]
        for key, label, fmt in figures:
            s.append(f"  {label} ", style=pal.muted)
            s.append(fmt.format(stats[key]), style=pal.bold)
    if s.plain:
        lines.append(s)
    return lines


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
        room = max(self.size.height - 2, 3) if not self.is_maximized else 10_000
        t = Text(no_wrap=True, overflow="ellipsis")
        hosts = p.hosts or sorted({h for h, _ in p.gpus} | set(p.telemetry))
        lines: list[Text] = []
        for host in hosts:
            current = p.groups.get(p.current_group) if p.current_group else None
            if current is not None and current.host != host:
                current = None
            lines.extend(_server_lines(host, current, p, pal, now))
            chosen = p.telemetry.get(host)
            if chosen is not None and (chosen.source == "none" or room > 4):
                lines.append(_telemetry_line(chosen, pal))
            gpus = sorted((g for (h, _), g in p.gpus.items() if h == host), key=lambda g: g.gpu)
            in_use = set(current.gpu_ids) if current else set()
            busy = [g for g in gpus if g.gpu in in_use or g.processes or g.util_pct > 1]
            idle = [g for g in gpus if g not in busy]
            fold = len(lines) + len(gpus) > room and len(idle) > 1
            for g in gpus:
                if fold and g in idle:
                    continue
                lines.append(_gpu_line(g, g.gpu in in_use, width, pal, history))
            if fold:
                free = " ".join(str(g.gpu) for g in idle)
                lines.append(Text(f" GPU {free}: idle, free", style=pal.muted))
        if not lines:
            lines.append(Text("waiting for telemetry…", style=pal.muted))
        t = Text("\n", no_wrap=True).join(lines)
        if t != self._shown:  # telemetry at a steady state changes nothing on screen
            self._shown = t
            self.query_one("#health-text", Static).update(t)

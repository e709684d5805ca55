"""Service and GPU health: per host the server's state, uptime and health; per GPU bars for
utilization and memory with their numbers, power, temperature and the process holding it.

Idle GPUs fold into one line when the pane is short (80x24), so the ones that matter, those
of the running group and any held by a foreign process, always stay visible.
"""

from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from specbench_tui.results.events import TelemetryChosen
from specbench_tui.results.progress import CampaignProgress, GpuState, GroupState, format_clock
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


def _server_line(
    host: str, g: GroupState | None, p: CampaignProgress, pal: Palette, now: float
) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(f"{host} ", style=pal.bold)
    if g is None:
        t.append("○ no server", style=pal.muted)
        return t
    t.append(f"{SERVER_MARKS[g.server]} {g.server}", style=pal.status(g.server))
    up = g.uptime_s(now)
    if up is not None:
        t.append(f"  up {format_clock(up)}  ")
        t.append("healthy", style=pal.success)
    elif g.server == "starting" and g.started_at is not None:
        t.append(f" for {format_clock(now - g.started_at)}, waiting for health", style=pal.accent)
    elif g.server == "failed":
        t.append("  unhealthy", style=pal.error)
    stats = g.last_stats
    if stats and g.server == "ready":
        parts = []
        if "gen_throughput" in stats:
            parts.append(f"gen {stats['gen_throughput']:.0f} tok/s")
        if "accept_len" in stats:
            parts.append(f"accept {stats['accept_len']:.2f}")
        if "running_req" in stats:
            parts.append(f"run {stats['running_req']:.0f}")
        if "queue_req" in stats:
            parts.append(f"queue {stats['queue_req']:.0f}")
        if parts:
            t.append("  " + " · ".join(parts))
    t.append(f"  {g.config} TP{g.tp}", style=pal.primary)
    if g.reason and g.server == "failed":
        t.append(f"  {g.reason}", style=pal.error)
    return t


def _gpu_line(gpu: GpuState, in_use: bool, width: int, pal: Palette) -> Text:
    bar_w = max(3, min(16, (width - 52) // 2))
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append(f"{'●' if in_use else ' '}GPU{gpu.gpu:<2}", style=pal.accent if in_use else pal.muted)
    util = gpu.util_pct / 100.0
    t.append_text(bar(util, bar_w, pal.error if util > 0.95 else pal.primary, pal.muted))
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
        self.telemetry: dict[str, TelemetryChosen] = {}  # per host, from telemetry_chosen

    def compose(self):  # type: ignore[no-untyped-def]
        yield Static("waiting for telemetry…", id="health-text")

    def show(self, p: CampaignProgress, now: float) -> None:
        pal = palette_for(self.app)
        width = max(self.size.width - 2, 40)
        room = max(self.size.height - 2, 3) if not self.is_maximized else 10_000
        t = Text(no_wrap=True, overflow="ellipsis")
        hosts = p.hosts or sorted({h for h, _ in p.gpus} | set(self.telemetry))
        lines: list[Text] = []
        for host in hosts:
            current = p.groups.get(p.current_group) if p.current_group else None
            if current is not None and current.host != host:
                current = None
            lines.append(_server_line(host, current, p, pal, now))
            chosen = self.telemetry.get(host)
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
                lines.append(_gpu_line(g, g.gpu in in_use, width, pal))
            if fold:
                free = " ".join(str(g.gpu) for g in idle)
                lines.append(Text(f" GPU {free}: idle, free", style=pal.muted))
        if not lines:
            lines.append(Text("waiting for telemetry…", style=pal.muted))
        t = Text("\n", no_wrap=True).join(lines)
        if t != self._shown:  # telemetry at a steady state changes nothing on screen
            self._shown = t
            self.query_one("#health-text", Static).update(t)

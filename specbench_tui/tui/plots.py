"""Live plots: end-to-end tok/s per request (the request event's ``output_tok_s``, n / e2e),
the server's gen throughput, accept length, TTFT; named as ``bench/figures.py`` names them.

Every series belongs to one service group: in a packed or several-host campaign each running
group draws its own labelled series (its config and TP, its host where there are several),
never one series mixing every group's requests.

Collection and drawing are separate, as in Dolphie: every batch of events lands in bounded
deques (``LiveSeries``), and the plots are redrawn on a timer only when something changed.
Under a flood a batch adds its mean rather than every point, so the history stays readable
and the cost of a redraw stays flat whatever the event rate.
"""

from __future__ import annotations

from collections import deque
from typing import ClassVar

from textual.containers import Grid
from textual_plotext import PlotextPlot

from specbench_tui.bench.figures import FIGURE_NAMES
from specbench_tui.results.events import Event, LogLine, RequestDone
from specbench_tui.tui.look import series_colours

#: Points kept per series: about ten minutes at one point a second.
HISTORY = 600
#: A batch with more values than this for one series adds their mean, not each value.
POINTS_PER_BATCH = 8


class LiveSeries:
    """Bounded (x, y) history of named series; no textual import, tested on its own."""

    def __init__(self, maxlen: int = HISTORY) -> None:
        self.maxlen = maxlen
        self.series: dict[str, deque[tuple[float, float]]] = {}
        self.group_of: dict[str, tuple[str, str]] = {}  # series name -> (group, kind)
        self.version = 0  # bumped on every change: the redraw timer compares it

    def add_batch(
        self, name: str, points: list[tuple[float, float]], group: str = "", kind: str = ""
    ) -> None:
        """``name`` is the series' key; ``group`` and ``kind`` (per request, server, ...)
        what the plot labels it by."""
        if not points:
            return
        if len(points) > POINTS_PER_BATCH:
            xs = [x for x, _ in points]
            ys = [y for _, y in points]
            points = [(sum(xs) / len(xs), sum(ys) / len(ys))]
        d = self.series.get(name)
        if d is None:
            d = self.series[name] = deque(maxlen=self.maxlen)
            self.group_of[name] = (group, kind or name)
        d.extend(points)
        self.version += 1

    def clear(self) -> None:
        self.series.clear()
        self.group_of.clear()
        self.version += 1


class LiveData:
    """The four plots' data, fed from event batches; x is seconds since the campaign start."""

    PLOTS: ClassVar[tuple[str, ...]] = ("tok_s", "gen", "accept", "ttft")

    def __init__(self, maxlen: int = HISTORY) -> None:
        self.plots: dict[str, LiveSeries] = {k: LiveSeries(maxlen) for k in self.PLOTS}
        self.t0: float | None = None

    def ingest(self, events: list[Event], t0: float | None) -> None:
        if t0 is not None:
            self.t0 = t0
        base = self.t0 if self.t0 is not None else (events[0].ts if events else 0.0)
        batches: dict[tuple[str, str, str], list[tuple[float, float]]] = {}

        def add(plot: str, group: str, kind: str, x: float, y: float | None) -> None:
            if y is not None:
                batches.setdefault((plot, group, kind), []).append((x - base, float(y)))

        for ev in events:
            if isinstance(ev, RequestDone):
                if ev.error:
                    continue
                g = ev.group
                add("tok_s", g, "per request", ev.ts, ev.output_tok_s)
                ttft = ev.ttft_s * 1000 if ev.ttft_s is not None else None
                add("ttft", g, "TTFT ms", ev.ts, ttft)
                add("accept", g, "per request", ev.ts, ev.accept_length)
            elif isinstance(ev, LogLine) and ev.stats:
                g = ev.group
                add("gen", g, "gen tok/s", ev.ts, ev.stats.get("gen_throughput"))
                add("accept", g, "server", ev.ts, ev.stats.get("accept_len"))
                for key, value in ev.stats.items():  # the plan's [logs] acceptance series
                    if key != "accept_len" and key.endswith(("accept_len", "accept_length")):
                        add("accept", g, key, ev.ts, value)
        for (plot, group, kind), points in batches.items():
            self.plots[plot].add_batch(f"{group}\t{kind}", points, group, kind)

    def clear(self) -> None:
        for s in self.plots.values():
            s.clear()


TITLES = {
    "tok_s": f"{FIGURE_NAMES['e2e_tok_s']} per request",
    "tok_s_short": FIGURE_NAMES["e2e_tok_s"],
    "tok_s_tiny": "e2e tok/s",
    "gen": "server gen tok/s",
    "accept": FIGURE_NAMES["accept_length"],
    "ttft": f"{FIGURE_NAMES['ttft_s']} ms",
}
#: Series kinds that are the only one of their plot for a group: labelled by the group alone.
_SINGLE_KINDS = frozenset({"per request", "TTFT ms", "gen tok/s"})
#: The groups whose series a plot draws, each with its label (``dflash TP1``).
GroupLabels = dict[str, str]

#: Plots a compact screen leaves out (the pane zoomed shows them).
MINOR = frozenset({"gen", "ttft"})
XLABEL = "s since start"


class LivePlot(PlotextPlot):
    """One plot; ``draw`` rebuilds its figure from the series (called by the redraw timer)."""

    def __init__(self, key: str, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="-minor" if key in MINOR else "")
        self.key = key
        self.drawn_version = -1
        self._series: LiveSeries | None = None
        self._idle = "waiting"
        self._groups: GroupLabels | None = None
        self.drawn_groups: GroupLabels | None = None

    def on_resize(self) -> None:
        if self._series is not None:  # the title's length depends on the width
            self.draw(self._series, self._idle)

    def draw(
        self, series: LiveSeries, idle: str = "waiting", groups: GroupLabels | None = None
    ) -> None:
        """``idle`` says why a plot without data is empty (an autoregressive server has no
        acceptance to wait for); ``groups``: the groups whose series are drawn and their
        labels (None: every series)."""
        self._series = series
        self._idle = idle
        if groups is not None:
            self._groups = groups
        groups = self._groups
        self.drawn_version = series.version
        self.drawn_groups = groups
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        title = TITLES[self.key]
        for shorter in ("_short", "_tiny"):  # plotext drops a title that does not fit
            if len(title) > self.size.width - 8:
                title = TITLES.get(self.key + shorter, title)
        plt.title(title)
        has = False
        shown = [
            (name, pts)
            for name, pts in series.series.items()
            if pts and (groups is None or series.group_of.get(name, ("", ""))[0] in groups)
        ]
        several = len({series.group_of.get(n, ("", ""))[0] for n, _ in shown}) > 1
        colours = series_colours(self.app)
        order = list(groups) if groups is not None else []
        for i, (name, pts) in enumerate(shown):
            has = True
            group, kind = series.group_of.get(name, ("", name))
            label = kind
            if several:
                who = groups.get(group, group) if groups is not None else group
                label = who if kind in _SINGLE_KINDS else f"{who} {kind}"
            xs = [x for x, _ in pts]
            ys = [y for _, y in pts]
            # a group keeps its colour in every plot (its place among the running groups)
            at = order.index(group) if several and group in order else i
            plt.plot(
                xs,
                ys,
                marker="braille",
                label=label if len(shown) > 1 else None,
                color=colours[at % len(colours)],
            )
        if has:
            plt.xlabel(XLABEL)
        else:
            # no data: a title and no frame; an empty canvas draws made-up axes
            plt.title(f"{title} ({idle})")
            plt.frame(False)
            plt.xticks([])
            plt.yticks([])
        self.refresh()


class PlotsPane(Grid):
    """Four plots in a 2x2 grid (one row of four when the screen is wide)."""

    ALLOW_MAXIMIZE = True
    can_focus = True

    def compose(self):  # type: ignore[no-untyped-def]
        for key in LiveData.PLOTS:
            yield LivePlot(key, id=f"plot-{key}")

    def redraw(
        self,
        data: LiveData,
        *,
        force: bool = False,
        speculative: bool = True,
        groups: GroupLabels | None = None,
    ) -> int:
        """Redraw the plots whose series changed; returns how many were redrawn.
        ``speculative`` is false while only autoregressive servers run; ``groups``: whose
        series to draw, labelled (None: every series)."""
        n = 0
        if not self.display:
            return 0
        for plot in self.query(LivePlot):
            series = data.plots[plot.key]
            idle = "waiting" if speculative or plot.key != "accept" else "none: autoregressive"
            if (
                force
                or plot.drawn_version != series.version
                or idle != plot._idle
                or groups != plot.drawn_groups
            ):
                plot.draw(series, idle, groups)
                n += 1
        return n

"""Live plots: end-to-end tok/s per request (the request event's ``output_tok_s``, n / e2e),
the server's gen throughput, accept length, TTFT; named as ``bench/figures.py`` names them.

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

#: Points kept per series: about ten minutes at one point a second.
HISTORY = 600
#: A batch with more values than this for one series adds their mean, not each value.
POINTS_PER_BATCH = 8


class LiveSeries:
    """Bounded (x, y) history of named series; no textual import, tested on its own."""

    def __init__(self, maxlen: int = HISTORY) -> None:
        self.maxlen = maxlen
        self.series: dict[str, deque[tuple[float, float]]] = {}
        self.version = 0  # bumped on every change: the redraw timer compares it

    def add_batch(self, name: str, points: list[tuple[float, float]]) -> None:
        if not points:
            return
        if len(points) > POINTS_PER_BATCH:
            xs = [x for x, _ in points]
            ys = [y for _, y in points]
            points = [(sum(xs) / len(xs), sum(ys) / len(ys))]
        d = self.series.get(name)
        if d is None:
            d = self.series[name] = deque(maxlen=self.maxlen)
        d.extend(points)
        self.version += 1

    def clear(self) -> None:
        self.series.clear()
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
        batches: dict[tuple[str, str], list[tuple[float, float]]] = {}

        def add(plot: str, name: str, x: float, y: float | None) -> None:
            if y is not None:
                batches.setdefault((plot, name), []).append((x - base, float(y)))

        for ev in events:
            if isinstance(ev, RequestDone):
                if ev.error:
                    continue
                add("tok_s", "per request", ev.ts, ev.output_tok_s)
                add("ttft", "TTFT ms", ev.ts, ev.ttft_s * 1000 if ev.ttft_s is not None else None)
                add("accept", "per request", ev.ts, ev.accept_length)
            elif isinstance(ev, LogLine) and ev.stats:
                add("gen", "gen tok/s", ev.ts, ev.stats.get("gen_throughput"))
                add("accept", "server", ev.ts, ev.stats.get("accept_len"))
                for key, value in ev.stats.items():  # the plan's [logs] acceptance series
                    if key != "accept_len" and key.endswith(("accept_len", "accept_length")):
                        add("accept", key, ev.ts, value)
        for (plot, name), points in batches.items():
            self.plots[plot].add_batch(name, points)

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

    def on_resize(self) -> None:
        if self._series is not None:  # the title's length depends on the width
            self.draw(self._series, self._idle)

    def draw(self, series: LiveSeries, idle: str = "waiting") -> None:
        """``idle`` says why a plot without data is empty (an autoregressive server has no
        acceptance to wait for)."""
        self._series = series
        self._idle = idle
        self.drawn_version = series.version
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        title = TITLES[self.key]
        for shorter in ("_short", "_tiny"):  # plotext drops a title that does not fit
            if len(title) > self.size.width - 8:
                title = TITLES.get(self.key + shorter, title)
        plt.title(title)
        has = False
        for name, pts in series.series.items():
            if not pts:
                continue
            has = True
            xs = [x for x, _ in pts]
            ys = [y for _, y in pts]
            plt.plot(xs, ys, marker="braille", label=name if len(series.series) > 1 else None)
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

    def redraw(self, data: LiveData, *, force: bool = False, speculative: bool = True) -> int:
        """Redraw the plots whose series changed; returns how many were redrawn.
        ``speculative`` is false while only autoregressive servers run."""
        n = 0
        if not self.display:
            return 0
        for plot in self.query(LivePlot):
            series = data.plots[plot.key]
            idle = "waiting" if speculative or plot.key != "accept" else "none: autoregressive"
            if force or plot.drawn_version != series.version or idle != plot._idle:
                plot.draw(series, idle)
                n += 1
        return n

"""Recent GPU samples per GPU, for the health pane's sparklines (bounded, like the plots'
series: collection apart from drawing, no textual import)."""

from __future__ import annotations

from collections import deque

from specbench_tui.results.events import Event, GpuSample

#: Samples kept per GPU: a couple of minutes at the default one-second interval.
GPU_HISTORY = 120

_SPARKS = "▁▂▃▄▅▆▇█"


class GpuHistory:
    def __init__(self, maxlen: int = GPU_HISTORY) -> None:
        self.maxlen = maxlen
        self.util: dict[tuple[str, int], deque[float]] = {}
        self.mem: dict[tuple[str, int], deque[float]] = {}

    def ingest(self, events: list[Event]) -> None:
        for ev in events:
            if isinstance(ev, GpuSample):
                key = (ev.host, ev.gpu)
                if key not in self.util:
                    self.util[key] = deque(maxlen=self.maxlen)
                    self.mem[key] = deque(maxlen=self.maxlen)
                self.util[key].append(ev.util_pct or 0.0)  # None: not reported
                used, total = ev.mem_used_mib or 0.0, ev.mem_total_mib
                frac = used / total if total else 0.0
                self.mem[key].append(100.0 * frac)

    def clear(self) -> None:
        self.util.clear()
        self.mem.clear()


def sparkline(values: deque[float] | list[float], width: int, top: float = 100.0) -> str:
    """The last ``width`` values as block heights over 0..``top``; padded on the left with
    spaces until there is enough history."""
    vals = list(values)[-width:] if width > 0 else []
    out = []
    for v in vals:
        f = min(max(v / top, 0.0), 1.0) if top > 0 else 0.0
        out.append(_SPARKS[min(int(f * len(_SPARKS)), len(_SPARKS) - 1)])
    return " " * (width - len(out)) + "".join(out)

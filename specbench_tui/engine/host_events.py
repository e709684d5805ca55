"""The engine's side of ``hosts.host.HostEvents``: a host's notices and events go out
through the hub like every other, to the log, the consoles and the headless printer."""

from __future__ import annotations

from specbench_tui.engine.hub import EventHub
from specbench_tui.results.events import Event


class HubEvents:
    def __init__(self, hub: EventHub) -> None:
        self.hub = hub

    def notice(self, text: str, level: str = "info") -> None:
        self.hub.notice(text, level)

    def event(self, ev: Event) -> None:
        self.hub.emit(ev)

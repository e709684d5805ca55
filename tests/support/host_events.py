"""A ``HostEvents`` for tests: keeps what a host said, notices as (level, text) and events in
the order they came, in lists the test may pass in."""

from __future__ import annotations

from typing import Any


class Recorded:
    def __init__(
        self, notices: list[tuple[str, str]] | None = None, events: list[Any] | None = None
    ) -> None:
        self.notices = notices if notices is not None else []
        self.events = events if events is not None else []

    def notice(self, text: str, level: str = "info") -> None:
        self.notices.append((level, text))

    def event(self, ev: Any) -> None:
        self.events.append(ev)

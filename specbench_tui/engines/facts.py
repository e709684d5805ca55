"""What a ready server says about itself: the post-ready check fills it (engines/inspect.py,
each engine's ``EngineAdapter.inspect``); the group runner, the cell runner and the checks read
it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from specbench_tui.engines.streams import StreamMode


@dataclass
class ServerFacts:
    """What a ready server reports about itself (None: it did not say)."""

    engine: str
    version: str | None = None
    served_model: str | None = None  # the name requests carry
    models: list[str] = field(default_factory=list)  # what /v1/models lists
    speculative: bool | None = None
    algorithm: str | None = None
    tp: int | None = None
    stream_mode: StreamMode = "auto"
    metrics: bool = False  # /metrics has the counters acceptance needs
    problems: list[str] = field(default_factory=list)  # what ran is not what was asked
    notes: list[str] = field(default_factory=list)  # what the operator should know
    # Its effective settings by name, and where they were read (engines/settings.py).
    settings: dict[str, Any] | None = None
    settings_source: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

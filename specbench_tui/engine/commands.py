"""Commands an operator sends to a running campaign, from the console, a detached console or
a test. One interface for all of them: ``CampaignControl``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol

from specbench_tui.results.events import Event

Action = Literal["pause", "resume", "skip", "rerun", "rerun_failed", "abort", "retry_group"]
ACTIONS: tuple[str, ...] = (
    "pause",
    "resume",
    "skip",
    "rerun",
    "rerun_failed",
    "abort",
    "retry_group",
)


@dataclass(frozen=True)
class Command:
    """``target``: a cell id, a cell name glob or a group id; None means "the current one"."""

    action: Action
    target: str | None = None
    by: str = "operator"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(obj: dict[str, Any]) -> Command:
        """Raises ValueError saying what is wrong: a command may come from any process of the
        socket's owner, and a bad one must get an answer, not a traceback."""
        action = obj.get("action")
        if not isinstance(action, str) or action not in ACTIONS:
            raise ValueError(f"unknown command {action!r}; known: {', '.join(ACTIONS)}")
        target = obj.get("target")
        if target is not None and (not isinstance(target, str) or len(target) > 1024):
            raise ValueError("target must be a cell id, a name glob or a group id (a string)")
        by = obj.get("by", "operator")
        if not isinstance(by, str) or len(by) > 200:
            raise ValueError("by must be a short string")
        return Command(action=action, target=target, by=by)


@dataclass(frozen=True)
class Reply:
    """What a command did. ``ok=False`` says why nothing applied (never a silent no-op)."""

    ok: bool
    text: str


class CampaignControl(Protocol):
    """A running campaign as a console sees it: events to follow, commands to send."""

    def subscribe(self) -> AsyncIterator[Event]:
        """Every event so far (replay), then new ones as they happen, until the campaign ends."""
        ...

    async def send(self, command: Command) -> Reply: ...

"""Commands an operator sends to a running campaign, from the console, a detached console or
a test. One interface for all of them: ``CampaignControl``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

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


class ChildEngine(Protocol):
    """A campaign running in a process of its own that this console started, while that
    process runs: the console can leave it running (detach), or stop it on the way out with
    an abort that does not wait for the process to be ready, then SIGTERM to ``engine_pid``
    where the abort did not arrive."""

    @property
    def engine_pid(self) -> int: ...

    async def send_now(self, command: Command) -> Reply:
        """Send ``command`` to the process as it is (raises OSError where nothing listens
        yet), not waiting for it to start as ``send`` does."""
        ...


class CampaignControl(ABC):
    """A campaign as a console sees it: events to follow, commands to send, and what the
    console must know of it. The console asks these and nothing else.

    ``detached``: closing a console on it leaves the campaign running (else it ends it);
    ``read_only``: nothing runs it, so no command can apply (a results log replayed);
    ``owns_engine``: the console runs or waits for the engine (:meth:`start_engine`), and
    what the log held when it opened is history; ``note``: a line to show when a console
    opens on it ("" for none).
    """

    detached: ClassVar[bool] = False
    read_only: ClassVar[bool] = False
    owns_engine: ClassVar[bool] = False
    note: str = ""

    @property
    def results_root(self) -> Path | None:
        """The campaign's results directory, where the control knows it."""
        return None

    @abstractmethod
    def subscribe(self) -> AsyncIterator[Event]:
        """Every event so far (replay), then new ones as they happen, until the campaign ends."""

    @abstractmethod
    async def send(self, command: Command) -> Reply: ...

    async def start_engine(self) -> int | None:
        """Run (or wait for) the campaign's engine and return its exit status, on a control
        that owns it; None at once on any other."""
        return None

    def child_engine(self) -> ChildEngine | None:
        """The process this console started for the campaign, while it runs; None for a
        campaign in this process, an attached or a replayed one (nothing to detach from)."""
        return None

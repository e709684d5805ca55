"""Which notifications the console shows: bursts coalesced, every answer once.

A service group that fails takes all its cells with it, and a flood of ``cell_failed`` (with
the engine's warnings about it) used to stack a toast per event over the panes. Here messages
are held for ``hold_s`` after the first of a burst, and at most one toast comes out every
``cooldown_s``: a burst becomes one toast, as severe as its worst message, that counts what it
holds ("5 cells failed · 2 warnings") and names the worst few first.

A command's answer reaches the console twice: as the reply to ``send`` and as the ``notice``
the engine publishes to every observer (so other terminals see what was done). Whichever
comes first is shown; the same text from the other path within ``echo_s`` is dropped.

No textual import: the policy is tested on its own; the app shows what ``due`` returns.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

#: How long the first message of a burst waits for the others.
HOLD_S = 0.8
#: The least time between two toasts of one severity: what comes meanwhile joins the next.
COOLDOWN_S = 5.0
#: How long the second copy of an answer (reply vs notice) is expected.
ECHO_S = 10.0
#: Messages named in a coalesced toast; the rest are counted.
NAMED = 2
#: A named message longer than this is cut (a toast is narrow at 80 columns).
NAME_CHARS = 90


@dataclass(frozen=True)
class Toast:
    severity: str  # information | warning | error
    title: str
    text: str
    count: int = 1


_RANK = {"information": 0, "warning": 1, "error": 2}


@dataclass
class _Pending:
    since: float
    severity: str = "information"
    # rank, title, noun (one, many), text
    items: list[tuple[int, str, tuple[str, str], str]] = field(default_factory=list)


def _cut(text: str, n: int = NAME_CHARS) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


class ToastBatcher:
    def __init__(
        self, hold_s: float = HOLD_S, cooldown_s: float = COOLDOWN_S, echo_s: float = ECHO_S
    ) -> None:
        self.hold_s = hold_s
        self.cooldown_s = cooldown_s
        self.echo_s = echo_s
        self._pending: _Pending | None = None
        self._last = -1e9
        self._answers: dict[str, tuple[str, float]] = {}
        self.coalesced = 0  # messages folded into another's toast (tests read it)

    def add(
        self,
        text: str,
        now: float,
        *,
        severity: str = "information",
        title: str = "",
        noun: tuple[str, str] = ("message", "messages"),
    ) -> None:
        """Queue one message; ``noun`` (one, many) counts a burst of its kind."""
        p = self._pending
        if p is None:
            p = self._pending = _Pending(now)
        else:
            self.coalesced += 1
        rank = _RANK.get(severity, 0)
        if rank > _RANK.get(p.severity, 0):
            p.severity = severity
        p.items.append((rank, title, noun, text))

    def answer(self, text: str, source: str, now: float) -> bool:
        """Whether an answer should be shown: False when the other path (``reply`` or
        ``notice``) already showed the same text a moment ago."""
        for key, (_src, at) in list(self._answers.items()):
            if now - at > self.echo_s:
                del self._answers[key]
        seen = self._answers.get(text)
        if seen is not None and seen[0] != source:
            del self._answers[text]  # the pair is complete; a later repeat is news again
            return False
        self._answers[text] = (source, now)
        return True

    def due(self, now: float, *, flush: bool = False) -> list[Toast]:
        """The burst's toast once it is over (at once with ``flush``), else nothing."""
        p = self._pending
        if p is None:
            return []
        if not flush and (now - p.since < self.hold_s or now - self._last < self.cooldown_s):
            return []
        self._pending = None
        self._last = now
        return [_summarise(p)]

    def __len__(self) -> int:
        return len(self._pending.items) if self._pending is not None else 0


def _summarise(p: _Pending) -> Toast:
    n = len(p.items)
    if n == 1:
        _, title, _, text = p.items[0]
        return Toast(p.severity, title, text)
    nouns = Counter(noun for _, _, noun, _ in p.items)
    title = " · ".join(f"{k} {noun[k != 1]}" for noun, k in nouns.items())
    worst = sorted(p.items, key=lambda item: -item[0])  # stable: the first of each rank
    named = "\n".join(f"• {_cut(text)}" for _, _, _, text in worst[:NAMED])
    more = f"\n… and {n - NAMED} more" if n > NAMED else ""
    return Toast(p.severity, title, named + more, count=n)


#: A host's link as the console tells it: (severity, title, noun) per state it changes to.
_HOST_NEWS = {
    "reconnecting": ("warning", "host away", ("host away", "hosts away")),
    "unreachable": ("error", "host unreachable", ("host unreachable", "hosts unreachable")),
    "connected": ("information", "host back", ("host back", "hosts back")),
}


def host_news(
    host: str, before: str, state: str, reason: str
) -> tuple[str, str, tuple[str, str], str] | None:
    """The toast for a host's link changing from ``before`` to ``state`` (severity, title,
    noun, text), or None when nothing changed: the transport reports every retry, and a host
    first heard of as connected was never away. So a drop gives one toast, giving up a
    second (its cells now fail) and the way back one more."""
    if state == before or (state == "connected" and before in ("", "connected")):
        return None
    news = _HOST_NEWS.get(state)
    if news is None:
        return None
    severity, title, noun = news
    said = f"{host}: {reason}" if state == "connected" else f"{host} {state}: {reason}"
    return severity, title, noun, said.rstrip(": ")

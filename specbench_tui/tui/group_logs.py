"""Every service group's log lines as the console shows them, kept apart per group, so that
the log pane can show whichever group the operator selected, not only the one started last.

In a packed or several-host campaign up to a dozen servers write at once; the lines of each
come in the same event stream (``log_line`` with its group). They are kept here, bounded per
group and in the number of groups, and a group with nothing kept (one that ran before the
console attached, or a campaign opened read-only) is read from its stored log,
``logs/<group>.log`` in the results directory, which holds every line the server wrote.

Imports no textual: tested on its own.
"""

from __future__ import annotations

import os
from collections import OrderedDict, deque
from collections.abc import Iterable
from pathlib import Path

#: Lines kept per group (the log pane keeps as many).
KEEP_LINES = 5000
#: Groups whose lines are kept; past this the one written to longest ago is dropped (its
#: stored log still has them).
KEEP_GROUPS = 32
#: Bytes read from the end of a stored log: enough for ``KEEP_LINES`` lines of a usual length
#: without reading a long campaign's whole log on a key press.
STORED_TAIL_BYTES = 1 << 20


class GroupLogs:
    """Display lines per group, in arrival order; ``version`` of a group changes with it."""

    def __init__(self, keep_lines: int = KEEP_LINES, keep_groups: int = KEEP_GROUPS) -> None:
        self.keep_lines = keep_lines
        self.keep_groups = keep_groups
        self._lines: OrderedDict[str, deque[str]] = OrderedDict()

    def add(self, group: str, lines: Iterable[str]) -> None:
        d = self._lines.get(group)
        if d is None:
            d = self._lines[group] = deque(maxlen=self.keep_lines)
        else:
            self._lines.move_to_end(group)
        d.extend(lines)
        while len(self._lines) > self.keep_groups:
            self._lines.popitem(last=False)

    def has(self, group: str) -> bool:
        return bool(self._lines.get(group))

    def lines(self, group: str) -> list[str]:
        return list(self._lines.get(group, ()))

    def seed(self, group: str, lines: Iterable[str], *, replace: bool = False) -> None:
        """Lines from before the console saw the group (its stored log): put first, or in
        place of what is kept (``replace``: the stored log holds those lines too)."""
        old = self._lines.pop(group, deque())
        kept = [] if replace else list(old)
        self._lines[group] = deque(list(lines) + kept, maxlen=self.keep_lines)

    def clear(self) -> None:
        self._lines.clear()


def stored_log_tail(path: Path, lines: int = KEEP_LINES) -> list[str] | None:
    """The last ``lines`` lines of a group's stored log, or None when there is none. Read
    from the end, so a log of hundreds of megabytes costs one read of ``STORED_TAIL_BYTES``."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            start = max(0, size - STORED_TAIL_BYTES)
            f.seek(start)
            data = f.read()
    except OSError:
        return None
    text = data.decode("utf-8", errors="replace")
    out = text.splitlines()
    if start > 0 and out:
        out = out[1:]  # the first line read is cut
    return out[-lines:]

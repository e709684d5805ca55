"""Text from a plan, a server or a results directory made safe to print.

A title, a label, a server's log line or a failure's reason can hold ESC, BEL and other
control characters; written raw to a terminal (the dry run, the headless lines) or into
``report.md``, they would retitle the window, recolour the screen or hide text. They are
shown instead as the escapes Python writes for them (``\\x1b``), so nothing is lost and
nothing is obeyed. Tab stays as it is; a line break stays where the output has lines.
"""

from __future__ import annotations

import re

# Every C0 control but tab and line feed, DEL, and the C1 controls (which terminals obey too).
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_OR_NEWLINE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def _escape(m: re.Match[str]) -> str:
    ch = m.group()
    return "\\n" if ch == "\n" else f"\\x{ord(ch):02x}"


def printable(text: str, *, one_line: bool = False) -> str:
    """``text`` with its control characters written as escapes; ``one_line`` escapes line
    breaks too (a headless line is one event)."""
    rx = _CONTROL_OR_NEWLINE if one_line else CONTROL
    return rx.sub(_escape, text) if rx.search(text) else text

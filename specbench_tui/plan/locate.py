"""Find the TOML line a key path comes from, so an error can say ``plan.toml:12``.

``tomllib`` keeps no positions, so this scans the text: table headers set the current path and
each ``key = value`` line extends it. Good enough for hand-written plans; when in doubt it
falls back to the nearest enclosing table's line.
"""

from __future__ import annotations

import re

_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(
    r"^\s*((?:\"[^\"]*\"|'[^']*'|[A-Za-z0-9_-]+)(?:\s*\.\s*(?:\"[^\"]*\"|'[^']*'|[A-Za-z0-9_-]+))*)\s*="
)
_INLINE_KEY = re.compile(r"(?:^|[{,]\s*)((?:\"[^\"]*\"|'[^']*'|[A-Za-z0-9_-]+))\s*=")


def _split_dotted(text: str) -> list[str]:
    parts = re.findall(r"\"([^\"]*)\"|'([^']*)'|([A-Za-z0-9_-]+)", text)
    return [a or b or c for a, b, c in parts]


class LineIndex:
    """Maps key paths (tuples of str) to 1-based line numbers of a TOML document."""

    def __init__(self, text: str) -> None:
        self._paths: list[tuple[tuple[str, ...], int]] = []
        table: list[str] = []
        array_counts: dict[tuple[str, ...], int] = {}
        for lineno, line in enumerate(text.splitlines(), start=1):
            m = _HEADER.match(line)
            if m and "=" not in line.split("]")[0]:
                table = _split_dotted(m.group(1))
                if line.lstrip().startswith("[["):
                    key = tuple(table)
                    idx = array_counts.get(key, 0)
                    array_counts[key] = idx + 1
                    table = [*table, str(idx)]
                self._paths.append((tuple(table), lineno))
                continue
            m = _KEY.match(line)
            if m:
                base = (*table, *_split_dotted(m.group(1)))
                self._paths.append((base, lineno))
                rest = line[m.end() :]
                for sub in _INLINE_KEY.finditer(rest):
                    self._paths.append(((*base, *_split_dotted(sub.group(1))), lineno))

    def line_of(self, path: tuple[str | int, ...]) -> int | None:
        """Line of the longest known prefix of ``path`` (list indices are skipped)."""
        want = tuple(str(p) for p in path)
        best: tuple[int, int] | None = None  # (matched length, line)
        for known, lineno in self._paths:
            n = 0
            for a, b in zip(known, want, strict=False):
                if a != b:
                    break
                n += 1
            if n == len(known) and n > 0 and (best is None or n > best[0]):
                best = (n, lineno)
        return best[1] if best else None

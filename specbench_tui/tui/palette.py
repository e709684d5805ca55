"""Every console action in the command palette (ctrl+p), from the same table as the keys, so
an operator who forgot a key finds the action by name."""

from __future__ import annotations

from functools import partial
from typing import Protocol, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider


class PaletteSource(Protocol):
    """What the palette needs of the app: its actions as (title, help, action)."""

    def palette_commands(self) -> list[tuple[str, str, str]]: ...


class ConsoleCommands(Provider):
    """Campaign commands, pane toggles and themes."""

    def _commands(self) -> list[tuple[str, str, str]]:
        return cast(PaletteSource, self.app).palette_commands()

    async def discover(self) -> Hits:
        app = self.app
        for title, help_text, action in self._commands():
            yield DiscoveryHit(title, partial(app.run_action, action), help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        app = self.app
        for title, help_text, action in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(
                    score,
                    matcher.highlight(title),
                    partial(app.run_action, action),
                    text=title,
                    help=help_text,
                )

"""Every console action in the command palette (ctrl+p), from the same table as the keys, so
an operator who forgot a key finds the action by name."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from specbench_tui.tui.app import ConsoleApp


class ConsoleCommands(Provider):
    """Campaign commands, pane toggles and themes."""

    def _commands(self) -> list[tuple[str, str, str]]:
        app = cast("ConsoleApp", self.app)
        return app.palette_commands()

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

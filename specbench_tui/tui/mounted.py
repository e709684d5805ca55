"""A guard for the console's timer callbacks while panes come and go."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

from textual.app import App
from textual.css.query import NoMatches


def while_mounted(method: Callable[..., None]) -> Callable[..., None]:
    """For timer callbacks: while the app starts or shuts down, panes come and go one by
    one (and a modal screen hides them from queries); a tick that finds one missing skips
    this frame instead of failing the app. The next tick paints what it missed."""

    @functools.wraps(method)
    def guarded(self: App[int], *args: Any, **kwargs: Any) -> None:
        with contextlib.suppress(NoMatches):
            method(self, *args, **kwargs)

    return guarded

"""A packed host's quiet: the cells of its groups side by side, or one group's alone.

The interference check (``[campaign] interference_check``) runs some cells of each packed
group once more on the same server with no other group of the host measuring meanwhile, so
what packing did to its figures is the packed run against this one, the server itself
unchanged. A group asks ``alone()`` for that; every other cell on the host is measured under
``cell()``, which waits while a group is alone, and ``alone()`` waits until no cell runs.
Other servers may still be starting or idle meanwhile: what is held apart is measuring.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class HostQuiet:
    """Cells on a host, counted; one group at a time alone."""

    def __init__(self) -> None:
        self._cells = 0
        self._alone = False
        self._wanted = 0  # groups waiting to be alone: no new cell starts meanwhile
        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def cell(self) -> AsyncIterator[None]:
        """A cell measured beside the host's others (not while a group is, or waits to be,
        alone: otherwise two groups taking turns could keep one waiting for ever)."""
        async with self._changed:
            await self._changed.wait_for(lambda: not self._alone and not self._wanted)
            self._cells += 1
        try:
            yield
        finally:
            async with self._changed:
                self._cells -= 1
                self._changed.notify_all()

    @contextlib.asynccontextmanager
    async def alone(self) -> AsyncIterator[None]:
        """No other cell of the host measured while inside; waits for those running."""
        async with self._changed:
            self._wanted += 1
            try:
                await self._changed.wait_for(lambda: not self._alone and self._cells == 0)
            finally:
                self._wanted -= 1
                self._changed.notify_all()  # a waiter given up lets the cells go on
            self._alone = True
        try:
            yield
        finally:
            async with self._changed:
                self._alone = False
                self._changed.notify_all()

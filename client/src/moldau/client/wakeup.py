"""A one-shot broadcast: tasks wait for the next change; a notify wakes them all."""

from __future__ import annotations

import asyncio
import contextlib


class Wakeup:
    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    def notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self, timeout: float) -> None:
        """Return at the next `notify`, or after `timeout` seconds, whichever comes first."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter, timeout)
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

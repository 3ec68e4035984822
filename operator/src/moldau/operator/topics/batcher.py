"""Gathers work submitted by many callers (one per resource) into batches: a batch starts
`linger` seconds after its first item (at once when `max_items` wait) and runs alone, one
after another, so that thousands of resources cost a few requests each batch instead of a
few each. An item submitted again while it waits is replaced, and both callers get the
later one's result."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
I = TypeVar("I")  # noqa: E741
R = TypeVar("R")

log = logging.getLogger("moldau.operator.topics")


class BatchError(Exception):
    """A batch's run left an item without a result."""


class Batcher(Generic[K, I, R]):
    def __init__(self, run: Callable[[list[I]], Awaitable[Mapping[K, R]]],
                 key: Callable[[I], K], *, linger: float = 0.2, max_items: int = 1000) -> None:
        self.run = run
        self.key = key
        self.linger = linger
        self.max_items = max_items
        self._waiting: dict[K, tuple[I, asyncio.Future[R]]] = {}
        self._arrived = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.batches = 0  # batches run so far

    async def submit(self, item: I) -> R:
        key = self.key(item)
        waiting = self._waiting.get(key)
        future = waiting[1] if waiting else asyncio.get_running_loop().create_future()
        self._waiting[key] = (item, future)
        self._arrived.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name="moldau-topic-batches")
        # One caller giving up does not cancel the result the others wait for.
        return await asyncio.shield(future)

    async def _loop(self) -> None:
        while True:
            await self._arrived.wait()
            if len(self._waiting) < self.max_items:
                await asyncio.sleep(self.linger)
            taken = list(self._waiting.items())[:self.max_items]
            for key, _ in taken:
                del self._waiting[key]
            if not self._waiting:
                self._arrived.clear()
            await self._run_batch(dict(taken))

    async def _run_batch(self, taken: dict[K, tuple[I, asyncio.Future[R]]]) -> None:
        self.batches += 1
        try:
            results = await self.run([item for item, _ in taken.values()])
        except asyncio.CancelledError:
            self._fail(taken.values(), BatchError("the batcher closed before the batch ended"))
            raise
        except Exception as exc:  # every caller hears of it; the loop goes on
            log.exception("a batch of %d items failed", len(taken))
            self._fail(taken.values(), exc)
            return
        for key, (_, future) in taken.items():
            if future.done():
                continue
            if key in results:
                future.set_result(results[key])
            else:
                future.set_exception(BatchError(f"no result for {key!r}"))

    @staticmethod
    def _fail(entries: Iterable[tuple[I, asyncio.Future[R]]], exc: BaseException) -> None:
        for _, future in entries:
            if not future.done():
                future.set_exception(exc)

    async def close(self) -> None:
        """Stop; callers still waiting get BatchError."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._fail(self._waiting.values(), BatchError("the batcher closed"))
        self._waiting.clear()

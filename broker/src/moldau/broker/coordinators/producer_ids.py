"""Producer ids for idempotent producers, handed out from blocks the controller allocates.

Blocks are committed to the metadata log before use, so an id is never given twice, even
after a crash (the rest of a block is simply skipped). The controller may be another node,
and may be failing over: the next block is asked for when 90% of the current one is used,
as Kafka's broker does, so producers rarely wait for it. When no id is at hand and none
arrives soon, InitProducerId gets COORDINATOR_LOAD_IN_PROGRESS, which clients retry.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from moldau.errors import ErrorCode, KafkaError

log = logging.getLogger("moldau.broker.producer_ids")

PREFETCH_THRESHOLD = 0.9
# After a failed request, callers are turned away at once for this long (no stampede on a
# controller that is failing over).
RETRY_BACKOFF_S = 0.05
# How long an InitProducerId waits for a block before it is told to retry.
MAX_WAIT_S = 2.0


class ProducerIdAllocator(Protocol):
    async def allocate_producer_ids(self, broker_id: int) -> tuple[int, int]: ...


class ProducerIdManager:
    def __init__(self, controller: ProducerIdAllocator, broker_id: int, *,
                 max_wait_s: float = MAX_WAIT_S,
                 retry_backoff_s: float = RETRY_BACKOFF_S) -> None:
        self.controller = controller
        self.broker_id = broker_id
        self.max_wait_s = max_wait_s
        self.retry_backoff_s = retry_backoff_s
        self._next = 0
        self._end = 0
        self._prefetch_at = 0  # the id whose hand-out asks for the next block
        self._ready: tuple[int, int] | None = None  # the next block, [first, end)
        self._fetch: asyncio.Task[str | None] | None = None
        self._retry_at = 0.0  # loop time before which a failed fetch is not repeated

    async def next_id(self) -> int:
        """The next producer id. Raises KafkaError(COORDINATOR_LOAD_IN_PROGRESS) when
        none is at hand and the controller does not provide a block in time."""
        while True:
            if self._next >= self._end and self._ready is not None:
                self._use(*self._ready)
            if self._next < self._end:
                producer_id = self._next
                self._next += 1
                if producer_id >= self._prefetch_at:
                    self._start_fetch()
                return producer_id
            await self._wait_for_block()

    def _use(self, first: int, end: int) -> None:
        self._ready = None
        self._next, self._end = first, end
        self._prefetch_at = first + int((end - first) * PREFETCH_THRESHOLD)

    def _start_fetch(self) -> asyncio.Task[str | None] | None:
        """Ask for the next block unless one is at hand, asked for, or just failed."""
        if self._ready is not None or self._fetch is not None:
            return self._fetch
        if asyncio.get_running_loop().time() < self._retry_at:
            return None
        self._fetch = asyncio.get_running_loop().create_task(self._allocate(),
                                                             name="allocate-producer-ids")
        return self._fetch

    async def _allocate(self) -> str | None:
        """Fetch a block into `_ready`; the reason when that failed."""
        try:
            first, count = await self.controller.allocate_producer_ids(self.broker_id)
            if count <= 0:
                raise KafkaError(ErrorCode.unknown_server_error,
                                 f"the controller allocated an empty block at {first}")
        except (KafkaError, TimeoutError, OSError) as exc:
            self._retry_at = asyncio.get_running_loop().time() + self.retry_backoff_s
            log.warning("Cannot get producer ids from the controller: %s", exc)
            return str(exc)
        finally:
            self._fetch = None
        self._ready = (first, first + count)
        return None

    async def _wait_for_block(self) -> None:
        fetch = self._start_fetch()
        failure = "a request for producer ids failed just now"
        if fetch is not None:
            try:
                # Shielded: the fetch goes on for later callers when this one stops waiting.
                failure = await asyncio.wait_for(asyncio.shield(fetch), self.max_wait_s) \
                    or ""
            except TimeoutError:
                failure = "the controller did not answer in time"
        if failure:
            raise KafkaError(ErrorCode.coordinator_load_in_progress,
                             f"No producer ids at hand: {failure}")

    def close(self) -> None:
        if self._fetch is not None:
            self._fetch.cancel()

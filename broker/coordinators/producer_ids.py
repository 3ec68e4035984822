"""Producer ids for idempotent producers, handed out from blocks the controller allocates.

Blocks are committed to the metadata log before use, so an id is never given twice, even
after a crash (the rest of a block is simply skipped).
"""

from __future__ import annotations

import asyncio

from moldau.broker.metadata.controller import Controller


class ProducerIdManager:
    def __init__(self, controller: Controller, broker_id: int) -> None:
        self.controller = controller
        self.broker_id = broker_id
        self._next = 0
        self._end = 0
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                first, size = await self.controller.allocate_producer_ids(self.broker_id)
                self._next, self._end = first, first + size
            producer_id = self._next
            self._next += 1
            return producer_id

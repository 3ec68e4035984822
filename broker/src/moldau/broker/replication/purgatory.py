"""acks=all produce requests waiting for the high watermark (Kafka's DelayedProduce).

A waiter is satisfied once the partition's high watermark passes the last offset it
appended; what it then learns depends on the ISR at that moment (Kafka checks
min.insync.replicas again: NOT_ENOUGH_REPLICAS_AFTER_APPEND). Losing the leadership fails
every waiter of the partition with NOT_LEADER_OR_FOLLOWER; the caller applies its timeout.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable

from moldau.errors import ErrorCode

TopicPartition = tuple[str, int]
# Asked when a waiter may be done: (topic-partition, required offset) -> None while it must
# wait on, else the error code to answer with.
Check = Callable[[TopicPartition, int], ErrorCode | None]


class ProducePurgatory:
    def __init__(self, check: Check) -> None:
        self._check = check
        self._waiting: defaultdict[TopicPartition, list[tuple[int, asyncio.Future[ErrorCode]]]]
        self._waiting = defaultdict(list)

    def watch(self, key: TopicPartition, required_offset: int) -> asyncio.Future[ErrorCode]:
        """A future resolving to the partition's outcome, done at once when it is known."""
        future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        outcome = self._check(key, required_offset)
        if outcome is not None:
            future.set_result(outcome)
        else:
            self._waiting[key].append((required_offset, future))
        return future

    def forget(self, key: TopicPartition, future: asyncio.Future[ErrorCode]) -> None:
        """Drop a waiter that timed out."""
        waiting = self._waiting.get(key)
        if waiting is None:
            return
        waiting[:] = [(offset, f) for offset, f in waiting if f is not future]
        if not waiting:
            del self._waiting[key]

    def check(self, key: TopicPartition) -> None:
        """Complete the partition's waiters that can be completed now."""
        waiting = self._waiting.get(key)
        if not waiting:
            return
        still = []
        for required, future in waiting:
            if future.done():
                continue
            outcome = self._check(key, required)
            if outcome is None:
                still.append((required, future))
            else:
                future.set_result(outcome)
        if still:
            self._waiting[key] = still
        else:
            del self._waiting[key]

    def fail(self, key: TopicPartition, code: ErrorCode) -> None:
        for _, future in self._waiting.pop(key, ()):
            if not future.done():
                future.set_result(code)

    def fail_all(self, code: ErrorCode) -> None:
        for key in list(self._waiting):
            self.fail(key, code)

    def __len__(self) -> int:
        return sum(len(waiting) for waiting in self._waiting.values())

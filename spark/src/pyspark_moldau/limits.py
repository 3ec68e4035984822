"""How much a micro-batch reads, as Spark's Kafka connector decides it: at most
maxOffsetsPerTrigger records shared by the partitions in proportion to their backlog, and no
batch until minOffsetsPerTrigger records wait, unless maxTriggerDelay passed since the last."""

from __future__ import annotations

import time
from collections.abc import Callable

from pyspark_moldau.offsets import TopicOffsets


def rate_limit(start: TopicOffsets, end: TopicOffsets, max_rows: int) -> TopicOffsets:
    """At most max_rows records in all, shared by the partitions in proportion to what each
    has waiting (as Spark's maxOffsetsPerTrigger), each partition getting at least one."""
    waiting = {tp: end[tp] - start.get(tp, end[tp]) for tp in end}
    total = sum(waiting.values())
    if total <= max_rows:
        return end
    limited = {}
    for tp, lag in waiting.items():
        share = int(max_rows * lag / total)
        limited[tp] = start.get(tp, end[tp]) + min(lag, max(share, 1 if lag else 0))
    return limited


class TriggerDelay:
    """minOffsetsPerTrigger with maxTriggerDelay: a batch waits until `min_rows` records are
    available, or until `max_delay_ms` passed since the last batch triggered (the first
    call always triggers, as in Spark's connector)."""

    def __init__(self, min_rows: int, max_delay_ms: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.min_rows = min_rows
        self.max_delay_ms = max_delay_ms
        self._clock = clock
        self._last_trigger: float | None = None

    def should_wait(self, start: TopicOffsets, end: TopicOffsets) -> bool:
        now = self._clock()
        if self._last_trigger is None or (now - self._last_trigger) * 1000 >= self.max_delay_ms:
            self._last_trigger = now
            return False
        available = sum(offset - start.get(tp, 0) for tp, offset in end.items())
        if available < self.min_rows:
            return True
        self._last_trigger = now
        return False

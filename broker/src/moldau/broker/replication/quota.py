"""Replication throttling (Kafka's ReplicationQuotaManager, KIP-73).

A rate in bytes per second (`leader.replication.throttled.rate` on the side that serves
followers, `follower.replication.throttled.rate` on the side that fetches) applies to the
replicas a topic names in `leader.replication.throttled.replicas` /
`follower.replication.throttled.replicas`: a list of `partition:broker` entries or `*`.
The bytes of throttled replicas are counted over `replication.quota.window.num` windows of
`replication.quota.window.size.seconds`; while their rate is above the setting, throttled
partitions are left out of fetches. As in Kafka's Rate, a young quota counts as if all but
one window had passed, so a start is not a burst.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from moldau.config import LONG_MAX

WILDCARD = "*"


def is_throttled(replicas: Sequence[str], partition: int, broker_id: int) -> bool:
    """Whether a topic's throttled-replicas list names this partition on this broker."""
    if not replicas:
        return False
    return WILDCARD in replicas or f"{partition}:{broker_id}" in replicas


class ReplicationQuota:
    """Bytes of throttled replicas over a sliding set of windows, against a rate read from
    `rate()` at each check, so a dynamic change applies at once. Runs on the event loop."""

    def __init__(self, rate: Callable[[], int], window_num: int = 11,
                 window_s: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = rate
        self._window_num = max(window_num, 2)
        self._window_s = window_s
        self._clock = clock
        self._starts: list[float] = []  # window start times, oldest first
        self._bytes: list[int] = []
        self.throttled_bytes_total = 0

    def _expire(self, now: float) -> None:
        horizon = now - self._window_num * self._window_s
        while self._starts and self._starts[0] <= horizon:
            del self._starts[0]
            del self._bytes[0]

    def record(self, size: int) -> None:
        """Count bytes of throttled replicas just replicated."""
        if size <= 0:
            return
        now = self._clock()
        self.throttled_bytes_total += size
        if self._starts and now < self._starts[-1] + self._window_s:
            self._bytes[-1] += size
        else:
            self._expire(now)
            self._starts.append(now)
            self._bytes.append(size)

    def observed_rate(self) -> float:
        """Bytes per second over the windows, Kafka's Rate: the elapsed time counts at
        least (windows - 1) whole windows."""
        now = self._clock()
        self._expire(now)
        if not self._starts:
            return 0.0
        elapsed = max(now - self._starts[0], (self._window_num - 1) * self._window_s)
        return sum(self._bytes) / elapsed

    def is_exceeded(self) -> bool:
        rate = self._rate()
        if rate >= LONG_MAX:
            return False  # unthrottled: no window arithmetic at all
        return self.observed_rate() > rate

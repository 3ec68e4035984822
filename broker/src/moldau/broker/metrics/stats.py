"""Counters the request path updates: plain integers in dicts, bumped once per request or
per partition of a request (never per record), on the event loop, without locks. The
collectors turn them into Prometheus families when scraped."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from moldau.errors import ErrorCode

if TYPE_CHECKING:
    from moldau.broker.handlers.fetch_response import TopicData
    from moldau.broker.replication.appends import ProduceResult

# Kafka's request histograms keep a reservoir of 1028 recent samples.
RESERVOIR_SIZE = 1028


@dataclass(slots=True)
class TopicCounters:
    bytes_in: int = 0
    messages_in: int = 0
    bytes_out: int = 0
    produce_requests: int = 0
    failed_produce_requests: int = 0
    fetch_requests: int = 0
    failed_fetch_requests: int = 0


class BrokerTopicStats:
    """Kafka's BrokerTopicMetrics: per topic; the all-topics totals are summed on scrape."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicCounters] = {}

    def topic(self, name: str) -> TopicCounters:
        counters = self.topics.get(name)
        if counters is None:
            counters = self.topics[name] = TopicCounters()
        return counters

    def record_produce(self, entries: Sequence[tuple[str, int, bytes | None]],
                       results: Sequence[ProduceResult]) -> None:
        """Bytes as received and records as appended (offsets are contiguous per append)."""
        for (name, _, records), result in zip(entries, results, strict=True):
            counters = self.topic(name)
            counters.produce_requests += 1
            if result.error is ErrorCode.none:
                counters.bytes_in += len(records or b"")
                counters.messages_in += result.last_offset - result.base_offset + 1
            else:
                counters.failed_produce_requests += 1

    def record_fetch(self, topics: Sequence[TopicData], *, from_follower: bool) -> None:
        """Bytes sent to consumers; a follower's fetches are replication, which Kafka counts
        apart (ReplicationBytesOutPerSec)."""
        for data in topics:
            if not data.name:
                continue
            counters = self.topic(data.name)
            for partition in data.partitions:
                counters.fetch_requests += 1
                if partition.error_code:
                    counters.failed_fetch_requests += 1
                elif not from_follower:
                    counters.bytes_out += partition.size

    def retain(self, exists: Callable[[str], bool]) -> None:
        """Drop deleted topics' series, as Kafka removes their metrics."""
        for name in [name for name in self.topics if not exists(name)]:
            del self.topics[name]


@dataclass(slots=True)
class LatencyStats:
    """Count, sum and recent values of one latency, in ms (recent ones for quantiles)."""

    count: int = 0
    total_ms: float = 0.0
    recent_ms: collections.deque[float] = field(
        default_factory=lambda: collections.deque(maxlen=RESERVOIR_SIZE))

    def record(self, elapsed_ms: float) -> None:
        self.count += 1
        self.total_ms += elapsed_ms
        self.recent_ms.append(elapsed_ms)


@dataclass(slots=True)
class RequestTimes:
    """One API's completed requests: their times and how many of each version."""

    latency: LatencyStats = field(default_factory=LatencyStats)
    by_version: collections.Counter[int] = field(default_factory=collections.Counter)


class RequestStats:
    """Kafka's RequestMetrics: requests by API and version, and their total time from
    arrival to response written. A request may also count under a second name (`named`),
    as Kafka counts a Fetch under FetchConsumer or FetchFollower too."""

    def __init__(self) -> None:
        self.apis: dict[int, RequestTimes] = {}
        self.named: dict[str, RequestTimes] = {}

    def record(self, api_key: int, version: int, received_at: float,
               also_as: str | None = None) -> None:
        elapsed_ms = (time.monotonic() - received_at) * 1000
        _record(self.apis, api_key, version, elapsed_ms)
        if also_as is not None:
            _record(self.named, also_as, version, elapsed_ms)


def _record(table: dict, key: int | str, version: int, elapsed_ms: float) -> None:
    times = table.get(key)
    if times is None:
        times = table[key] = RequestTimes()
    times.latency.record(elapsed_ms)
    times.by_version[version] += 1


def quantile(sorted_values: list[float], q: float) -> float:
    """The q-quantile of sorted values, nearest rank (as Kafka's reservoir snapshots)."""
    if not sorted_values:
        return 0.0
    index = min(int(q * len(sorted_values)), len(sorted_values) - 1)
    return sorted_values[index]

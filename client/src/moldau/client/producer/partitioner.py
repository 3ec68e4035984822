"""The default partitioner, placing records exactly as Kafka's Java client does.

A keyed record goes to `toPositive(murmur2(key)) % partitions`, with murmur2 computed as
Kafka's `Utils.murmur2` (32-bit MurmurHash2, seed 0x9747b28c, little-endian words), so the
same key lands on the same partition whichever client wrote it. Records without a key stick
to one partition until a new batch is needed there (the current one is full or was sent),
then move to another partition with a leader (KIP-480), which keeps batches large.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from functools import cache

from moldau.client.metadata import Cluster

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF

# A custom partitioner: (topic, serialized key or None, partition count) -> partition.
PartitionerFn = Callable[[str, bytes | None, int], int]


@cache
def _words(count: int) -> struct.Struct:
    return struct.Struct(f"<{count}I")


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's 32-bit murmur2 hash of `data`, as a signed 32-bit int (like Java's int)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length >> 2
    if whole:
        for k in _words(whole).unpack_from(data, 0):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        base = length & ~3
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(value: int) -> int:
    return value & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, partitions: int) -> int:
    return to_positive(murmur2(key)) % partitions


class StickyPartitionCache:
    """The current partition for keyless records, per topic."""

    def __init__(self) -> None:
        # Read directly on the producer's per-record path.
        self.current: dict[str, int] = {}

    def partition(self, topic: str, cluster: Cluster) -> int:
        current = self.current.get(topic)
        if current is None:
            return self.next_partition(topic, cluster, -1)
        return current

    def next_partition(self, topic: str, cluster: Cluster, previous: int) -> int:
        """Move away from `previous` (if it is still the current one) to another partition,
        preferring partitions that have a leader."""
        current = self.current.get(topic)
        if current is not None and current != previous:
            return current  # another caller already moved on
        available = cluster.available_partitions(topic)
        count = cluster.partition_count(topic) or 1
        if not available:
            choice = random.randrange(count)
        elif len(available) == 1:
            choice = available[0]
        else:
            choice = random.choice(available)
            while choice == current:
                choice = random.choice(available)
        self.current[topic] = choice
        return choice


class DefaultPartitioner:
    def __init__(self, *, ignore_keys: bool = False) -> None:
        self.ignore_keys = ignore_keys
        self.sticky = StickyPartitionCache()

    def partition(self, topic: str, key: bytes | None, partitions: int,
                  cluster: Cluster) -> int:
        if key is None or self.ignore_keys:
            return self.sticky.partition(topic, cluster)
        return to_positive(murmur2(key)) % partitions

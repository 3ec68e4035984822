"""What poll() returns: ConsumerRecord and the ConsumerRecords of one poll; and what
poll_batches() returns: FetchedBatch, a record batch left undecoded."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from moldau.client.types import TopicPartition
from moldau.records.batch import BatchHeader

CREATE_TIME = 0
LOG_APPEND_TIME = 1


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # CREATE_TIME (0) or LOG_APPEND_TIME (1)
    key: Any
    value: Any
    headers: list[tuple[str, bytes | None]]
    leader_epoch: int | None
    serialized_key_size: int  # -1 for a null key
    serialized_value_size: int  # -1 for a null value

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class FetchedBatch(NamedTuple):
    """One record batch as fetched, for callers that decode records themselves (in bulk,
    into columns): its header and its records section, `records[start:end]`, decompressed.
    Records before `first_offset` were returned before or lie before the position where
    reading started; skip them. Control batches and, with read_committed, aborted ones are
    never returned."""

    topic: str
    partition: int
    header: BatchHeader
    records: bytes
    start: int
    end: int
    first_offset: int


class ConsumerRecords:
    """The records of one poll, grouped by partition in offset order. Iterating yields
    every record, partition by partition."""

    __slots__ = ("_by_partition", "_count")

    EMPTY: ConsumerRecords

    def __init__(self, by_partition: Mapping[TopicPartition, list[ConsumerRecord]]) -> None:
        self._by_partition = dict(by_partition)
        self._count = sum(len(records) for records in self._by_partition.values())

    def __iter__(self) -> Iterator[ConsumerRecord]:
        for records in self._by_partition.values():
            yield from records

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def count(self) -> int:
        return self._count

    def is_empty(self) -> bool:
        return self._count == 0

    def partitions(self) -> set[TopicPartition]:
        return set(self._by_partition)

    def records(self, partition: TopicPartition | str) -> list[ConsumerRecord]:
        """The records of one partition, or of every partition of a topic given by name."""
        if isinstance(partition, str):
            return [r for tp, records in self._by_partition.items() if tp.topic == partition
                    for r in records]
        return list(self._by_partition.get(partition, ()))

    def by_partition(self) -> dict[TopicPartition, list[ConsumerRecord]]:
        return dict(self._by_partition)

    def __repr__(self) -> str:
        return f"ConsumerRecords({self._count} records, {len(self._by_partition)} partitions)"


ConsumerRecords.EMPTY = ConsumerRecords({})

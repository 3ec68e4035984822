"""A group's committed offsets, and those still pending in transactions.

TxnOffsetCommit (KIP-98) writes offsets into `__consumer_offsets` as part of a producer's
transaction. They stay pending until the transaction's marker reaches that partition: COMMIT
makes them committed offsets, ABORT drops them. When regular and transactional commits of a
partition mix, the commit whose record comes later in the log wins, as in Kafka, so the
result does not depend on the order in which writes are acknowledged or markers arrive.
"""

from __future__ import annotations

from dataclasses import dataclass

TopicPartition = tuple[str, int]


@dataclass
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    # Where the commit's record is in `__consumer_offsets`; -1 when not known.
    record_offset: int = -1


def keep_latest(offsets: dict[TopicPartition, CommittedOffset], key: TopicPartition,
                stored: CommittedOffset) -> bool:
    """Store `stored` unless the offset held for `key` was written later in the log (one
    whose place is not known was just written, so it is the latest)."""
    current = offsets.get(key)
    if current is not None and 0 <= stored.record_offset < current.record_offset:
        return False
    offsets[key] = stored
    return True


class PendingOffsets:
    """One group's offsets of transactions that have not ended, per producer id."""

    def __init__(self) -> None:
        self._by_producer: dict[int, dict[TopicPartition, CommittedOffset]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_producer)

    def add(self, producer_id: int, key: TopicPartition, stored: CommittedOffset) -> None:
        self._by_producer.setdefault(producer_id, {})[key] = stored

    def has(self, key: TopicPartition) -> bool:
        return any(key in offsets for offsets in self._by_producer.values())

    def partitions(self) -> set[TopicPartition]:
        return {key for offsets in self._by_producer.values() for key in offsets}

    def producers(self) -> list[int]:
        return list(self._by_producer)

    def discard(self, key: TopicPartition) -> None:
        """The partition's offset was deleted (a tombstone): no transaction brings it back."""
        for offsets in self._by_producer.values():
            offsets.pop(key, None)

    def end(self, producer_id: int, commit: bool,
            committed: dict[TopicPartition, CommittedOffset]) -> None:
        """The producer's transaction ended: on commit, its offsets join `committed`."""
        ended = self._by_producer.pop(producer_id, {})
        if commit:
            for key, stored in ended.items():
                keep_latest(committed, key, stored)


class OpenTransactions:
    """Which groups hold pending offsets of each producer, so that a marker finds them."""

    def __init__(self) -> None:
        self._groups: dict[int, set[str]] = {}

    def add(self, producer_id: int, group_id: str) -> None:
        self._groups.setdefault(producer_id, set()).add(group_id)

    def discard(self, producer_id: int, group_id: str) -> None:
        group_ids = self._groups.get(producer_id)
        if group_ids is not None:
            group_ids.discard(group_id)
            if not group_ids:
                del self._groups[producer_id]

    def groups(self, producer_id: int) -> list[str]:
        return list(self._groups.get(producer_id, ()))

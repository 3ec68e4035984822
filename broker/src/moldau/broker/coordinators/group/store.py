"""The `__consumer_offsets` topic: where the group coordinator keeps groups and offsets."""

from __future__ import annotations

from moldau.broker.coordinators.group.records import OFFSETS_TOPIC
from moldau.broker.coordinators.topic import (
    COMMIT_TIMEOUT_MS,
    CoordinatorTopic,
    Record,
    TopicCreator,
)
from moldau.broker.replication.manager import ReplicaManager

__all__ = ["COMMIT_TIMEOUT_MS", "OFFSETS_TOPIC", "OffsetsTopic", "Record"]


class OffsetsTopic(CoordinatorTopic):
    def __init__(self, controller: TopicCreator, replicas: ReplicaManager, *, partitions: int,
                 replication_factor: int, segment_bytes: int,
                 commit_timeout_ms: int = COMMIT_TIMEOUT_MS) -> None:
        super().__init__(OFFSETS_TOPIC, controller, replicas, partitions=partitions,
                         replication_factor=replication_factor, segment_bytes=segment_bytes,
                         commit_timeout_ms=commit_timeout_ms)

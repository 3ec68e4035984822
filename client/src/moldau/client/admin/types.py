"""Arguments and results of the admin client: plain dataclasses."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import IntEnum

from moldau.client.types import Node, TopicPartition


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    BROKER = 4
    BROKER_LOGGER = 8


class ConfigSource(IntEnum):
    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class AlterConfigOpType(IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True)
class NewTopic:
    """A topic to create. None for partitions or replication factor means the broker's
    default; `replica_assignment` maps partition -> broker ids and excludes both."""

    name: str
    num_partitions: int | None = None
    replication_factor: int | None = None
    configs: dict[str, str] = field(default_factory=dict)
    replica_assignment: dict[int, list[int]] | None = None


@dataclass(frozen=True)
class NewPartitions:
    """Grow a topic to `total_count` partitions, optionally placing the new ones."""

    total_count: int
    assignments: list[list[int]] | None = None


@dataclass(frozen=True)
class ConfigResource:
    type: ResourceType
    name: str

    @classmethod
    def topic(cls, name: str) -> ConfigResource:
        return cls(ResourceType.TOPIC, name)

    @classmethod
    def broker(cls, broker_id: int | str = "") -> ConfigResource:
        return cls(ResourceType.BROKER, str(broker_id))


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource = ConfigSource.UNKNOWN
    is_read_only: bool = False
    is_sensitive: bool = False
    is_default: bool = False
    synonyms: tuple[tuple[str, str | None, ConfigSource], ...] = ()
    documentation: str | None = None


@dataclass(frozen=True)
class AlterConfigOp:
    name: str
    value: str | None = None
    op: AlterConfigOpType = AlterConfigOpType.SET

    @classmethod
    def set(cls, name: str, value: str) -> AlterConfigOp:
        return cls(name, value, AlterConfigOpType.SET)

    @classmethod
    def delete(cls, name: str) -> AlterConfigOp:
        return cls(name, None, AlterConfigOpType.DELETE)


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: Node | None
    leader_id: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: tuple[PartitionDescription, ...]

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str | None
    controller: Node | None
    nodes: tuple[Node, ...]
    # Ids among `nodes` that are fenced (listed only when asked for: include_fenced_brokers).
    fenced: frozenset[int] = frozenset()


@dataclass(frozen=True)
class QuorumReplica:
    """A voter or observer of the metadata quorum as the leader sees it (-1: unknown)."""

    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int = -1
    last_caught_up_timestamp: int = -1


@dataclass(frozen=True)
class QuorumInfo:
    """The KRaft metadata quorum (Kafka's Admin.describeMetadataQuorum)."""

    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[QuorumReplica, ...]
    observers: tuple[QuorumReplica, ...]


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str | None = None
    type: str | None = None


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
    coordinator: Node | None = None


@dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


@dataclass(frozen=True)
class ListedOffset:
    offset: int
    timestamp: int
    leader_epoch: int | None = None


class OffsetSpec:
    """What list_offsets looks up: the earliest or latest offset, the offset of the first
    record at or after a timestamp, or the offset of the largest timestamp."""

    EARLIEST = -2
    LATEST = -1
    MAX_TIMESTAMP = -3

    @staticmethod
    def for_timestamp(timestamp_ms: int) -> int:
        return timestamp_ms


@dataclass(frozen=True)
class ReplicaInfo:
    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True)
class LogDirDescription:
    path: str
    error: Exception | None
    replicas: dict[TopicPartition, ReplicaInfo]
    total_bytes: int | None = None
    usable_bytes: int | None = None


class ElectionType(IntEnum):
    """What ElectLeaders elects: the preferred (first assigned) replica, or, for a partition
    without a leader, any live replica even when it is not in sync (data may be lost)."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True)
class PartitionReassignment:
    """An ongoing reassignment: the replica set while it runs (the target followed by the
    replicas being removed) and the replicas being added and removed."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def target_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

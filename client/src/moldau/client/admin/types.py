"""Arguments and results of the admin client: plain dataclasses."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Self

from moldau.client.types import Node, TopicPartition
from moldau.security.scram import DEFAULT_ITERATIONS


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


# -------------------------------------------------------------------------- ACLs and SCRAM


class _Coded(IntEnum):
    """An enum of Kafka wire codes whose 0 is UNKNOWN: `of` reads a code this side does not
    know as UNKNOWN, as Kafka's `fromCode` does."""

    @classmethod
    def of(cls, code: int) -> Self:
        try:
            return cls(code)
        except ValueError:
            return cls(0)


def _as_codes(item: object, **kinds: type[_Coded]) -> None:
    """Plain ints given for enum fields become the enums (unknown codes UNKNOWN)."""
    for name, kind in kinds.items():
        value = getattr(item, name)
        if value is not None and not isinstance(value, kind):
            object.__setattr__(item, name, kind.of(value))


class AclResourceType(_Coded):
    """What an ACL is about (Kafka's org.apache.kafka.common.resource.ResourceType)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class AclPatternType(_Coded):
    """How an ACL's resource name matches: exactly (LITERAL, `*` for every name) or as a
    prefix (PREFIXED). ANY and MATCH are for filters only: ANY matches either kind by name,
    MATCH finds every ACL that applies to the named resource."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Coded):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15  # KIP-939, on transactional ids


class AclPermissionType(_Coded):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_ACL_CODES: dict[str, type[_Coded]] = {
    "resource_type": AclResourceType, "pattern_type": AclPatternType,
    "operation": AclOperation, "permission_type": AclPermissionType}


@dataclass(frozen=True)
class AclBinding:
    """One ACL: `principal` (`User:alice`) connecting from `host` (`*` for any) is allowed or
    denied `operation` on the resources the pattern names. The cluster's resource name is
    `kafka-cluster`."""

    resource_type: AclResourceType
    resource_name: str
    pattern_type: AclPatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __post_init__(self) -> None:
        _as_codes(self, **_ACL_CODES)

    def to_filter(self) -> AclBindingFilter:
        """The filter that matches exactly this ACL (to delete it, say)."""
        return AclBindingFilter(self.resource_type, self.resource_name, self.pattern_type,
                                self.principal, self.host, self.operation,
                                self.permission_type)


@dataclass(frozen=True)
class AclBindingFilter:
    """A pattern of ACLs for describe_acls and delete_acls; None matches anything (a name,
    principal or host None: any; an enum None: ANY). `AclBindingFilter()` matches every
    ACL."""

    resource_type: AclResourceType | None = None
    resource_name: str | None = None
    pattern_type: AclPatternType | None = None
    principal: str | None = None
    host: str | None = None
    operation: AclOperation | None = None
    permission_type: AclPermissionType | None = None

    def __post_init__(self) -> None:
        _as_codes(self, **_ACL_CODES)


class ScramMechanism(_Coded):
    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        """The SASL name: SCRAM-SHA-256 or SCRAM-SHA-512."""
        return self.name.replace("_", "-")


@dataclass(frozen=True)
class ScramCredentialInfo:
    mechanism: ScramMechanism
    iterations: int


@dataclass(frozen=True)
class UserScramCredentialUpsertion:
    """Set a user's SCRAM credential for one mechanism. The client makes a random salt and
    sends only the salted password (RFC 5802's SaltedPassword), never the password."""

    user: str
    mechanism: ScramMechanism
    password: str = field(repr=False)
    iterations: int = DEFAULT_ITERATIONS

    def __post_init__(self) -> None:
        _as_codes(self, mechanism=ScramMechanism)


@dataclass(frozen=True)
class UserScramCredentialDeletion:
    user: str
    mechanism: ScramMechanism

    def __post_init__(self) -> None:
        _as_codes(self, mechanism=ScramMechanism)

"""What the Kafka side of the topic operator takes and gives: wanted topics, each tied to
the resource that wants it, and per resource the outcome of a reconcile or a deletion."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TopicRef:
    """One Topic resource."""

    namespace: str
    name: str
    uid: str
    created: str = ""  # metadata.creationTimestamp (RFC 3339 UTC): sorts by age

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, eq=False)
class DesiredTopic:
    """A Kafka topic as one resource wants it. None for partitions or replicas: the
    broker's default at creation, and left alone afterwards."""

    ref: TopicRef
    topic_name: str
    partitions: int | None = None
    replicas: int | None = None
    config: Mapping[str, str] = field(default_factory=dict)
    managed: bool = True
    # Its status says Ready: it keeps the topic when another resource was created in the
    # same second.
    ready: bool = False
    # The topic name its status records, when it has managed one.
    known_name: str | None = None


@dataclass(frozen=True)
class ReplicasChange:
    """A replication factor change under way."""

    target: int
    state: str  # pending (not started yet) | ongoing (partitions moving)
    message: str


@dataclass(frozen=True)
class TopicResult:
    """A resource's outcome: the Ready condition (a Kafka error's name as the reason when
    Kafka refused), what the topic looks like now, and what this reconcile changed."""

    ready: bool
    reason: str
    message: str
    topic_id: str | None = None
    partitions: int | None = None
    replicas: int | None = None
    replicas_change: ReplicasChange | None = None
    # (reason, message) of each change made in Kafka, for Events.
    changes: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class DeleteResult:
    """done: the resource may go (its finalizer released); else why not yet."""

    done: bool
    reason: str
    message: str

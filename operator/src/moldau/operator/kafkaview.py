"""What the roller and the scaler need to know about a running cluster, read over the Kafka
protocol through the cluster's admin client: the live brokers and their racks, every
partition's replicas, ISR and leader, each topic's min.insync.replicas, the metadata
quorum's voters and how far each has read, and the partitions being moved.

Five requests whatever the number of topics: ListPartitionReassignments, DescribeCluster,
Metadata (every topic, internal ones too), DescribeConfigs, DescribeQuorum. The
decisions made from it are pure functions (roll_safety, balance, drain), tested without a
cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from moldau.client.admin import AsyncAdmin, ConfigResource, QuorumInfo, TopicDescription
from moldau.client.errors import KafkaError
from moldau.operator.clusterstate import ObserveError

MIN_INSYNC = "min.insync.replicas"


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int  # -1: none

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition


@dataclass(frozen=True)
class KafkaView:
    brokers: frozenset[int]  # registered and unfenced
    partitions: tuple[PartitionState, ...] = ()
    min_isr: Mapping[str, int] = field(default_factory=dict)  # topic -> effective value
    racks: Mapping[int, str | None] = field(default_factory=dict)
    quorum: QuorumInfo | None = None
    # (topic, partition) being reassigned -> the replicas it moves to
    targets: Mapping[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)

    @property
    def moving(self) -> frozenset[tuple[str, int]]:
        return frozenset(self.targets)

    def hosted_by(self, broker: int) -> list[PartitionState]:
        return [p for p in self.partitions if broker in p.replicas]

    def assignment(self) -> dict[tuple[str, int], tuple[int, ...]]:
        """Each partition's replicas now (while moving: the old and the new ones)."""
        return {p.key: p.replicas for p in self.partitions}


def partitions_of(described: Mapping[str, TopicDescription]) -> tuple[PartitionState, ...]:
    return tuple(PartitionState(name, p.partition, tuple(p.replicas), tuple(p.isr),
                                p.leader_id)
                 for name, topic in sorted(described.items())
                 for p in sorted(topic.partitions, key=lambda item: item.partition))


async def read_view(admin: AsyncAdmin, timeout: float) -> KafkaView:
    """The cluster as the roller and scaler see it; ObserveError when it does not answer."""
    try:
        # Moves first: one that completes before the topics are read shows its final
        # replicas there; read after, it could show its replicas while moving and no target.
        moving = await admin.list_partition_reassignments(timeout=timeout)
        cluster = await admin.describe_cluster(timeout=timeout)
        described = await admin.describe_topics(timeout=timeout)  # internal ones too
        configs = await admin.describe_configs_each(
            [ConfigResource.topic(name) for name in described], timeout=timeout)
        quorum = await admin.describe_metadata_quorum(timeout=timeout)
    except (KafkaError, OSError) as exc:
        raise ObserveError(" ".join(str(exc).split()) or type(exc).__name__) from None
    min_isr = {}
    for resource, entries in configs.items():
        if isinstance(entries, KafkaError):
            continue  # deleted meanwhile
        entry = entries.get(MIN_INSYNC)
        min_isr[resource.name] = int(entry.value) if entry and entry.value else 1
    return KafkaView(
        brokers=frozenset(node.node_id for node in cluster.nodes),
        partitions=partitions_of(described), min_isr=min_isr,
        racks={node.node_id: node.rack for node in cluster.nodes}, quorum=quorum,
        targets={(tp.topic, tp.partition): move.target_replicas
                 for tp, move in moving.items()})

"""The topic operator's two conversations with a cluster, through one admin client and with
many topics per request: what the cluster has (its brokers; the topics' partitions,
settings and replica moves), and the changes of a set of plans (CreateTopics,
CreatePartitions, IncrementalAlterConfigs, AlterPartitionReassignments), each resource
getting its own answer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from moldau.client.admin import (
    AsyncAdmin,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    PartitionReassignment,
    TopicDescription,
)
from moldau.client.errors import ErrorCode, KafkaError
from moldau.client.types import TopicPartition
from moldau.operator.topics.model import TopicRef
from moldau.operator.topics.plan import TopicPlan

K = TypeVar("K")

# Errors that do not come from the Kafka protocol: a socket that failed.
TRANSPORT_ERRORS = (KafkaError, OSError)


@dataclass
class Observation:
    brokers: tuple[int, ...] = ()
    topics: dict[str, TopicDescription] = field(default_factory=dict)
    # Topics that exist but could not be read, with why.
    errors: dict[str, KafkaError] = field(default_factory=dict)
    configs: dict[str, dict[str, ConfigEntry]] = field(default_factory=dict)
    moving: dict[str, dict[int, PartitionReassignment]] = field(default_factory=dict)


async def observe(admin: AsyncAdmin, names: Sequence[str], *, configs: bool = True,
                  timeout: float | None = None) -> Observation:
    """Brokers, then per topic its description, its settings and its partitions being
    moved: four requests whatever the number of topics. Raises when the cluster does not
    answer at all."""
    cluster = await admin.describe_cluster(timeout=timeout)
    seen = Observation(brokers=tuple(sorted(node.node_id for node in cluster.nodes)))
    for name, found in (await admin.describe_topics_each(names, timeout=timeout)).items():
        if isinstance(found, TopicDescription):
            seen.topics[name] = found
        elif found.code != ErrorCode.unknown_topic_or_partition:
            seen.errors[name] = found
    if configs and seen.topics:
        entries = await admin.describe_configs_each(
            [ConfigResource.topic(name) for name in seen.topics], timeout=timeout)
        for resource, value in entries.items():
            if isinstance(value, KafkaError):
                seen.errors[resource.name] = value
            else:
                seen.configs[resource.name] = value
    partitions = [TopicPartition(name, p.partition) for name, described in seen.topics.items()
                  for p in described.partitions]
    if partitions:
        moves = await admin.list_partition_reassignments(partitions, timeout=timeout)
        for tp, move in moves.items():
            seen.moving.setdefault(tp.topic, {})[tp.partition] = move
    return seen


@dataclass
class Applied:
    """Per resource: what Kafka refused, and what it did (reason, message)."""

    errors: dict[TopicRef, list[KafkaError]] = field(default_factory=dict)
    changes: dict[TopicRef, list[tuple[str, str]]] = field(default_factory=dict)

    def record(self, ref: TopicRef, answer: KafkaError | None, change: tuple[str, str]
               ) -> None:
        if answer is None:
            self.changes.setdefault(ref, []).append(change)
        else:
            self.errors.setdefault(ref, []).append(answer)


async def _each(call: Callable[[], Awaitable[Mapping[K, KafkaError | None]]],
                keys: Sequence[K]) -> Mapping[K, KafkaError | None]:
    """A per-item call whose whole request failed gives that failure to every item."""
    try:
        return await call()
    except TRANSPORT_ERRORS as exc:
        error = exc if isinstance(exc, KafkaError) else KafkaError(
            ErrorCode.network_exception, " ".join(str(exc).split()) or type(exc).__name__)
        return dict.fromkeys(keys, error)


def _settings_text(plan: TopicPlan) -> str:
    return "; ".join(f"{op.name}={op.value}" if op.value is not None else f"{op.name} reset"
                     for op in plan.alter)


async def apply(admin: AsyncAdmin, plans: Sequence[TopicPlan], *,
                timeout: float | None = None) -> Applied:
    """Every change of every plan: one request per kind of change, sent together."""
    by_name = {plan.desired.topic_name: plan for plan in plans if not plan.blocked}
    creates = {n: p.create for n, p in by_name.items() if p.create is not None}
    grows = {n: NewPartitions(p.grow_to) for n, p in by_name.items() if p.grow_to is not None}
    alters = {ConfigResource.topic(n): list(p.alter) for n, p in by_name.items() if p.alter}
    moves = {TopicPartition(n, partition): list(replicas) for n, p in by_name.items()
             for partition, replicas in p.move.items()}
    calls: list[Awaitable[Mapping[Any, KafkaError | None]]] = [
        _each(lambda: admin.create_topics_each(creates.values(), timeout=timeout),
              list(creates)),
        _each(lambda: admin.create_partitions_each(grows, timeout=timeout), list(grows)),
        _each(lambda: admin.incremental_alter_configs_each(alters, timeout=timeout),
              list(alters)),
        _each(lambda: admin.alter_partition_reassignments_each(moves, timeout=timeout),
              list(moves))]
    created, grown, altered, moved = await asyncio.gather(*calls)
    applied = Applied()
    for name, answer in created.items():
        plan = by_name[name]
        applied.record(plan.desired.ref, answer, ("TopicCreated", f"created topic '{name}'"))
    for name, answer in grown.items():
        plan = by_name[name]
        applied.record(plan.desired.ref, answer, (
            "PartitionsIncreased", f"increased partitions of topic '{name}' to "
                                   f"{plan.grow_to}"))
    for resource, answer in altered.items():
        plan = by_name[resource.name]
        applied.record(plan.desired.ref, answer, (
            "ConfigChanged", f"changed config of topic '{resource.name}': "
                             f"{_settings_text(plan)}"))
    started: dict[str, list[KafkaError | None]] = {}
    for tp, answer in moved.items():
        started.setdefault(tp.topic, []).append(answer)
    for name, answers in started.items():
        plan = by_name[name]
        failed = next((a for a in answers if a is not None), None)
        applied.record(plan.desired.ref, failed, (
            "ReplicasChangeStarted", f"moving {len(answers)} partitions of topic '{name}' to "
                                     f"{plan.desired.replicas} replicas"))
    return applied

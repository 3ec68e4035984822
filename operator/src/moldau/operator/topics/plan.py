"""What to ask of Kafka for each wanted topic, decided without talking to anyone: which
resource owns a topic two resources name, whether to create it, grow its partitions, change
its settings or move its replicas, and what to refuse.

Kubernetes is the source of truth for the topics it manages only (unidirectional, as
Strimzi's topic operator): settings are compared with what Kafka reports, overrides no
resource asks for are removed, and partitions are never removed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from moldau.client.admin import (
    AlterConfigOp,
    ConfigEntry,
    ConfigSource,
    NewTopic,
    PartitionReassignment,
    TopicDescription,
)
from moldau.client.errors import KafkaError
from moldau.operator.topics.model import DesiredTopic, ReplicasChange, TopicRef, TopicResult
from moldau.operator.topics.placement import replica_targets

CONFLICT = "ResourceConflict"
NOT_SUPPORTED = "NotSupported"


def reason_of(error: KafkaError) -> str:
    """Kafka's name of an error (INVALID_CONFIG), as a condition's reason."""
    return error.code.name.upper()


def owner(claimants: Iterable[DesiredTopic]) -> TopicRef | None:
    """The resource that manages a topic several name: the oldest; in a tie (creation
    times have whole seconds) the one already Ready, then the first by name."""
    managed = [c for c in claimants if c.managed]
    if not managed:
        return None
    first = min(managed, key=lambda c: (c.ref.created, not c.ready, str(c.ref)))
    return first.ref


def config_changes(wanted: Mapping[str, str], entries: Mapping[str, ConfigEntry]
                   ) -> list[AlterConfigOp]:
    """Set what differs from Kafka's value; delete overrides the resource does not name,
    so they go back to the broker's default."""
    ops = [AlterConfigOp.set(key, value) for key, value in sorted(wanted.items())
           if key not in entries or entries[key].value != value]
    ops += [AlterConfigOp.delete(key) for key, entry in sorted(entries.items())
            if entry.source is ConfigSource.DYNAMIC_TOPIC_CONFIG and key not in wanted]
    return ops


@dataclass(frozen=True)
class TopicPlan:
    desired: DesiredTopic
    create: NewTopic | None = None
    grow_to: int | None = None
    alter: tuple[AlterConfigOp, ...] = ()
    move: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    # (reason, message) the resource ends Ready False with, unless Kafka refuses first.
    problem: tuple[str, str] | None = None
    # Nothing may be asked of Kafka for this resource.
    blocked: bool = False


def plan_topic(desired: DesiredTopic, owning: TopicRef | None,
               described: TopicDescription | None, entries: Mapping[str, ConfigEntry],
               moving: bool, brokers: Sequence[int]) -> TopicPlan:
    name = desired.topic_name
    if desired.known_name is not None and desired.known_name != name:
        return TopicPlan(desired, problem=(
            NOT_SUPPORTED, f"spec.topicName cannot change: this resource manages topic "
                           f"'{desired.known_name}'"), blocked=True)
    if owning != desired.ref:
        return TopicPlan(desired, problem=(
            CONFLICT, f"Managed by {owning}: topic '{name}' is named by an older Topic "
                      "resource"), blocked=True)
    if described is None:
        return TopicPlan(desired, create=NewTopic(name, desired.partitions, desired.replicas,
                                                  dict(desired.config)))
    problem = None
    grow_to = None
    count = len(described.partitions)
    if desired.partitions is not None and desired.partitions < count:
        problem = (NOT_SUPPORTED, f"Decreasing partitions of topic '{name}' from {count} to "
                                  f"{desired.partitions} is not supported: Kafka cannot "
                                  "remove partitions")
    elif desired.partitions is not None and desired.partitions > count:
        grow_to = desired.partitions
    move: dict[int, tuple[int, ...]] = {}
    replicas = {p.partition: p.replicas for p in described.partitions}
    # One change at a time: new partitions first (they take the current factor), and no new
    # move while one runs.
    if desired.replicas is not None and grow_to is None and not moving and \
            any(len(r) != desired.replicas for r in replicas.values()):
        try:
            move = replica_targets(replicas, desired.replicas, brokers)
        except KafkaError as exc:
            problem = problem or (reason_of(exc), str(exc))
    return TopicPlan(desired, grow_to=grow_to, alter=tuple(config_changes(desired.config,
                                                                         entries)),
                     move=move, problem=problem)


def holding_replicas(described: TopicDescription,
                     moving: Mapping[int, PartitionReassignment]) -> int:
    """The replication factor in effect: replicas still being added do not count."""
    counts = [len([r for r in p.replicas
                   if p.partition not in moving or r not in moving[p.partition].adding_replicas])
              for p in described.partitions]
    return min(counts) if counts else 0


def replicas_change(desired: DesiredTopic, described: TopicDescription,
                    moving: Mapping[int, PartitionReassignment]) -> ReplicasChange | None:
    target = desired.replicas
    if target is None:
        return None
    total = len(described.partitions)
    if moving:
        return ReplicasChange(target, "ongoing", f"{len(moving)} of {total} partitions of "
                                                 f"topic '{desired.topic_name}' moving to "
                                                 f"{target} replicas")
    if any(len(p.replicas) != target for p in described.partitions):
        return ReplicasChange(target, "pending", f"topic '{desired.topic_name}' is to go "
                                                 f"from {holding_replicas(described, {})} "
                                                 f"to {target} replicas")
    return None


def outcome(plan: TopicPlan, errors: Sequence[KafkaError],
            described: TopicDescription | None,
            moving: Mapping[int, PartitionReassignment],
            changes: Sequence[tuple[str, str]]) -> TopicResult:
    """A resource's result from its plan, what Kafka refused, and what the topic looks like
    after the changes."""
    desired = plan.desired
    if plan.blocked:
        assert plan.problem is not None
        return TopicResult(False, *plan.problem)
    result = TopicResult(True, "Ready", f"topic '{desired.topic_name}' is as wanted",
                         changes=tuple(changes))
    change = None
    if described is not None:
        change = replicas_change(desired, described, moving)
        result = replace(result, topic_id=str(described.topic_id) if described.topic_id
                         else None, partitions=len(described.partitions),
                         replicas=holding_replicas(described, moving), replicas_change=change)
    if errors:
        return replace(result, ready=False, reason=reason_of(errors[0]),
                       message=str(errors[0]))
    if plan.problem is not None:
        return replace(result, ready=False, reason=plan.problem[0], message=plan.problem[1])
    if change is not None:
        return replace(result, reason="ReplicasChanging", message=change.message)
    return result

"""The topic operator's decisions, without a cluster: replica placement for a replication
factor change, who owns a topic two resources name, and the settings to change."""

from __future__ import annotations

from collections import Counter

import pytest

from moldau.client.admin import (
    AlterConfigOp,
    ConfigEntry,
    ConfigSource,
    PartitionDescription,
    TopicDescription,
)
from moldau.client.errors import ErrorCode, KafkaError
from moldau.operator.topics.model import DesiredTopic, TopicRef
from moldau.operator.topics.placement import replica_targets
from moldau.operator.topics.plan import config_changes, owner, plan_topic


def test_growing_keeps_every_replica_in_place_and_spreads_the_new_ones() -> None:
    current = {p: (p % 4 + 1,) for p in range(8)}  # one replica each, on brokers 1-4
    targets = replica_targets(current, 3, [1, 2, 3, 4])
    assert set(targets) == set(range(8))
    for partition, replicas in targets.items():
        assert replicas[0] == current[partition][0]
        assert len(set(replicas)) == 3
    # 24 replicas on 4 brokers: 6 each.
    assert Counter(b for r in targets.values() for b in r) == {1: 6, 2: 6, 3: 6, 4: 6}


def test_shrinking_keeps_the_first_replicas_and_untouched_partitions_are_left_out() -> None:
    targets = replica_targets({0: (3, 1, 2), 1: (2, 3)}, 2, [1, 2, 3])
    assert targets == {0: (3, 1)}


def test_more_replicas_than_brokers_is_kafkas_invalid_replication_factor() -> None:
    with pytest.raises(KafkaError) as refused:
        replica_targets({0: (1,)}, 4, [1, 2, 3])
    assert refused.value.code is ErrorCode.invalid_replication_factor
    assert str(refused.value) == ("Unable to replicate the partition 4 time(s): The target "
                                  "replication factor of 4 cannot be reached because only 3 "
                                  "broker(s) are registered.")


def desired(name: str, created: str, *, ready: bool = False, managed: bool = True,
            **spec: object) -> DesiredTopic:
    return DesiredTopic(TopicRef("ns", name, f"uid-{name}", created), "t", managed=managed,
                        ready=ready, **spec)  # type: ignore[arg-type]


def test_the_oldest_resource_owns_a_topic_then_the_ready_one_then_the_first_name() -> None:
    a = desired("a", "2025-01-02T00:00:00Z")
    b = desired("b", "2025-01-01T00:00:00Z")
    assert owner([a, b]) == b.ref
    c = desired("c", "2025-01-01T00:00:00Z", ready=True)
    assert owner([a, b, c]) == c.ref
    assert owner([desired("z", "2025-01-01T00:00:00Z"), b]) == b.ref
    # An unmanaged resource claims nothing.
    assert owner([desired("u", "2024-01-01T00:00:00Z", managed=False), a]) == a.ref
    assert owner([]) is None


def entry(name: str, value: str, source: ConfigSource) -> ConfigEntry:
    return ConfigEntry(name, value, source)


def test_only_differing_settings_are_set_and_unnamed_overrides_deleted() -> None:
    entries = {
        "retention.ms": entry("retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        "cleanup.policy": entry("cleanup.policy", "delete", ConfigSource.DEFAULT_CONFIG),
        "segment.ms": entry("segment.ms", "5", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        "segment.bytes": entry("segment.bytes", "1", ConfigSource.STATIC_BROKER_CONFIG)}
    ops = config_changes({"retention.ms": "1000", "cleanup.policy": "compact",
                          "no.such": "x"}, entries)
    assert ops == [AlterConfigOp.set("cleanup.policy", "compact"),
                   AlterConfigOp.set("no.such", "x"), AlterConfigOp.delete("segment.ms")]
    assert config_changes({"cleanup.policy": "delete"}, {
        "cleanup.policy": entries["cleanup.policy"]}) == []


def topic(replicas: list[tuple[int, ...]]) -> TopicDescription:
    return TopicDescription("t", None, False, tuple(
        PartitionDescription(i, None, r[0], 0, r, r) for i, r in enumerate(replicas)))


def test_new_partitions_come_before_a_replication_factor_change() -> None:
    wanted = desired("a", "2025-01-01T00:00:00Z", partitions=3, replicas=2)
    first = plan_topic(wanted, wanted.ref, topic([(1,), (2,)]), {}, False, [1, 2, 3])
    assert (first.grow_to, first.move) == (3, {})
    second = plan_topic(wanted, wanted.ref, topic([(1,), (2,), (3,)]), {}, False, [1, 2, 3])
    assert second.grow_to is None and set(second.move) == {0, 1, 2}
    # No new move while one runs.
    assert plan_topic(wanted, wanted.ref, topic([(1,), (2,), (3,)]), {}, True,
                      [1, 2, 3]).move == {}


def test_a_changed_topic_name_is_refused_before_anything_else() -> None:
    wanted = DesiredTopic(TopicRef("ns", "a", "u", ""), "new-name", known_name="old-name")
    plan = plan_topic(wanted, wanted.ref, None, {}, False, [1])
    assert plan.blocked and plan.create is None
    assert plan.problem == ("NotSupported", "spec.topicName cannot change: this resource "
                                            "manages topic 'old-name'")

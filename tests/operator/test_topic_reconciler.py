"""The Kafka side of the topic operator against real broker processes (a three-node
moldau.cluster.LocalCluster), without Kubernetes: wanted topics in, each resource's result
out, and the cluster checked with the admin client and kafka-python."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator, Sequence

import pytest

from e2e.support import (
    assert_records_equal,
    kp_consume_all,
    kp_produce,
    make_records,
    unique,
    wait_until,
    with_offsets,
)
from moldau.client import Admin
from moldau.client.admin import AlterConfigOp, ConfigResource, ConfigSource
from moldau.cluster import LocalCluster, free_base_port
from moldau.operator.topics.clients import admin_for
from moldau.operator.topics.model import DeleteResult, DesiredTopic, TopicRef, TopicResult
from moldau.operator.topics.reconciler import Claims, TopicReconciler

pytestmark = pytest.mark.timeout(300)

NAMESPACE = "team"


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[Admin]:
    with Admin({"bootstrap.servers": cluster.bootstrap_servers,
                "default.api.timeout.ms": 20000}) as client:
        yield client


def want(topic: str, partitions: int | None = None, replicas: int | None = None,
         config: dict[str, str] | None = None, *, resource: str | None = None,
         created: str = "2025-01-01T00:00:00Z", managed: bool = True,
         ready: bool = False) -> DesiredTopic:
    ref = TopicRef(NAMESPACE, resource or topic, str(uuid.uuid4()), created)
    return DesiredTopic(ref, topic, partitions, replicas, dict(config or {}), managed, ready)


def bootstrap(cluster: LocalCluster) -> list[str]:
    return cluster.bootstrap_servers.split(",")


def reconcile(cluster: LocalCluster, *desired: DesiredTopic, claims: Claims | None = None
              ) -> list[TopicResult]:
    async def go() -> list[TopicResult]:
        async with admin_for(bootstrap(cluster)) as client:
            found = await TopicReconciler(client, "kc").reconcile(desired, claims)
        return [found[d.ref] for d in desired]
    return asyncio.run(go())


def delete(cluster: LocalCluster, *desired: DesiredTopic, claims: Claims | None = None
           ) -> list[DeleteResult]:
    async def go() -> list[DeleteResult]:
        async with admin_for(bootstrap(cluster)) as client:
            found = await TopicReconciler(client, "kc").delete(desired, claims)
        return [found[d.ref] for d in desired]
    return asyncio.run(go())


def overrides(admin: Admin, topic: str) -> dict[str, str | None]:
    resource = ConfigResource.topic(topic)
    entries = admin.describe_configs([resource])[resource]
    return {name: entry.value for name, entry in entries.items()
            if entry.source is ConfigSource.DYNAMIC_TOPIC_CONFIG}


def kinds(result: TopicResult) -> list[str]:
    return [reason for reason, _ in result.changes]


def test_a_topic_is_created_once_and_a_second_pass_changes_nothing(cluster, admin) -> None:
    topic = unique("created")
    desired = want(topic, 3, 2, {"retention.ms": "7200000"})
    [first] = reconcile(cluster, desired)
    assert (first.ready, first.reason) == (True, "Ready")
    assert kinds(first) == ["TopicCreated"]
    described = admin.describe_topics([topic])[topic]
    assert first.topic_id == str(described.topic_id)
    assert (first.partitions, first.replicas) == (3, 2)
    assert all(len(p.replicas) == 2 for p in described.partitions)
    assert overrides(admin, topic) == {"retention.ms": "7200000"}

    [again] = reconcile(cluster, desired)
    assert again.changes == ()
    assert (again.ready, again.topic_id, again.partitions) == (True, first.topic_id, 3)


def test_partitions_grow_and_a_decrease_is_refused_never_applied(cluster, admin) -> None:
    topic = unique("grow")
    reconcile(cluster, want(topic, 2, 1))
    [grown] = reconcile(cluster, want(topic, 5, 1))
    assert grown.ready and kinds(grown) == ["PartitionsIncreased"]
    assert grown.partitions == 5
    assert len(admin.describe_topics([topic])[topic].partitions) == 5

    # The refusal does not hold back the other changes of the same resource.
    [shrunk] = reconcile(cluster, want(topic, 3, 1, {"cleanup.policy": "compact"}))
    assert (shrunk.ready, shrunk.reason) == (False, "NotSupported")
    assert shrunk.message == (f"Decreasing partitions of topic '{topic}' from 5 to 3 is not "
                              "supported: Kafka cannot remove partitions")
    assert kinds(shrunk) == ["ConfigChanged"]
    assert shrunk.partitions == 5
    assert len(admin.describe_topics([topic])[topic].partitions) == 5
    assert overrides(admin, topic) == {"cleanup.policy": "compact"}


def test_config_changes_send_only_what_differs_and_removed_keys_go_back_to_default(
        cluster, admin) -> None:
    topic = unique("config")
    reconcile(cluster, want(topic, 1, 1, {"retention.ms": "7200000",
                                          "cleanup.policy": "compact"}))
    [changed] = reconcile(cluster, want(topic, 1, 1, {"retention.ms": "3600000",
                                                      "cleanup.policy": "compact"}))
    assert changed.changes == (("ConfigChanged", f"changed config of topic '{topic}': "
                                                 "retention.ms=3600000"),)
    # A key the spec no longer names, and an override made outside Kubernetes: both reset.
    admin.incremental_alter_configs({ConfigResource.topic(topic): [
        AlterConfigOp.set("segment.ms", "600000")]})
    [reset] = reconcile(cluster, want(topic, 1, 1, {"cleanup.policy": "compact"}))
    assert reset.changes == (("ConfigChanged", f"changed config of topic '{topic}': "
                                               "retention.ms reset; segment.ms reset"),)
    assert overrides(admin, topic) == {"cleanup.policy": "compact"}
    resource = ConfigResource.topic(topic)
    entries = admin.describe_configs([resource])[resource]
    assert entries["retention.ms"].value == "604800000"  # Kafka's default, 7 days
    # A value equal to the current one is not sent.
    [same] = reconcile(cluster, want(topic, 1, 1, {"cleanup.policy": "compact",
                                                   "retention.ms": "604800000"}))
    assert same.changes == ()


def test_kafka_errors_are_the_reason_with_kafkas_message(cluster, admin) -> None:
    topic = unique("errors")
    [bad_value, unknown_key, too_many] = reconcile(
        cluster, want(topic + "-a", 1, 1, {"retention.ms": "soon"}),
        want(topic + "-b", 1, 1, {"retention.msec": "1"}), want(topic + "-c", 1, 4))
    assert (bad_value.ready, bad_value.reason) == (False, "INVALID_CONFIG")
    assert "retention.ms" in bad_value.message and "soon" in bad_value.message
    assert (unknown_key.reason, unknown_key.message) == (
        "INVALID_CONFIG", f"Topic '{topic}-b': Unknown topic config name: retention.msec")
    assert too_many.reason == "INVALID_REPLICATION_FACTOR"
    assert "only 3 broker(s) are registered" in too_many.message
    assert not {f"{topic}-a", f"{topic}-b", f"{topic}-c"} & set(admin.list_topics())

    # On an existing topic: the bad change is refused, the topic stays as it was.
    reconcile(cluster, want(topic, 1, 1))
    [refused] = reconcile(cluster, want(topic, 1, 4, {"retention.ms": "soon"}))
    assert (refused.ready, refused.reason) == (False, "INVALID_CONFIG")
    [placed] = reconcile(cluster, want(topic, 1, 4))
    assert (placed.reason, placed.message) == (
        "INVALID_REPLICATION_FACTOR", "Unable to replicate the partition 4 time(s): The target "
        "replication factor of 4 cannot be reached because only 3 broker(s) are registered.")
    assert admin.describe_topics([topic])[topic].replication_factor == 1


def settle(cluster: LocalCluster, desired: DesiredTopic, timeout: float = 120) -> TopicResult:
    """Reconcile until no replicas change is under way."""
    results: list[TopicResult] = []

    def done() -> bool:
        results[:] = reconcile(cluster, desired)
        return results[0].replicas_change is None

    wait_until(done, timeout, f"the replicas change of {desired.topic_name} to end")
    return results[0]


def test_replication_factor_one_to_three_keeps_every_record(cluster, admin) -> None:
    topic = unique("rf")
    reconcile(cluster, want(topic, 3, 1))
    records = make_records(60, partitions=3, seed=7)
    kp_produce(cluster.bootstrap_servers, topic, records, acks="all")
    before = {p.partition: p.replicas for p in admin.describe_topics([topic])[topic].partitions}

    [started] = reconcile(cluster, want(topic, 3, 3))
    assert started.ready
    assert started.changes == (("ReplicasChangeStarted",
                                f"moving 3 partitions of topic '{topic}' to 3 replicas"),)
    finished = settle(cluster, want(topic, 3, 3))
    assert (finished.ready, finished.reason, finished.replicas) == (True, "Ready", 3)
    after = admin.describe_topics([topic])[topic].partitions
    for partition in after:
        # The replica that held the data stays first (still the preferred leader).
        assert partition.replicas[0] == before[partition.partition][0]
        assert sorted(partition.replicas) == [1, 2, 3]
    wait_until(lambda: all(len(p.isr) == 3
                           for p in admin.describe_topics([topic])[topic].partitions),
               60, "every new replica in sync")
    # The data is on the new replicas: with each partition's original replica stopped,
    # every record is still there.
    holder = before[0][0]
    cluster.stop_node(holder)
    try:
        wait_until(lambda: admin.describe_topics([topic])[topic].partitions[0].leader_id
                   not in (holder, -1), 60, f"partition 0 led by a broker other than {holder}")
        assert_records_equal(kp_consume_all(cluster.bootstrap_servers, topic,
                                            partitions=[0, 1, 2]), with_offsets(records))
    finally:
        cluster.start_node(holder)

    # And back down to one replica each.
    reconcile(cluster, want(topic, 3, 1))
    down = settle(cluster, want(topic, 3, 1))
    assert down.replicas == 1
    assert_records_equal(kp_consume_all(cluster.bootstrap_servers, topic, partitions=[0, 1, 2]),
                         with_offsets(records))


def test_the_older_of_two_resources_keeps_the_topic_the_newer_conflicts(cluster,
                                                                          admin) -> None:
    topic = unique("conflict")
    older = want(topic, 1, 1, resource="first", created="2025-01-01T00:00:00Z")
    newer = want(topic, 2, 1, {"retention.ms": "1000"}, resource="second",
                 created="2025-01-02T00:00:00Z")
    # The newer is reconciled first, in a batch of its own; the claims name both.
    claims = {topic: [older, newer]}
    [conflicted] = reconcile(cluster, newer, claims=claims)
    assert (conflicted.ready, conflicted.reason) == (False, "ResourceConflict")
    assert conflicted.message == (f"Managed by {NAMESPACE}/first: topic '{topic}' is named by "
                                  "an older Topic resource")
    assert topic not in admin.list_topics()
    [kept, still] = reconcile(cluster, older, newer, claims=claims)
    assert kept.ready and still.reason == "ResourceConflict"
    assert len(admin.describe_topics([topic])[topic].partitions) == 1
    assert overrides(admin, topic) == {}

    # Created in the same second: the one already Ready keeps it.
    tied = want(topic, 1, 1, resource="third", created=older.ref.created)
    ready_older = want(topic, 1, 1, resource="first", created=older.ref.created, ready=True)
    [tie] = reconcile(cluster, tied, claims={topic: [ready_older, tied]})
    assert tie.reason == "ResourceConflict"

    # Deleting the resource in conflict leaves the topic; deleting its owner deletes it.
    [left] = delete(cluster, newer, claims=claims)
    assert (left.done, left.reason) == (True, "ResourceConflict")
    assert topic in admin.list_topics()
    [gone] = delete(cluster, older, claims={topic: [older]})
    assert (gone.done, gone.reason) == (True, "TopicDeleted")
    wait_until(lambda: topic not in admin.list_topics(), 30, f"{topic} deleted")
    [again] = delete(cluster, older)
    assert (again.done, again.reason) == (True, "TopicNotFound")


def test_unmanaged_resources_and_topics_made_elsewhere_are_left_alone(cluster, admin) -> None:
    outside = unique("outside")
    admin.create_topic(outside, 2, 1, {"retention.ms": "1000"})
    [unmanaged] = reconcile(cluster, want(outside, 1, 1, managed=False))
    assert (unmanaged.ready, unmanaged.reason) == (True, "Unmanaged")
    assert overrides(admin, outside) == {"retention.ms": "1000"}
    [kept] = delete(cluster, want(outside, 1, 1, managed=False))
    assert (kept.done, kept.reason) == (True, "Unmanaged")
    assert outside in admin.list_topics()

    managed = unique("managed")
    reconcile(cluster, want(managed, 1, 1))

    async def listing() -> object:
        async with admin_for(bootstrap(cluster)) as client:
            return await TopicReconciler(client, "kc").inventory([managed, unique("absent")])

    found = asyncio.run(listing())
    assert outside in found.unmanaged_names and managed not in found.unmanaged_names
    assert found.managed == 1
    assert found.unmanaged == len(found.unmanaged_names) == len(admin.list_topics()) - 1
    assert list(found.unmanaged_names) == sorted(found.unmanaged_names)


def test_an_unreachable_cluster_is_the_reason_of_every_resource(tmp_path) -> None:
    address = f"127.0.0.1:{free_base_port(1)}"

    async def go() -> tuple[Sequence[TopicResult], Sequence[DeleteResult]]:
        async with admin_for([address], timeout=2) as client:
            reconciler = TopicReconciler(client, "kc", timeout=2)
            desired = [want("a", 1, 1), want("b", 1, 1)]
            applied = await reconciler.reconcile(desired)
            deleted = await reconciler.delete(desired[:1])
        return list(applied.values()), list(deleted.values())

    applied, deleted = asyncio.run(go())
    assert {(r.ready, r.reason) for r in applied} == {(False, "ClusterUnreachable")}
    assert applied[0].message.startswith("KafkaCluster kc did not answer: ")
    assert "\n" not in applied[0].message
    assert (deleted[0].done, deleted[0].reason) == (False, "ClusterUnreachable")

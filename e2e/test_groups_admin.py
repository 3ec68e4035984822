"""What the admin APIs show about consumer groups, and the errors Kafka gives for misuse.

DescribeGroups, ListGroups, OffsetFetch, OffsetCommit from an admin, DeleteGroups and
OffsetDelete through confluent-kafka's AdminClient and kafka-python's KafkaAdminClient;
UNKNOWN_TOPIC_OR_PARTITION, INVALID_SESSION_TIMEOUT and GROUP_MAX_SIZE_REACHED through
consumers.
"""

from __future__ import annotations

import time

import pytest

from e2e.support import (
    ck_admin,
    ck_committed,
    ck_consumer,
    ck_create_topic,
    ck_describe_group,
    ck_produce_numbered,
    unique,
    wait_split,
)

BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": 0,
                    "group.max.session.timeout.ms": 60000}


def topic_with(bootstrap: str, partitions: int) -> tuple[str, set[tuple[str, int]]]:
    topic = unique("adm")
    ck_create_topic(bootstrap, topic, partitions)
    return topic, {(topic, p) for p in range(partitions)}


def kp_admin(bootstrap: str):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)


def ck_listing(bootstrap: str, group: str, states: set | None = None):
    kwargs = {"states": states} if states else {}
    result = ck_admin(bootstrap).list_consumer_groups(request_timeout=15, **kwargs) \
        .result(timeout=20)
    assert not result.errors, result.errors
    return next((g for g in result.valid if g.group_id == group), None)


def ck_error_code(future) -> str:
    from confluent_kafka import KafkaException

    try:
        future.result(timeout=20)
    except KafkaException as exc:
        return exc.args[0].name()
    return "NO_ERROR"


def ck_alter(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]
             ) -> dict[tuple[str, int], str | None]:
    """AlterConsumerGroupOffsets: the error name (or None) per partition."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(t, p, o) for (t, p), o in offsets.items()])
    result = ck_admin(bootstrap).alter_consumer_group_offsets([request], request_timeout=15)[
        group].result(timeout=20)
    return {(tp.topic, tp.partition): tp.error.name() if tp.error else None
            for tp in result.topic_partitions}


def wait_committed(bootstrap: str, group: str, want: dict, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while (got := ck_committed(bootstrap, group)) != want:
        assert time.monotonic() < deadline, f"committed {got}, want {want}"
        time.sleep(0.3)


def test_group_through_its_life_in_both_admin_clients(module_broker, group_workers):
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType
    from kafka import OffsetAndMetadata
    from kafka import TopicPartition as KpTopicPartition
    from kafka.errors import GroupSubscribedToTopicError, NoError

    bootstrap = module_broker.bootstrap
    admin = ck_admin(bootstrap)
    topic, everything = topic_with(bootstrap, 4)
    other_topic, _ = topic_with(bootstrap, 2)
    group = unique("g-admin")
    workers = [group_workers.start("ck", bootstrap, group, [topic], assignor=["range"],
                                   client_id=f"admin-member-{i}") for i in range(2)]
    split = wait_split(workers, everything, timeout=30)
    ck_produce_numbered(bootstrap, topic, range(40), 4)
    wait_committed(bootstrap, group, {(topic, p): 10 for p in range(4)})

    # --- Stable, seen by confluent-kafka
    listing = ck_listing(bootstrap, group)
    assert listing is not None, "ListGroups does not show the group"
    assert listing.state == ConsumerGroupState.STABLE
    assert listing.is_simple_consumer_group is False
    assert listing.type == ConsumerGroupType.CLASSIC
    assert ck_listing(bootstrap, group, {ConsumerGroupState.STABLE}) is not None
    assert ck_listing(bootstrap, group, {ConsumerGroupState.EMPTY}) is None

    description = ck_describe_group(bootstrap, group)
    assert description.group_id == group
    assert description.state == ConsumerGroupState.STABLE
    assert description.is_simple_consumer_group is False
    assert description.partition_assignor == "range"
    node_id = next(iter(admin.list_topics(timeout=15).brokers))
    assert description.coordinator.id == node_id
    assert description.coordinator.port == module_broker.port
    by_client = {m.client_id: m for m in description.members}
    assert set(by_client) == {"admin-member-0", "admin-member-1"}
    for worker, part in zip(workers, split, strict=True):
        member = by_client[worker.name]
        assert member.host == "/127.0.0.1"
        assert member.group_instance_id is None
        assert member.member_id.startswith(worker.name + "-")
        assert {(tp.topic, tp.partition) for tp in member.assignment.topic_partitions} == part

    # --- Stable, seen by kafka-python
    kp = kp_admin(bootstrap)
    try:
        described = kp.describe_groups([group])[group]
        assert described["error"] is None
        assert described["group_state"] == "Stable"
        assert described["protocol_type"] == "consumer"
        assert described["protocol_data"] == "range"
        members = {m["client_id"]: m for m in described["members"]}
        for worker, part in zip(workers, split, strict=True):
            member = members[worker.name]
            assert member["client_host"] == "/127.0.0.1"
            assert list(member["member_metadata"]["topics"]) == [topic]
            assigned = {(t["topic"], p) for t in member["member_assignment"]["assigned_partitions"]
                        for p in t["partitions"]}
            assert assigned == part
        listed = {g["group_id"]: g for g in kp.list_groups()}
        assert listed[group]["protocol_type"] == "consumer"
        assert listed[group]["group_state"] == "Stable"

        # --- what a non-empty group refuses
        assert kp.delete_groups([group]) == {group: "NonEmptyGroupError"}
        assert ck_error_code(admin.delete_consumer_groups([group], request_timeout=15)[group]) \
            == "NON_EMPTY_GROUP"
        # Only members commit to a group that has members.
        assert ck_alter(bootstrap, group, {(topic, 0): 1}) == {(topic, 0): "UNKNOWN_MEMBER_ID"}
        refused = kp.delete_group_offsets(group, [KpTopicPartition(topic, 0)])
        assert refused == {KpTopicPartition(topic, 0): GroupSubscribedToTopicError}
        assert ck_committed(bootstrap, group) == {(topic, p): 10 for p in range(4)}

        # --- Empty after the members close
        for worker in workers:
            worker.close()
        listing = ck_listing(bootstrap, group)
        assert listing.state == ConsumerGroupState.EMPTY
        description = ck_describe_group(bootstrap, group)
        assert description.state == ConsumerGroupState.EMPTY
        assert description.members == []
        assert description.partition_assignor == ""
        described = kp.describe_groups([group])[group]
        assert (described["group_state"], described["protocol_type"],
                described["protocol_data"], described["members"]) == \
            ("Empty", "consumer", "", [])
        assert ck_committed(bootstrap, group) == {(topic, p): 10 for p in range(4)}

        # --- an admin may move the offsets of an empty group, and delete some
        assert ck_alter(bootstrap, group, {(topic, 0): 3, (other_topic, 1): 5}) == \
            {(topic, 0): None, (other_topic, 1): None}
        want = {(topic, 0): 3, (topic, 1): 10, (topic, 2): 10, (topic, 3): 10,
                (other_topic, 1): 5}
        assert ck_committed(bootstrap, group) == want
        fetched = kp.list_group_offsets({group: None})[group]
        assert {(tp.topic, tp.partition): oam.offset for tp, oam in fetched.items()} == want
        moved = kp.alter_group_offsets(group, {KpTopicPartition(topic, 3): OffsetAndMetadata(
            7, "note", -1)})
        assert moved == {KpTopicPartition(topic, 3): NoError}
        fetched = kp.list_group_offsets({group: [KpTopicPartition(topic, 3)]})[group]
        assert fetched[KpTopicPartition(topic, 3)].offset == 7
        assert fetched[KpTopicPartition(topic, 3)].metadata == "note"
        deleted = kp.delete_group_offsets(group, [KpTopicPartition(topic, 1),
                                                  KpTopicPartition(other_topic, 1)])
        assert set(deleted.values()) == {NoError}
        assert ck_committed(bootstrap, group) == {(topic, 0): 3, (topic, 2): 10, (topic, 3): 7}

        # --- deleted
        assert ck_error_code(admin.delete_consumer_groups([group], request_timeout=15)[group]) \
            == "NO_ERROR"
        assert ck_listing(bootstrap, group) is None
        assert ck_committed(bootstrap, group) == {}
        assert group not in {g["group_id"] for g in kp.list_groups()}
        gone = kp.describe_groups([group])[group]
        assert gone["members"] == []
        assert gone["group_state"] == "Dead" or "GroupIdNotFound" in (gone["error"] or ""), gone
        assert kp.delete_groups([group]) == {group: "GroupIdNotFoundError"}
        assert ck_error_code(admin.delete_consumer_groups([group], request_timeout=15)[group]) \
            == "GROUP_ID_NOT_FOUND"
    finally:
        kp.close()


def test_delete_unknown_group_and_offsets_of_unknown_group(module_broker):
    from kafka import TopicPartition
    from kafka.errors import GroupIdNotFoundError

    bootstrap = module_broker.bootstrap
    group = unique("g-never")
    assert ck_error_code(ck_admin(bootstrap).delete_consumer_groups(
        [group], request_timeout=15)[group]) == "GROUP_ID_NOT_FOUND"
    kp = kp_admin(bootstrap)
    try:
        assert kp.delete_groups([group]) == {group: "GroupIdNotFoundError"}
        with pytest.raises(GroupIdNotFoundError):
            kp.delete_group_offsets(group, [TopicPartition("whatever", 0)])
    finally:
        kp.close()


def test_admin_removes_static_member(module_broker, group_workers):
    """KIP-345: an admin removes a static member by its instance id (LeaveGroup v3+): the
    group rebalances at once instead of waiting out the member's session."""
    from kafka.admin import MemberToRemove
    from kafka.errors import NoError, UnknownMemberIdError

    bootstrap = module_broker.bootstrap
    topic, everything = topic_with(bootstrap, 4)
    group = unique("g-remove")
    instance = unique("instance")
    static = group_workers.start("ck", bootstrap, group, [topic], instance_id=instance,
                                 session_ms=30000)
    dynamic = group_workers.start("ck", bootstrap, group, [topic], session_ms=30000)
    wait_split([static, dynamic], everything, timeout=30)
    static.kill()
    kp = kp_admin(bootstrap)
    try:
        removed_at = time.monotonic()
        result = kp.remove_group_members(group, [MemberToRemove(group_instance_id=instance)])
        assert list(result.values()) == [NoError]
        dynamic.wait_assignment(lambda tps: tps == everything, timeout=10,
                                what="all partitions", after=removed_at)
        again = kp.remove_group_members(group, [MemberToRemove(group_instance_id=instance)])
        assert list(again.values()) == [UnknownMemberIdError]
    finally:
        kp.close()
    assert [m.group_instance_id for m in ck_describe_group(bootstrap, group).members] == [None]
    dynamic.close()


# --------------------------------------------------------------------------- errors


def test_commit_to_missing_partition_is_unknown_topic_or_partition(module_broker):
    """OffsetCommit to a partition the topic does not have, or to a topic that does not
    exist, fails for that partition with UNKNOWN_TOPIC_OR_PARTITION; the rest is stored."""
    from confluent_kafka import KafkaException, TopicPartition
    from kafka import OffsetAndMetadata
    from kafka import TopicPartition as KpTopicPartition
    from kafka.errors import NoError, UnknownTopicOrPartitionError

    bootstrap = module_broker.bootstrap
    topic, _ = topic_with(bootstrap, 2)
    missing_topic = unique("absent")
    group = unique("g-missing")

    # An empty group that only stores offsets (generation -1), through two admin clients.
    assert ck_alter(bootstrap, group, {(topic, 0): 5, (topic, 7): 5, (missing_topic, 0): 5}) \
        == {(topic, 0): None, (topic, 7): "UNKNOWN_TOPIC_OR_PART",
            (missing_topic, 0): "UNKNOWN_TOPIC_OR_PART"}  # librdkafka's name for it
    kp = kp_admin(bootstrap)
    try:
        result = kp.alter_group_offsets(group, {
            KpTopicPartition(topic, 1): OffsetAndMetadata(2, "", -1),
            KpTopicPartition(topic, 2): OffsetAndMetadata(2, "", -1)})
    finally:
        kp.close()
    assert result == {KpTopicPartition(topic, 1): NoError,
                      KpTopicPartition(topic, 2): UnknownTopicOrPartitionError}
    assert ck_committed(bootstrap, group) == {(topic, 0): 5, (topic, 1): 2}

    # A consumer without a subscription commits the same way.
    consumer = ck_consumer(bootstrap, **{"group.id": group})
    try:
        with pytest.raises(KafkaException) as raised:
            consumer.commit(offsets=[TopicPartition(topic, 5, 1)], asynchronous=False)
    finally:
        consumer.close()
    assert raised.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"

    # A member of a stable group, committing with its generation.
    member_group = unique("g-missing-member")
    assigned = []
    member = ck_consumer(bootstrap, **{"group.id": member_group, "session.timeout.ms": 6000})
    try:
        member.subscribe([topic], on_assign=lambda c, parts: assigned.extend(parts))
        deadline = time.monotonic() + 30
        while not assigned:
            assert time.monotonic() < deadline, "no assignment"
            member.poll(0.2)
        with pytest.raises(KafkaException) as raised:
            member.commit(offsets=[TopicPartition(topic, 1, 4), TopicPartition(topic, 9, 4)],
                          asynchronous=False)
        assert raised.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"
        ok = member.commit(offsets=[TopicPartition(topic, 1, 4)], asynchronous=False)
        assert [tp.error for tp in ok] == [None]
    finally:
        member.close()
    assert ck_committed(bootstrap, member_group) == {(topic, 1): 4}


@pytest.mark.parametrize("client, session_ms", [("ck", 1000), ("ck", 90000), ("kp", 1000),
                                                ("aio", 5000)])
def test_session_timeout_outside_broker_limits_is_refused(module_broker, group_workers,
                                                          client, session_ms):
    """group.min.session.timeout.ms is 6000 by default, group.max.session.timeout.ms is 60000
    in this module: a JoinGroup outside gets INVALID_SESSION_TIMEOUT and no member joins."""
    bootstrap = module_broker.bootstrap
    topic, _ = topic_with(bootstrap, 1)
    group = unique("g-session")
    extra = {"heartbeat_ms": 300, "max_poll_ms": max(session_ms, 30000)}
    worker = group_workers.start(client, bootstrap, group, [topic], session_ms=session_ms,
                                 **extra)
    error = worker.wait_for(lambda e: e["ev"] == "error", timeout=15, what="an error")
    assert error["error"] in ("INVALID_SESSION_TIMEOUT", "InvalidSessionTimeoutError"), error
    assert worker.assignment() == set()
    description = ck_describe_group(bootstrap, group)
    assert description.members == []
    worker.kill()


def test_group_max_size(broker_factory, group_workers):
    """group.max.size=2: a third member is refused with GROUP_MAX_SIZE_REACHED and the two
    members keep their partitions."""
    broker = broker_factory({"group.initial.rebalance.delay.ms": 0, "group.max.size": 2})
    bootstrap = broker.bootstrap
    topic, everything = topic_with(bootstrap, 4)
    group = unique("g-max")
    members = [group_workers.start("ck", bootstrap, group, [topic]) for _ in range(2)]
    split = wait_split(members, everything, timeout=30)
    extra_ck = group_workers.start("ck", bootstrap, group, [topic])
    extra_kp = group_workers.start("kp", bootstrap, group, [topic])
    for extra, name in ((extra_ck, "GROUP_MAX_SIZE_REACHED"),
                        (extra_kp, "GroupMaxSizeReachedError")):
        error = extra.wait_for(lambda e: e["ev"] == "error", timeout=15, what="an error")
        assert error["error"] == name, error
    assert wait_split(members, everything, timeout=5) == split
    assert len(ck_describe_group(bootstrap, group).members) == 2
    extra_ck.kill()
    extra_kp.kill()
    for member in members:
        member.close()

"""The Moldau admin client against a real broker, cross-checked with other clients."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from e2e.support import (
    ck_admin,
    kp_consume_all,
    kp_offsets,
    kp_produce,
    make_records,
    unique,
    wait_until,
)
from moldau.client import Admin, AsyncAdmin, Producer, TopicPartition
from moldau.client.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPatternType,
    AclPermissionType,
    AclResourceType,
    AlterConfigOp,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetAndMetadata,
    OffsetSpec,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from moldau.client.errors import (
    ErrorCode,
    KafkaError,
    KafkaTimeoutError,
)

pytestmark = pytest.mark.timeout(120)

NODE_ID = 5
BROKER_OVERRIDES = {"node.id": NODE_ID, "group.initial.rebalance.delay.ms": 0}


@pytest.fixture(scope="module")
def admin(module_broker):
    client = Admin({"bootstrap.servers": module_broker.bootstrap,
                    "default.api.timeout.ms": 20000})
    yield client
    client.close()


def code_of(call) -> ErrorCode:
    with pytest.raises(KafkaError) as info:
        call()
    return info.value.code


def test_topic_lifecycle(admin, module_broker):
    topic = unique("admin-topic")
    admin.create_topics([NewTopic(topic, 3, 1, {"retention.ms": "3600000"})])
    assert topic in admin.list_topics()
    assert "__consumer_offsets" not in admin.list_topics()
    description = admin.describe_topics([topic])[topic]
    assert [p.partition for p in description.partitions] == [0, 1, 2]
    assert all(p.leader_id == NODE_ID and p.replicas == (NODE_ID,) and p.isr == (NODE_ID,)
               for p in description.partitions)
    assert description.partitions[0].leader.port == module_broker.port
    assert description.topic_id is not None and description.replication_factor == 1
    # librdkafka sees the same topic.
    metadata = ck_admin(module_broker.bootstrap).list_topics(topic, timeout=10)
    assert len(metadata.topics[topic].partitions) == 3

    admin.create_partitions({topic: NewPartitions(5)})
    assert len(admin.describe_topics([topic])[topic].partitions) == 5
    assert code_of(lambda: admin.create_partitions({topic: 2})) is ErrorCode.invalid_partitions

    admin.delete_topics([topic])
    wait_until(lambda: topic not in admin.list_topics(), 10, "topic deleted")
    assert code_of(lambda: admin.describe_topics([topic])) is \
        ErrorCode.unknown_topic_or_partition


def test_topic_errors_are_typed(admin):
    topic = unique("admin-errors")
    admin.create_topic(topic, 1)
    assert code_of(lambda: admin.create_topic(topic, 1)) is ErrorCode.topic_already_exists
    with pytest.raises(KafkaError, match="already exists"):
        admin.create_topic(topic, 1)
    assert code_of(lambda: admin.create_topic("bad topic!", 1)) is \
        ErrorCode.invalid_topic_exception
    assert code_of(lambda: admin.create_topic(unique("t"), 0)) is ErrorCode.invalid_partitions
    assert code_of(lambda: admin.create_topic(unique("t"), 1, 3)) is \
        ErrorCode.invalid_replication_factor
    assert code_of(lambda: admin.create_topics([NewTopic(unique("t"), 1, 1,
                                                         {"no.such.config": "1"})])) is \
        ErrorCode.invalid_config
    assert code_of(lambda: admin.delete_topics([unique("missing")])) is \
        ErrorCode.unknown_topic_or_partition
    # validate_only creates nothing.
    name = unique("validate")
    admin.create_topics([NewTopic(name, 2, 1)], validate_only=True)
    assert name not in admin.list_topics()
    admin.delete_topics([topic])


def test_configs(admin, module_broker):
    topic = unique("admin-configs")
    admin.create_topic(topic, 1, configs={"retention.ms": "7200000"})
    resource = ConfigResource.topic(topic)
    entries = admin.describe_configs([resource])[resource]
    assert entries["retention.ms"].value == "7200000"
    assert entries["retention.ms"].source is ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert entries["cleanup.policy"].is_default
    admin.incremental_alter_configs({resource: [
        AlterConfigOp.set("cleanup.policy", "compact"), AlterConfigOp.delete("retention.ms")]})
    entries = admin.describe_configs([resource])[resource]
    assert entries["cleanup.policy"].value == "compact"
    assert entries["retention.ms"].source is not ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert code_of(lambda: admin.incremental_alter_configs(
        {resource: [AlterConfigOp.set("retention.ms", "soon")]})) is ErrorCode.invalid_config
    broker = admin.describe_configs([ConfigResource.broker(NODE_ID)])
    assert broker[ConfigResource.broker(NODE_ID)]["node.id"].value == str(NODE_ID)
    # librdkafka reads the change back.
    from confluent_kafka.admin import ConfigResource as CkResource
    from confluent_kafka.admin import ResourceType

    ck = CkResource(ResourceType.TOPIC, topic)
    seen = ck_admin(module_broker.bootstrap).describe_configs([ck])[ck].result(15)
    assert seen["cleanup.policy"].value == "compact"


def count_requests(admin: Admin) -> dict[int, int]:
    """Requests the admin client sends from now on, by API key."""
    counts: dict[int, int] = {}
    network = admin.async_admin.network
    send = network.request

    def counting(node, api_key, *args, **kwargs):
        counts[int(api_key)] = counts.get(int(api_key), 0) + 1
        return send(node, api_key, *args, **kwargs)

    network.request = counting
    return counts


def test_per_item_calls_answer_each_topic_from_one_request(module_broker):
    """Many topics per request, each with its own answer, as a controller that reconciles
    thousands of topics needs (CreateTopics, Metadata, DescribeConfigs,
    IncrementalAlterConfigs, CreatePartitions, DeleteTopics)."""
    with Admin({"bootstrap.servers": module_broker.bootstrap,
                "default.api.timeout.ms": 20000}) as admin:
        admin.list_topics()
        counts = count_requests(admin)
        names = [unique("each") for _ in range(20)]
        taken, bad = names[0], unique("each-bad")
        admin.create_topic(taken, 1)
        created = admin.create_topics_each(
            [NewTopic(n, 1, 1) for n in names] + [NewTopic(bad, 1, 1, {"no.such": "1"})])
        assert created[taken].code is ErrorCode.topic_already_exists
        assert all(created[n] is None for n in names[1:])
        assert created[bad].code is ErrorCode.invalid_config
        assert str(created[bad]) == f"Topic '{bad}': Unknown topic config name: no.such"
        missing = unique("each-missing")

        described = admin.describe_topics_each([*names, missing])
        assert all(len(described[n].partitions) == 1 for n in names)
        assert described[missing].code is ErrorCode.unknown_topic_or_partition
        assert str(described[missing]) == f"Topic '{missing}' does not exist"

        resources = [ConfigResource.topic(n) for n in [*names, missing]]
        configs = admin.describe_configs_each(resources)
        assert all(configs[r]["cleanup.policy"].value == "delete" for r in resources[:-1])
        assert configs[resources[-1]].code is ErrorCode.unknown_topic_or_partition

        altered = admin.incremental_alter_configs_each(
            {r: [AlterConfigOp.set("retention.ms", "60000")] for r in resources[:-2]}
            | {resources[-2]: [AlterConfigOp.set("retention.ms", "soon")]})
        assert all(altered[r] is None for r in resources[:-2])
        assert altered[resources[-2]].code is ErrorCode.invalid_config
        entries = admin.describe_configs([resources[0], resources[-2]])
        assert entries[resources[0]]["retention.ms"].value == "60000"
        assert entries[resources[-2]]["retention.ms"].source is ConfigSource.DEFAULT_CONFIG

        grown = admin.create_partitions_each({names[0]: 3, names[1]: 1, missing: 2})
        assert grown[names[0]] is None
        assert grown[names[1]].code is ErrorCode.invalid_partitions
        assert grown[missing].code is ErrorCode.unknown_topic_or_partition

        deleted = admin.delete_topics_each([*names, missing])
        assert all(deleted[n] is None for n in names)
        assert deleted[missing].code is ErrorCode.unknown_topic_or_partition
        # One request per call (metadata refreshes aside), however many topics it names.
        assert {key: counts.get(key, 0) for key in (19, 32, 37, 44, 20)} == \
            {19: 2, 32: 2, 37: 1, 44: 1, 20: 1}


def test_acls_need_an_authorizer_and_scram_credentials_do_not(admin):
    """This broker has no authorizer: the ACL APIs answer SECURITY_DISABLED, as Kafka's do,
    while SCRAM credentials are kept all the same (the ACL and SCRAM APIs against brokers
    with an authorizer: e2e/java/test_moldau_admin_acls_scram.py)."""
    binding = AclBinding(AclResourceType.TOPIC, unique("acl"), AclPatternType.LITERAL,
                         "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    assert code_of(lambda: admin.create_acls([binding])) is ErrorCode.security_disabled
    assert code_of(lambda: admin.describe_acls(AclBindingFilter())) is \
        ErrorCode.security_disabled
    assert code_of(lambda: admin.delete_acls([binding.to_filter()])) is \
        ErrorCode.security_disabled
    user = unique("scram")
    admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion(user, ScramMechanism.SCRAM_SHA_512, "secret")])
    assert admin.describe_user_scram_credentials([user]) == {
        user: [ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)]}
    admin.alter_user_scram_credentials([
        UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)])
    assert admin.describe_user_scram_credentials([user]) == {}


def test_cluster_and_log_dirs(admin, module_broker):
    cluster = admin.describe_cluster()
    assert [n.node_id for n in cluster.nodes] == [NODE_ID]
    assert cluster.controller is not None and cluster.controller.node_id == NODE_ID
    assert cluster.cluster_id
    topic = unique("admin-logdirs")
    admin.create_topic(topic, 2)
    kp_produce(module_broker.bootstrap, topic, make_records(10, seed=3))
    dirs = admin.describe_log_dirs()[NODE_ID]
    assert len(dirs) == 1
    (log_dir,) = dirs.values()
    assert log_dir.error is None and log_dir.total_bytes and log_dir.usable_bytes
    assert log_dir.replicas[TopicPartition(topic, 0)].size > 0
    assert log_dir.replicas[TopicPartition(topic, 1)].size == 0


def test_fenced_brokers_are_listed_only_when_asked_and_unknown_ids_not_unregistered(admin):
    with_fenced = admin.describe_cluster(include_fenced_brokers=True)
    assert [n.node_id for n in with_fenced.nodes] == [NODE_ID]
    assert with_fenced.fenced == frozenset()
    with pytest.raises(KafkaError) as refused:
        admin.unregister_broker(NODE_ID + 1)
    assert refused.value.code is ErrorCode.broker_id_not_registered
    assert str(refused.value) == f"Broker ID {NODE_ID + 1} is not currently registered"


def test_describe_metadata_quorum_names_the_leader_and_voters(admin):
    quorum = admin.describe_metadata_quorum()
    assert quorum.leader_id == NODE_ID
    assert quorum.leader_epoch >= 1
    assert [v.replica_id for v in quorum.voters] == [NODE_ID]
    assert quorum.voters[0].log_end_offset >= quorum.high_watermark > 0


def test_delete_records_and_list_offsets(admin, module_broker):
    topic = unique("admin-records")
    admin.create_topic(topic, 1)
    records = make_records(30, seed=4)
    kp_produce(module_broker.bootstrap, topic, records)
    tp = TopicPartition(topic, 0)
    assert admin.list_offsets({tp: OffsetSpec.LATEST})[tp].offset == 30
    assert admin.list_offsets({tp: OffsetSpec.EARLIEST})[tp].offset == 0
    assert admin.list_offsets({tp: records[12].timestamp})[tp].offset == 12
    assert admin.delete_records({tp: 10}) == {tp: 10}
    assert kp_offsets(module_broker.bootstrap, topic) == (10, 30)
    assert admin.list_offsets({tp: OffsetSpec.EARLIEST})[tp].offset == 10
    assert len(kp_consume_all(module_broker.bootstrap, topic)) == 20
    assert code_of(lambda: admin.delete_records({tp: 99})) is ErrorCode.offset_out_of_range
    assert code_of(lambda: admin.delete_records({TopicPartition(topic, 7): 1})) is \
        ErrorCode.unknown_topic_or_partition


def test_groups_and_offsets(admin, module_broker):
    from kafka import KafkaConsumer

    bootstrap = module_broker.bootstrap
    topic = unique("admin-groups")
    group = unique("admin-group")
    admin.create_topic(topic, 2)
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        for i in range(20):
            producer.send(topic, b"%d" % i, partition=i % 2)
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             client_id="admin-test-consumer")
    try:
        # Polls long enough for a whole join: kafka-python 3.0.12 drops the assignment of a
        # SyncGroup answered after its poll() timed out mid-rebalance.
        wait_until(lambda: consumer.poll(3000) or consumer.assignment(), 30, "assignment")
        from kafka import TopicPartition as KpPartition

        consumer.commit({KpPartition(topic, 0): _kp_offset(5),
                         KpPartition(topic, 1): _kp_offset(7)})
        listing = {g.group_id: g for g in admin.list_groups()}
        assert listing[group].protocol_type == "consumer"
        description = admin.describe_groups([group])[group]
        assert description.state == "Stable" and description.protocol_type == "consumer"
        (member,) = description.members
        assert member.client_id == "admin-test-consumer"
        assert sorted(member.assignment) == [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        assert description.coordinator.node_id == NODE_ID
        assert admin.list_group_offsets(group) == {
            TopicPartition(topic, 0): OffsetAndMetadata(5, "", None),
            TopicPartition(topic, 1): OffsetAndMetadata(7, "", None)}
        # Offsets of a group with members cannot be changed, nor can it be deleted.
        assert code_of(lambda: admin.alter_group_offsets(
            group, {TopicPartition(topic, 0): 1})) is ErrorCode.unknown_member_id
        assert code_of(lambda: admin.delete_groups([group])) is ErrorCode.non_empty_group
    finally:
        consumer.close(autocommit=False)
    wait_until(lambda: admin.describe_groups([group])[group].state == "Empty", 30, "empty")
    admin.alter_group_offsets(group, {TopicPartition(topic, 0): OffsetAndMetadata(3, "m")})
    offsets = admin.list_group_offsets(group, [TopicPartition(topic, 0)])
    assert offsets == {TopicPartition(topic, 0): OffsetAndMetadata(3, "m", None)}
    admin.delete_groups([group])
    assert group not in {g.group_id for g in admin.list_groups()}
    assert code_of(lambda: admin.describe_groups([group])) is ErrorCode.group_id_not_found
    assert code_of(lambda: admin.delete_groups([group])) is ErrorCode.group_id_not_found


def _kp_offset(offset: int):
    from kafka.structs import OffsetAndMetadata as KpOffset

    return KpOffset(offset, "", -1)


def test_async_admin(module_broker):
    async def main() -> None:
        async with AsyncAdmin(bootstrap_servers=module_broker.bootstrap) as admin:
            topic = unique("async-admin")
            await admin.create_topic(topic, 2)
            described = await admin.describe_topics([topic])
            assert len(described[topic].partitions) == 2
            await admin.delete_topics([topic])
    asyncio.run(main())


def test_unreachable_cluster_times_out_with_the_cause():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
        with Admin({"bootstrap.servers": address}) as admin:
            started = time.monotonic()
            with pytest.raises(KafkaTimeoutError, match="Connect call failed|refused"):
                admin.list_topics(timeout=1.0)
            assert time.monotonic() - started < 3

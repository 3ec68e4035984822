"""Admin APIs through confluent-kafka's AdminClient and kafka-python's KafkaAdminClient."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from e2e.support import (
    ck_admin,
    ck_create_topic,
    kp_admin,
    kp_consume_all,
    kp_create_topic,
    kp_offsets,
    kp_produce,
    make_records,
    unique,
    wait_until,
)

pytestmark = pytest.mark.timeout(120)

NODE_ID = 7
MESSAGE_MAX_BYTES = 2097152
BROKER_OVERRIDES = {"node.id": NODE_ID, "message.max.bytes": MESSAGE_MAX_BYTES}

# Kafka error codes.
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40


def ck_error(future) -> int:
    """The Kafka error code a confluent admin future fails with (0 if it succeeds)."""
    try:
        future.result(timeout=20)
    except KafkaException as exc:
        return exc.args[0].code()
    return 0


def source(entry: ConfigEntry) -> ConfigSource:
    """The binding hands the source over as a plain int or as the enum, depending on the call."""
    return entry.source if isinstance(entry.source, ConfigSource) else ConfigSource(entry.source)


def ck_topics(bootstrap: str) -> set[str]:
    """Every topic name. (kafka-python asks without auto-creation; librdkafka's own listing of
    all topics is covered in test_confluent.)"""
    admin = kp_admin(bootstrap)
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def ck_describe(bootstrap: str, restype: ResourceType, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(restype, name)
    futures = ck_admin(bootstrap).describe_configs([resource], request_timeout=15)
    return futures[resource].result(timeout=20)


def kp_create_errors(bootstrap: str, topics: dict[str, dict]) -> dict[str, int]:
    admin = kp_admin(bootstrap)
    try:
        result = admin.create_topics(topics, raise_errors=False)
    finally:
        admin.close()
    return {t["name"]: t["error_code"] for t in result["topics"]}


# --------------------------------------------------------------------------- create


def test_validate_only_does_not_create(module_broker):
    bootstrap = module_broker.bootstrap
    ck_topic, kp_topic = unique("adm-validate-ck"), unique("adm-validate-kp")
    futures = ck_admin(bootstrap).create_topics([NewTopic(ck_topic, 3, 1)], validate_only=True,
                                                request_timeout=15)
    assert ck_error(futures[ck_topic]) == 0
    assert kp_create_errors(bootstrap, {kp_topic: {"num_partitions": 2}}) == {kp_topic: 0}

    admin = kp_admin(bootstrap)
    try:
        admin.create_topics({kp_topic + "-v": {"num_partitions": 2}}, validate_only=True)
    finally:
        admin.close()
    assert ck_topic not in ck_topics(bootstrap)
    assert kp_topic + "-v" not in ck_topics(bootstrap)
    # Validation still reports errors.
    futures = ck_admin(bootstrap).create_topics([NewTopic("bad/name", 1, 1)],
                                                validate_only=True, request_timeout=15)
    assert ck_error(futures["bad/name"]) == INVALID_TOPIC_EXCEPTION


def test_configs_on_create_and_their_sources(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("adm-configs")
    ck_create_topic(bootstrap, topic, configs={"retention.ms": "3600000",
                                               "cleanup.policy": "compact"})
    entries = ck_describe(bootstrap, ResourceType.TOPIC, topic)

    def show(name: str) -> tuple:
        entry = entries[name]
        return entry.value, source(entry), entry.is_default

    assert show("retention.ms") == ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG, False)
    assert show("cleanup.policy") == ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG, False)
    assert show("segment.bytes") == ("1073741824", ConfigSource.DEFAULT_CONFIG, True)
    # A topic default that comes from the broker's static configuration.
    assert show("max.message.bytes") == (str(MESSAGE_MAX_BYTES),
                                         ConfigSource.STATIC_BROKER_CONFIG, False)
    # Kafka lists every synonym: the static value, then the broker default, both named
    # message.max.bytes (a name-keyed view such as confluent's keeps only one of them).
    assert raw_synonyms(module_broker.bootstrap, topic, "max.message.bytes") == [
        ("message.max.bytes", str(MESSAGE_MAX_BYTES), 4), ("message.max.bytes", "1048588", 5)]


def raw_synonyms(bootstrap: str, topic: str, name: str) -> list[tuple[str, str | None, int]]:
    """DescribeConfigs v4 with synonyms, decoded with kio's schema classes."""
    import socket
    import struct

    from kio.serial import entity_reader

    from moldau.protocol.build import build
    from moldau.protocol.messages import encode_request, request_class, response_class

    body = build(request_class(32, 4), {"resources": [
        {"resource_type": 2, "resource_name": topic, "configuration_keys": [name]}],
        "include_synonyms": True})
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(encode_request(32, 4, 1, "e2e", body))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        frame = sock.recv(size, socket.MSG_WAITALL)
    response, _ = entity_reader(response_class(32, 4))(frame, 5)
    [entry] = response.results[0].configs
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def test_describe_broker_configs(module_broker):
    entries = ck_describe(module_broker.bootstrap, ResourceType.BROKER, str(NODE_ID))
    assert entries["message.max.bytes"].value == str(MESSAGE_MAX_BYTES)
    assert source(entries["message.max.bytes"]) == ConfigSource.STATIC_BROKER_CONFIG
    assert entries["num.partitions"].value == "1"
    assert source(entries["num.partitions"]) == ConfigSource.DEFAULT_CONFIG
    assert entries["node.id"].value == str(NODE_ID)


def test_kafka_python_describe_configs_modified_only(module_broker):
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType

    bootstrap = module_broker.bootstrap
    topic = unique("adm-kp-configs")
    kp_create_topic(bootstrap, topic, configs={"retention.bytes": "123456789",
                                               "segment.ms": "3600000"})
    admin = kp_admin(bootstrap)
    try:
        modified = admin.describe_configs([KpResource(ConfigResourceType.TOPIC, topic)])
        everything = admin.describe_configs([KpResource(ConfigResourceType.TOPIC, topic)],
                                            config_filter="all")
    finally:
        admin.close()
    configs = modified["topic"][topic]
    assert {name: (c["value"], c["config_source"]) for name, c in configs.items()} == {
        "retention.bytes": ("123456789", "DYNAMIC_TOPIC_CONFIG"),
        "segment.ms": ("3600000", "DYNAMIC_TOPIC_CONFIG"),
    }
    every = everything["topic"][topic]
    assert every["cleanup.policy"]["value"] == "delete"
    assert every["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"


def test_topic_already_exists(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("adm-exists")
    ck_create_topic(bootstrap, topic)
    futures = ck_admin(bootstrap).create_topics([NewTopic(topic, 1, 1)], request_timeout=15)
    assert ck_error(futures[topic]) == TOPIC_ALREADY_EXISTS
    assert kp_create_errors(bootstrap, {topic: {"num_partitions": 1}}) == {
        topic: TOPIC_ALREADY_EXISTS}


@pytest.mark.parametrize("name", ["bad/name", "..", ".", "x" * 250, "with space", "bad:colon",
                                  "tab\tname", ""])
def test_invalid_topic_names(module_broker, name):
    assert kp_create_errors(module_broker.bootstrap, {name: {"num_partitions": 1}}) == {
        name: INVALID_TOPIC_EXCEPTION}
    if name:
        futures = ck_admin(module_broker.bootstrap).create_topics([NewTopic(name, 1, 1)],
                                                                  request_timeout=15)
        assert ck_error(futures[name]) == INVALID_TOPIC_EXCEPTION
    assert name not in ck_topics(module_broker.bootstrap)


def test_longest_valid_topic_name(module_broker):
    name = unique("long")
    name += "x" * (249 - len(name))
    assert kp_create_errors(module_broker.bootstrap, {name: {"num_partitions": 1}}) == {name: 0}
    assert name in ck_topics(module_broker.bootstrap)


def test_colliding_topic_names(module_broker):
    """'.' and '_' collide in metric names, so Kafka refuses a topic that differs only so."""
    base = unique("adm.collide")
    ck_create_topic(module_broker.bootstrap, base)
    clash = base.replace(".", "_")
    assert kp_create_errors(module_broker.bootstrap, {clash: {"num_partitions": 1}}) == {
        clash: INVALID_TOPIC_EXCEPTION}


def test_invalid_partition_counts_and_replication(module_broker):
    bootstrap = module_broker.bootstrap
    zero, rf3, unknown_broker = unique("adm-p0"), unique("adm-rf3"), unique("adm-assign-bad")
    errors = kp_create_errors(bootstrap, {
        zero: {"num_partitions": 0, "replication_factor": 1},
        rf3: {"num_partitions": 1, "replication_factor": 3},
        unknown_broker: {"assignments": {0: [99]}},
    })
    assert errors == {zero: INVALID_PARTITIONS, rf3: INVALID_REPLICATION_FACTOR,
                      unknown_broker: INVALID_REPLICA_ASSIGNMENT}
    assert not {zero, rf3, unknown_broker} & ck_topics(bootstrap)


def test_explicit_replica_assignment(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("adm-assign")
    futures = ck_admin(bootstrap).create_topics(
        [NewTopic(topic, 3, replica_assignment=[[NODE_ID], [NODE_ID], [NODE_ID]])],
        request_timeout=15)
    assert ck_error(futures[topic]) == 0
    partitions = ck_admin(bootstrap).list_topics(topic, timeout=15).topics[topic].partitions
    assert sorted(partitions) == [0, 1, 2]
    assert all(p.leader == NODE_ID and p.replicas == [NODE_ID] for p in partitions.values())


# --------------------------------------------------------------------------- alter configs


def test_incremental_alter_configs(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("adm-incr")
    ck_create_topic(bootstrap, topic, configs={"retention.ms": "3600000",
                                               "cleanup.policy": "compact"})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("max.message.bytes", "65536", incremental_operation=AlterConfigOpType.SET),
    ])
    futures = ck_admin(bootstrap).incremental_alter_configs([resource], request_timeout=15)
    assert ck_error(futures[resource]) == 0
    entries = ck_describe(bootstrap, ResourceType.TOPIC, topic)
    assert (entries["retention.ms"].value, source(entries["retention.ms"])) == (
        "7200000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert (entries["max.message.bytes"].value, source(entries["max.message.bytes"])) == (
        "65536", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert (entries["cleanup.policy"].value, source(entries["cleanup.policy"])) == (
        "delete", ConfigSource.DEFAULT_CONFIG)

    # APPEND to a list starts from its current (default) value.
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    futures = ck_admin(bootstrap).incremental_alter_configs([resource], request_timeout=15)
    assert ck_error(futures[resource]) == 0
    assert ck_describe(bootstrap, ResourceType.TOPIC, topic)["cleanup.policy"].value == (
        "delete,compact")


@pytest.mark.parametrize("name,value", [("retention.ms", "abc"), ("no.such.config", "1"),
                                        ("cleanup.policy", "sometimes"),
                                        ("min.cleanable.dirty.ratio", "2.5")])
def test_incremental_alter_configs_rejects_bad_values(module_broker, name, value):
    bootstrap = module_broker.bootstrap
    topic = unique("adm-badcfg")
    ck_create_topic(bootstrap, topic)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    futures = ck_admin(bootstrap).incremental_alter_configs([resource], request_timeout=15)
    assert ck_error(futures[resource]) == INVALID_CONFIG
    entries = ck_describe(bootstrap, ResourceType.TOPIC, topic)
    assert all(source(e) != ConfigSource.DYNAMIC_TOPIC_CONFIG for e in entries.values())


def test_create_with_bad_config_is_invalid_config(module_broker):
    topic = unique("adm-createbad")
    errors = kp_create_errors(module_broker.bootstrap, {
        topic: {"num_partitions": 1, "configs": {"retention.ms": "soon"}}})
    assert errors == {topic: INVALID_CONFIG}
    assert topic not in ck_topics(module_broker.bootstrap)


def test_alter_configs_replaces_the_whole_set(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("adm-alter")
    ck_create_topic(bootstrap, topic, configs={"retention.ms": "3600000",
                                               "segment.ms": "600000"})
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"max.message.bytes": "500000"})
    futures = ck_admin(bootstrap).alter_configs([resource], request_timeout=15)
    assert ck_error(futures[resource]) == 0
    entries = ck_describe(bootstrap, ResourceType.TOPIC, topic)
    assert (entries["max.message.bytes"].value, source(entries["max.message.bytes"])) == (
        "500000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    # AlterConfigs (not incremental) drops every override it does not name.
    assert entries["retention.ms"].value == "604800000"
    assert source(entries["retention.ms"]) == ConfigSource.DEFAULT_CONFIG
    assert source(entries["segment.ms"]) == ConfigSource.DEFAULT_CONFIG


def test_kafka_python_alter_configs(module_broker):
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType

    bootstrap = module_broker.bootstrap
    topic = unique("adm-kp-alter")
    kp_create_topic(bootstrap, topic, configs={"retention.ms": "3600000"})
    admin = kp_admin(bootstrap)
    try:
        result = admin.alter_configs([KpResource(ConfigResourceType.TOPIC, topic,
                                                 {"segment.bytes": "2097152"})])
        assert result == {"topic": {topic: "OK"}}
        described = admin.describe_configs([KpResource(ConfigResourceType.TOPIC, topic)])
    finally:
        admin.close()
    assert {name: c["value"] for name, c in described["topic"][topic].items()} == {
        "retention.ms": "3600000", "segment.bytes": "2097152"}


# --------------------------------------------------------------------------- partitions, delete


def test_create_partitions(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("adm-parts")
    ck_create_topic(bootstrap, topic, partitions=2)
    admin = ck_admin(bootstrap)
    assert ck_error(admin.create_partitions([NewPartitions(topic, 4)],
                                            request_timeout=15)[topic]) == 0
    assert sorted(admin.list_topics(topic, timeout=15).topics[topic].partitions) == [0, 1, 2, 3]
    for count in (3, 4):
        futures = admin.create_partitions([NewPartitions(topic, count)], request_timeout=15)
        assert ck_error(futures[topic]) == INVALID_PARTITIONS, f"count {count}"
    # validate_only changes nothing.
    futures = admin.create_partitions([NewPartitions(topic, 8)], validate_only=True,
                                      request_timeout=15)
    assert ck_error(futures[topic]) == 0
    assert len(admin.list_topics(topic, timeout=15).topics[topic].partitions) == 4

    from kafka.errors import InvalidPartitionsError

    kadmin = kp_admin(bootstrap)
    try:
        kadmin.create_partitions({topic: 6})
        with pytest.raises(InvalidPartitionsError):
            kadmin.create_partitions({topic: 5})
    finally:
        kadmin.close()
    assert len(admin.list_topics(topic, timeout=15).topics[topic].partitions) == 6

    # The new partitions take writes.
    records = make_records(6, partitions=6, seed=8)
    assert kp_produce(bootstrap, topic, records) == [0] * 6
    assert len(kp_consume_all(bootstrap, topic, range(6))) == 6


def test_delete_topics_and_recreate(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("adm-delete")
    ck_create_topic(bootstrap, topic, partitions=2)
    kp_produce(bootstrap, topic, make_records(10, partitions=2))
    admin = ck_admin(bootstrap)
    assert ck_error(admin.delete_topics([topic], request_timeout=15)[topic]) == 0
    assert topic not in ck_topics(bootstrap)
    assert ck_error(admin.delete_topics([topic], request_timeout=15)[topic]) == (
        UNKNOWN_TOPIC_OR_PARTITION)

    # The same name again is a new, empty topic.
    def recreated() -> bool:
        futures = admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=15)
        return ck_error(futures[topic]) == 0

    wait_until(recreated, 15, "re-creating a deleted topic")
    assert kp_offsets(bootstrap, topic) == (0, 0)


def test_unknown_topic_errors(module_broker):
    from kafka.errors import UnknownTopicOrPartitionError

    bootstrap = module_broker.bootstrap
    missing = unique("adm-missing")
    admin = ck_admin(bootstrap)
    futures = admin.create_partitions([NewPartitions(missing, 3)], request_timeout=15)
    assert ck_error(futures[missing]) == UNKNOWN_TOPIC_OR_PARTITION
    resource = ConfigResource(ResourceType.TOPIC, missing)
    assert ck_error(admin.describe_configs([resource], request_timeout=15)[resource]) == (
        UNKNOWN_TOPIC_OR_PARTITION)
    kadmin = kp_admin(bootstrap)
    try:
        with pytest.raises(UnknownTopicOrPartitionError):
            kadmin.delete_topics([missing])
        (described,) = kadmin.describe_topics([missing])
    finally:
        kadmin.close()
    assert described["error_code"] == UNKNOWN_TOPIC_OR_PARTITION
    # Describing did not auto-create it.
    assert missing not in ck_topics(bootstrap)


# --------------------------------------------------------------------------- cluster, log dirs


def test_describe_cluster(module_broker):
    bootstrap = module_broker.bootstrap
    result = ck_admin(bootstrap).describe_cluster(request_timeout=15).result(timeout=20)
    assert result.cluster_id
    assert [(n.id, n.host, n.port) for n in result.nodes] == [
        (NODE_ID, "127.0.0.1", module_broker.port)]
    assert result.controller is not None and result.controller.id == NODE_ID
    assert ck_admin(bootstrap).list_topics(timeout=15).cluster_id == result.cluster_id

    admin = kp_admin(bootstrap)
    try:
        described = admin.describe_cluster()
    finally:
        admin.close()
    assert described["cluster_id"] == result.cluster_id
    assert [(b["broker_id"], b["host"], b["port"]) for b in described["brokers"]] == [
        (NODE_ID, "127.0.0.1", module_broker.port)]


def test_describe_log_dirs(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("adm-logdirs")
    kp_create_topic(bootstrap, topic, partitions=2)
    kp_produce(bootstrap, topic, make_records(20, partitions=1))
    admin = kp_admin(bootstrap)
    try:
        result = admin.describe_log_dirs()
    finally:
        admin.close()
    assert [r["broker"] for r in result] == [NODE_ID]
    (log_dir,) = result[0]["log_dirs"]
    assert log_dir["error_code"] == 0
    assert os.path.realpath(log_dir["log_dir"]) == os.path.realpath(module_broker.log_dir)
    topics = {t["name"]: t for t in log_dir["topics"]}
    assert topic in topics
    sizes = {p["partition_index"]: p["partition_size"] for p in topics[topic]["partitions"]}
    assert set(sizes) == {0, 1}
    assert sizes[0] > 20 and sizes[1] == 0


# --------------------------------------------------------------------------- delete records


def test_delete_records_moves_the_low_watermark(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("adm-delrec")
    ck_create_topic(bootstrap, topic)
    kp_produce(bootstrap, topic, make_records(10, seed=12))
    admin = ck_admin(bootstrap)
    tp = TopicPartition(topic, 0)

    def delete_before(offset: int):
        futures = admin.delete_records([TopicPartition(topic, 0, offset)], request_timeout=15)
        return next(iter(futures.values()))

    assert delete_before(4).result(timeout=20).low_watermark == 4
    earliest = admin.list_offsets({tp: OffsetSpec.earliest()}, request_timeout=15)
    assert next(iter(earliest.values())).result(timeout=20).offset == 4
    assert [r.offset for r in kp_consume_all(bootstrap, topic)] == list(range(4, 10))

    # Deleting below the low watermark changes nothing; past the high watermark is an error.
    assert delete_before(2).result(timeout=20).low_watermark == 4
    assert ck_error(delete_before(50)) == OFFSET_OUT_OF_RANGE
    # -1 means "up to the high watermark".
    assert delete_before(-1).result(timeout=20).low_watermark == 10
    assert kp_offsets(bootstrap, topic) == (10, 10)
    # Writes continue at the high watermark.
    assert kp_produce(bootstrap, topic, make_records(2, seed=13)) == [10, 11]


def test_kafka_python_delete_records(module_broker):
    from kafka import TopicPartition as KpTopicPartition

    bootstrap = module_broker.bootstrap
    topic = unique("adm-kp-delrec")
    kp_create_topic(bootstrap, topic)
    kp_produce(bootstrap, topic, make_records(8, seed=14))
    admin = kp_admin(bootstrap)
    try:
        result = admin.delete_records({KpTopicPartition(topic, 0): 5})
    finally:
        admin.close()
    assert result[KpTopicPartition(topic, 0)]["low_watermark"] == 5
    assert kp_offsets(bootstrap, topic) == (5, 8)

"""Dynamic broker configs through confluent-kafka's admin client, against real broker
processes: a cluster-wide default set while the broker runs changes what topics without
their own override do (retention deletes segments it kept before), survives a restart, is
seen by every broker of a cluster, and a setting that needs a restart is refused with
Kafka's error."""

from __future__ import annotations

import random

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from e2e.kafka_dist import kafka_tool
from e2e.support import (
    Rec,
    ck_admin,
    kp_create_topic,
    kp_offsets,
    kp_produce,
    now_ms,
    unique,
    wait_until,
)

pytestmark = pytest.mark.timeout(240)

SEGMENT = 1048576  # the smallest segment size Kafka 4.0 accepts
WEEK_MS = 604800000
INVALID_CONFIG = 40
INVALID_REQUEST = 42


def alter_broker(bootstrap: str, name: str, **settings: str | None) -> None:
    """Change a BROKER resource (keys with _ for .): a value sets, None deletes. A broker id
    goes through confluent-kafka's incremental_alter_configs; the cluster default ("")
    through Kafka's kafka-configs, as neither Python client accepts its empty name."""
    changes = {key.replace("_", "."): value for key, value in settings.items()}
    if not name:
        added = ",".join(f"{key}={value}" for key, value in changes.items() if value)
        deleted = ",".join(key for key, value in changes.items() if value is None)
        kafka_tool("kafka-configs", "--bootstrap-server", bootstrap, "--entity-type",
                   "brokers", "--entity-default", "--alter",
                   *(["--add-config", added] if added else []),
                   *(["--delete-config", deleted] if deleted else []))
        return
    entries = [ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET
                           if value is not None else AlterConfigOpType.DELETE)
               for key, value in changes.items()]
    resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=entries)
    ck_admin(bootstrap).incremental_alter_configs([resource], request_timeout=15)[
        resource].result(timeout=20)


def refusal(bootstrap: str, name: str, key: str, value: str) -> tuple[int, str]:
    resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
    future = ck_admin(bootstrap).incremental_alter_configs([resource], request_timeout=15)[
        resource]
    with pytest.raises(KafkaException) as info:
        future.result(timeout=20)
    error = info.value.args[0]
    return error.code(), error.str()


def describe(bootstrap: str, kind: ResourceType, name: str
             ) -> dict[str, tuple[str | None, ConfigSource]]:
    """Every entry as (value, source); the binding gives the source as an int or an enum."""
    resource = ConfigResource(kind, name)
    entries = ck_admin(bootstrap).describe_configs([resource], request_timeout=15)[
        resource].result(timeout=20)
    return {key: (entry.value, ConfigSource(entry.source)) for key, entry in entries.items()}


def described(bootstrap: str, kind: ResourceType, name: str, key: str
              ) -> tuple[str | None, ConfigSource]:
    return describe(bootstrap, kind, name)[key]


def old_and_fresh_records() -> list[Rec]:
    """Records ten minutes old across several segments, then a few fresh ones."""
    rng = random.Random(7)
    base = now_ms() - 600_000
    old = [Rec(0, b"%06d" % i, rng.randbytes(10_000), (), base + i) for i in range(300)]
    fresh = [Rec(0, b"fresh-%d" % i, b"new value %d" % i, (), now_ms()) for i in range(5)]
    return old + fresh


def test_cluster_default_applies_live_and_survives_a_restart(broker_factory):
    broker = broker_factory({"log.retention.check.interval.ms": 300})
    bootstrap = broker.bootstrap
    topic, pinned = unique("dyn-retention"), unique("dyn-pinned")
    kp_create_topic(bootstrap, topic, configs={"segment.bytes": str(SEGMENT)})
    # Its own retention.ms: the cluster default must not touch it.
    kp_create_topic(bootstrap, pinned, configs={"segment.bytes": str(SEGMENT),
                                                "retention.ms": str(WEEK_MS)})
    records = old_and_fresh_records()
    for name in (topic, pinned):
        kp_produce(bootstrap, name, records, linger_ms=5)
    assert kp_offsets(bootstrap, topic) == (0, 305)  # a week's retention keeps everything
    assert described(bootstrap, ResourceType.TOPIC, topic, "retention.ms") == (
        str(WEEK_MS), ConfigSource.DEFAULT_CONFIG)

    alter_broker(bootstrap, "", log_retention_ms="60000")
    start, end = wait_until(lambda: (lambda o: o if o[0] > 0 else None)(
        kp_offsets(bootstrap, topic)), 30, "the new default retention to delete segments")
    assert end == 305 and start <= 300, "the segment holding fresh records must stay"
    assert kp_offsets(bootstrap, pinned) == (0, 305)
    assert described(bootstrap, ResourceType.TOPIC, topic, "retention.ms") == (
        "60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert described(bootstrap, ResourceType.TOPIC, pinned, "retention.ms") == (
        str(WEEK_MS), ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert described(bootstrap, ResourceType.BROKER, "1", "log.retention.ms") == (
        "60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)

    broker.restart()
    assert described(bootstrap, ResourceType.BROKER, "1", "log.retention.ms") == (
        "60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    later = unique("dyn-later")
    kp_create_topic(bootstrap, later)
    assert described(bootstrap, ResourceType.TOPIC, later, "retention.ms") == (
        "60000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)

    # This broker's own value wins over the cluster default; deleting both restores the file.
    alter_broker(bootstrap, "1", log_retention_ms="120000")
    assert described(bootstrap, ResourceType.TOPIC, later, "retention.ms") == (
        "120000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    alter_broker(bootstrap, "1", log_retention_ms=None)
    alter_broker(bootstrap, "", log_retention_ms=None)
    assert described(bootstrap, ResourceType.TOPIC, later, "retention.ms") == (
        str(WEEK_MS), ConfigSource.DEFAULT_CONFIG)


def test_settings_that_need_a_restart_are_refused(broker):
    bootstrap = broker.bootstrap
    # (The cluster default's refusals, through kafka-configs: e2e/java/test_java_broker_configs.)
    assert refusal(bootstrap, "1", "log.dirs", "/tmp/elsewhere") == (
        INVALID_REQUEST, "Cannot update these configs dynamically: Set(log.dirs)")
    assert refusal(bootstrap, "1", "num.partitions", "3") == (
        INVALID_REQUEST, "Cannot update these configs dynamically: Set(num.partitions)")
    assert refusal(bootstrap, "1", "log.retention.ms", "soon") == (
        INVALID_REQUEST,
        "Invalid value soon for configuration log.retention.ms: Not a number of type LONG")
    assert refusal(bootstrap, "1", "log.retention.hourz", "1") == (
        INVALID_CONFIG, "Unknown broker config name: log.retention.hourz")
    assert described(bootstrap, ResourceType.BROKER, "1", "log.dirs")[1] \
        is ConfigSource.STATIC_BROKER_CONFIG
    dynamic = {key for key, (_, source) in describe(bootstrap, ResourceType.BROKER, "1").items()
               if source in (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                             ConfigSource.DYNAMIC_BROKER_CONFIG)}
    assert dynamic == set()


def test_every_broker_of_a_cluster_follows(cluster):
    bootstrap = cluster.bootstrap_servers
    alter_broker(bootstrap, "", log_segment_bytes=str(2 * SEGMENT))
    alter_broker(bootstrap, "2", min_insync_replicas="2")
    for node in cluster.nodes:
        name = str(node.node_id)
        wait_until(lambda name=name: described(
            bootstrap, ResourceType.BROKER, name, "log.segment.bytes") == (
            str(2 * SEGMENT), ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG), 30,
            f"broker {name} to apply the cluster default")
        expected = ("2", ConfigSource.DYNAMIC_BROKER_CONFIG) if name == "2" \
            else ("1", ConfigSource.DEFAULT_CONFIG)
        wait_until(lambda name=name, expected=expected: described(
            bootstrap, ResourceType.BROKER, name, "min.insync.replicas") == expected, 30,
            f"broker {name}'s min.insync.replicas to be {expected}")

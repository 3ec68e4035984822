"""kafka-topics and kafka-configs, Apache Kafka's own tools, against Moldau and against Kafka.

The expected output is what the tools print against Apache Kafka, with only topic ids (random
on any broker) normalised.
"""

from __future__ import annotations

import time

import pytest

from e2e.java.oracle import BROKER_SETTINGS, Checks, Target, normalise_topic_ids
from e2e.kafka_dist import ToolResult, kafka_tool
from e2e.support import kp_create_topic, unique

pytestmark = pytest.mark.timeout(240)
BROKER_OVERRIDES = BROKER_SETTINGS


def topics(target: Target, *args: str, check: bool = True) -> ToolResult:
    return kafka_tool("kafka-topics", "--bootstrap-server", target.bootstrap, *args,
                      check=check)


def configs(target: Target, *args: str, check: bool = True) -> ToolResult:
    return kafka_tool("kafka-configs", "--bootstrap-server", target.bootstrap, *args,
                      check=check)


def describe_lines(topic: str, partitions: int, configs_text: str) -> list[str]:
    """`kafka-topics --describe` of a single-replica topic on node 1."""
    head = (f"Topic: {topic}\tTopicId: <id>\tPartitionCount: {partitions}\t"
            f"ReplicationFactor: 1\tConfigs: {configs_text}")
    return [head] + [f"\tTopic: {topic}\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1\t"
                     f"Elr: \tLastKnownElr: " for p in range(partitions)]


def describe(target: Target, topic: str) -> list[str]:
    return normalise_topic_ids(topics(target, "--describe", "--topic", topic).stdout
                               ).splitlines()


def first_error_line(result: ToolResult) -> str:
    assert result.returncode == 1, result.describe()
    return result.stdout.splitlines()[0] if result.stdout.strip() else result.stderr


def test_create_list_describe_alter_delete(target):
    topic = unique("java-topics")
    overrides = "cleanup.policy=compact,retention.ms=3600000"
    with Checks() as check:
        created = topics(target, "--create", "--topic", topic, "--partitions", "3",
                         "--replication-factor", "1", "--config", "retention.ms=3600000",
                         "--config", "cleanup.policy=compact")
        check.equal("--create output", created.stdout, f"Created topic {topic}.\n")
        check.true("--list shows the new topic", topic in topics(target, "--list").lines)
        check.equal("--describe after --create", describe(target, topic),
                    describe_lines(topic, 3, overrides))

        altered = topics(target, "--alter", "--topic", topic, "--partitions", "5")
        check.equal("--alter --partitions output", altered.stdout, "")
        check.equal("--describe after --alter", describe(target, topic),
                    describe_lines(topic, 5, overrides))

        deleted = topics(target, "--delete", "--topic", topic)
        check.equal("--delete output", deleted.stdout, "")
        # Deletion completes asynchronously on Kafka: give the metadata a moment.
        for _ in range(10):
            listed = topics(target, "--list").lines
            if topic not in listed:
                break
            time.sleep(0.5)
        check.true("--list after --delete no longer shows the topic", topic not in listed)


def test_describe_topic_without_overrides(target):
    topic = unique("java-plain")
    topics(target, "--create", "--topic", topic, "--partitions", "2")
    assert describe(target, topic) == describe_lines(topic, 2, "")


def test_topic_errors(target):
    topic = unique("java-topic-errors")
    missing = unique("java-missing")
    topics(target, "--create", "--topic", topic, "--partitions", "3")
    prefix = "Error while executing topic command : "
    with Checks() as check:
        again = topics(target, "--create", "--topic", topic, "--partitions", "1", check=False)
        check.equal("--create of an existing topic", first_error_line(again),
                    f"{prefix}Topic '{topic}' already exists.")
        check.true("TopicExistsException", "errors.TopicExistsException" in again.stderr,
                   again.stderr)

        absent = topics(target, "--describe", "--topic", missing, check=False)
        check.equal("--describe of a missing topic", first_error_line(absent),
                    f"{prefix}Topic '{missing}' does not exist as expected")

        shrink = topics(target, "--alter", "--topic", topic, "--partitions", "2", check=False)
        check.true("InvalidPartitionsException",
                   "errors.InvalidPartitionsException" in shrink.stderr, shrink.stderr)
        check.equal("--alter to fewer partitions", first_error_line(shrink),
                    f"{prefix}The topic {topic} currently has 3 partition(s); 2 would not be "
                    f"an increase.")
        same = topics(target, "--alter", "--topic", topic, "--partitions", "3", check=False)
        check.equal("--alter to the same partition count", first_error_line(same),
                    f"{prefix}Topic already has 3 partition(s).")
        check.equal("partitions after the refused --alter", len(describe(target, topic)), 4)


def test_configs_alter_and_describe(target):
    topic = unique("java-configs")
    kp_create_topic(target.bootstrap, topic)
    entity = ["--entity-type", "topics", "--entity-name", topic]
    header = f"Dynamic configs for topic {topic} are:"
    max_bytes = ("  max.message.bytes=2000000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
                 "max.message.bytes=2000000, DEFAULT_CONFIG:message.max.bytes=1048588}")
    # log.retention.ms has no default of its own (log.retention.hours has), so no
    # DEFAULT_CONFIG synonym follows the topic's value.
    retention = ("  retention.ms=86400000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
                 "retention.ms=86400000}")
    done = [f"Completed updating config for topic {topic}."]
    with Checks() as check:
        check.equal("--describe of a new topic", configs(target, "--describe", *entity).lines,
                    [header])
        added = configs(target, "--alter", *entity, "--add-config",
                        "retention.ms=86400000,max.message.bytes=2000000")
        check.equal("--alter --add-config output", added.lines, done)
        check.equal("--describe after --add-config",
                    configs(target, "--describe", *entity).lines,
                    [header, max_bytes, retention])

        removed = configs(target, "--alter", *entity, "--delete-config", "retention.ms")
        check.equal("--alter --delete-config output", removed.lines, done)
        check.equal("--describe after --delete-config",
                    configs(target, "--describe", *entity).lines, [header, max_bytes])


def test_configs_describe_all(target):
    """Every topic config a Kafka 4.0 broker reports, with its default and synonyms."""
    topic = unique("java-configs-all")
    kp_create_topic(target.bootstrap, topic, configs={"cleanup.policy": "compact"})
    result = configs(target, "--describe", "--all", "--entity-type", "topics",
                     "--entity-name", topic)
    want = [f"All configs for topic {topic} are:"] + [f"  {line}" for line in ALL_CONFIGS]
    with Checks() as check:
        check.equal("--describe --all", result.lines, want)


def test_config_errors(target):
    topic = unique("java-config-errors")
    kp_create_topic(target.bootstrap, topic)
    entity = ["--entity-type", "topics", "--entity-name", topic]
    cause = "Caused by: org.apache.kafka.common.errors.InvalidConfigurationException: "
    with Checks() as check:
        unknown = configs(target, "--alter", *entity, "--add-config", "no.such.config=1",
                          check=False)
        check.equal("exit code for an unknown config", unknown.returncode, 1)
        check.equal("cause for an unknown config", caused_by(unknown),
                    f"{cause}Unknown topic config name: no.such.config")

        invalid = configs(target, "--alter", *entity, "--add-config", "retention.ms=abc",
                          check=False)
        check.equal("exit code for an invalid value", invalid.returncode, 1)
        check.equal("cause for an invalid value", caused_by(invalid),
                    f"{cause}Invalid value abc for configuration retention.ms: Not a number "
                    f"of type LONG")

        check.equal("configs after the refused requests",
                    configs(target, "--describe", *entity).lines,
                    [f"Dynamic configs for topic {topic} are:"])


def caused_by(result: ToolResult) -> str:
    """The root cause line of the stack trace a failing tool prints."""
    causes = [line for line in (result.stdout + result.stderr).splitlines()
              if line.startswith("Caused by: ")]
    return causes[-1] if causes else result.describe()


# `kafka-configs --describe --all` for a topic with cleanup.policy=compact on Apache Kafka
# 4.x (metadata version 4.0), sorted by name as the tool prints it.
ALL_CONFIGS = [
    "cleanup.policy=compact sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
    "cleanup.policy=compact, DEFAULT_CONFIG:log.cleanup.policy=delete}",
    "compression.gzip.level=-1 sensitive=false synonyms={DEFAULT_CONFIG:"
    "compression.gzip.level=-1}",
    "compression.lz4.level=9 sensitive=false synonyms={DEFAULT_CONFIG:compression.lz4.level=9}",
    "compression.type=producer sensitive=false synonyms={DEFAULT_CONFIG:"
    "compression.type=producer}",
    "compression.zstd.level=3 sensitive=false synonyms={DEFAULT_CONFIG:"
    "compression.zstd.level=3}",
    "delete.retention.ms=86400000 sensitive=false synonyms={DEFAULT_CONFIG:"
    "log.cleaner.delete.retention.ms=86400000}",
    "file.delete.delay.ms=60000 sensitive=false synonyms={DEFAULT_CONFIG:"
    "log.segment.delete.delay.ms=60000}",
    "flush.messages=9223372036854775807 sensitive=false synonyms={DEFAULT_CONFIG:"
    "log.flush.interval.messages=9223372036854775807}",
    "flush.ms=9223372036854775807 sensitive=false synonyms={}",
    "follower.replication.throttled.replicas= sensitive=false synonyms={}",
    "index.interval.bytes=4096 sensitive=false synonyms={DEFAULT_CONFIG:"
    "log.index.interval.bytes=4096}",
    "leader.replication.throttled.replicas= sensitive=false synonyms={}",
    "local.retention.bytes=-2 sensitive=false synonyms={DEFAULT_CONFIG:"
    "log.local.retention.bytes=-2}",
    "local.retention.ms=-2 sensitive=false synonyms={DEFAULT_CONFIG:log.local.retention.ms=-2}",
    "max.compaction.lag.ms=9223372036854775807 sensitive=false synonyms={DEFAULT_CONFIG:"
    "log.cleaner.max.compaction.lag.ms=9223372036854775807}",
    "max.message.bytes=1048588 sensitive=false synonyms={DEFAULT_CONFIG:"
    "message.max.bytes=1048588}",
    "message.timestamp.after.max.ms=3600000 sensitive=false synonyms={DEFAULT_CONFIG:"
    "log.message.timestamp.after.max.ms=3600000}",
    "message.timestamp.before.max.ms=9223372036854775807 sensitive=false synonyms="
    "{DEFAULT_CONFIG:log.message.timestamp.before.max.ms=9223372036854775807}",
    "message.timestamp.type=CreateTime sensitive=false synonyms={DEFAULT_CONFIG:"
    "log.message.timestamp.type=CreateTime}",
    "min.cleanable.dirty.ratio=0.5 sensitive=false synonyms={DEFAULT_CONFIG:"
    "log.cleaner.min.cleanable.ratio=0.5}",
    "min.compaction.lag.ms=0 sensitive=false synonyms={DEFAULT_CONFIG:"
    "log.cleaner.min.compaction.lag.ms=0}",
    "min.insync.replicas=1 sensitive=false synonyms={DEFAULT_CONFIG:min.insync.replicas=1}",
    "preallocate=false sensitive=false synonyms={DEFAULT_CONFIG:log.preallocate=false}",
    "remote.log.copy.disable=false sensitive=false synonyms={}",
    "remote.log.delete.on.disable=false sensitive=false synonyms={}",
    "remote.storage.enable=false sensitive=false synonyms={}",
    "retention.bytes=-1 sensitive=false synonyms={DEFAULT_CONFIG:log.retention.bytes=-1}",
    "retention.ms=604800000 sensitive=false synonyms={}",
    "segment.bytes=1073741824 sensitive=false synonyms={DEFAULT_CONFIG:"
    "log.segment.bytes=1073741824}",
    "segment.index.bytes=10485760 sensitive=false synonyms={DEFAULT_CONFIG:"
    "log.index.size.max.bytes=10485760}",
    "segment.jitter.ms=0 sensitive=false synonyms={}",
    "segment.ms=604800000 sensitive=false synonyms={}",
    "unclean.leader.election.enable=false sensitive=false synonyms={DEFAULT_CONFIG:"
    "unclean.leader.election.enable=false}",
]

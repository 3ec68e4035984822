"""What the clients do while the proxy records: produce with every codec, idempotent and
transactional; consume in groups; administer topics, configs, groups, ACLs and SCRAM users; and
authenticate with SASL PLAIN and SCRAM. Each step uses one real client library or one of
Kafka's own tools, through the proxy's address.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from e2e.kafka_dist import kafka_tool

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
USER, PASSWORD = "alice", "alice-secret"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              f'username="{USER}" password="{PASSWORD}" user_{USER}="{PASSWORD}";')


@dataclass(frozen=True)
class Addresses:
    plaintext: str  # the proxy in front of the PLAINTEXT listener
    sasl: str  # the proxy in front of the SASL_PLAINTEXT listener


def records(tag: str, count: int = 6) -> list[tuple[bytes | None, bytes | None,
                                                     list[tuple[str, bytes]]]]:
    """A few compressible records: keys, a null key, a tombstone, headers."""
    out = []
    for i in range(count):
        key = None if i == 1 else f"{tag}-key-{i}".encode()
        value = None if i == 2 else (f"{tag} value {i} " * 4).encode()
        headers = [("source", tag.encode()), ("seq", str(i).encode())] if i % 2 == 0 else []
        out.append((key, value, headers))
    return out


# --------------------------------------------------------------------------- confluent-kafka


def confluent(addr: Addresses) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": addr.plaintext})
    topic = "ck-topic"
    admin.create_topics([NewTopic(topic, 2, 1, config={"retention.ms": "3600000"})],
                        request_timeout=15)[topic].result(20)
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(20)
    admin.describe_configs([ConfigResource("topic", topic)])
    for codec in CODECS:
        producer = Producer({"bootstrap.servers": addr.plaintext, "enable.idempotence": True,
                             "compression.codec": codec, "linger.ms": 20})
        for key, value, headers in records(f"ck-{codec}"):
            producer.produce(topic, key=key, value=value, headers=headers or None,
                             partition=0)
        _flushed(producer.flush(30), f"confluent-kafka {codec}")
    _confluent_transactions(addr.plaintext, topic)
    consumer = Consumer({"bootstrap.servers": addr.plaintext, "group.id": "ck-group",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    _poll_until(lambda: consumer.poll(1.0), 10)
    consumer.commit(asynchronous=False)
    consumer.close()
    admin.list_consumer_groups().result(20)
    admin.describe_consumer_groups(["ck-group"])["ck-group"].result(20)
    admin.delete_topics(["ck-topic"], request_timeout=15)["ck-topic"].result(20)
    for mechanism in ("PLAIN", *SCRAM_MECHANISMS):
        producer = Producer({"bootstrap.servers": addr.sasl, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": mechanism, "sasl.username": USER,
                             "sasl.password": PASSWORD})
        producer.produce("sasl-topic", value=f"over {mechanism}".encode())
        _flushed(producer.flush(30), f"confluent-kafka over {mechanism}")


def _confluent_transactions(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Consumer, Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ck-txn",
                         "compression.codec": "lz4", "linger.ms": 20})
    producer.init_transactions(30)
    for commit in (True, False):
        producer.begin_transaction()
        for key, value, headers in records("ck-txn", 4):
            producer.produce(topic, key=key, value=value, headers=headers or None,
                             partition=1)
        if commit:
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ck-txn-group"})
            producer.send_offsets_to_transaction([], consumer.consumer_group_metadata())
            consumer.close()
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


# ------------------------------------------------------------------------------ kafka-python


def kafka_python(addr: Addresses) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=addr.plaintext, request_timeout_ms=15000)
    topic = "kp-topic"
    admin.create_topics([NewTopic(topic, 2, 1)])
    admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    for codec in CODECS:
        producer = KafkaProducer(bootstrap_servers=addr.plaintext, linger_ms=20,
                                 compression_type=None if codec == "none" else codec,
                                 enable_idempotence=True)
        for key, value, headers in records(f"kp-{codec}"):
            producer.send(topic, key=key, value=value, headers=headers, partition=0)
        producer.flush(30)
        producer.close(10)
    consumer = KafkaConsumer(topic, bootstrap_servers=addr.plaintext, group_id="kp-group",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             request_timeout_ms=15000)
    _poll_until(lambda: consumer.poll(timeout_ms=1000), 10)
    consumer.commit()
    consumer.close()
    admin.list_groups()
    admin.describe_groups(["kp-group"])
    admin.list_group_offsets("kp-group")
    admin.describe_cluster()
    admin.describe_topics([topic])
    admin.close()
    for mechanism in ("PLAIN", *SCRAM_MECHANISMS):
        producer = KafkaProducer(bootstrap_servers=addr.sasl, security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism=mechanism, sasl_plain_username=USER,
                                 sasl_plain_password=PASSWORD)
        producer.send("sasl-topic", value=f"over {mechanism}".encode()).get(30)
        producer.close(10)


# ---------------------------------------------------------------------------------- aiokafka


def aiokafka(addr: Addresses) -> None:
    asyncio.run(_aiokafka(addr))


async def _aiokafka(addr: Addresses) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=addr.plaintext, request_timeout_ms=15000)
    await admin.start()
    topic = "aio-topic"
    try:
        await admin.create_topics([NewTopic(topic, 2, 1)])
    finally:
        await admin.close()
    for codec in CODECS:
        producer = AIOKafkaProducer(bootstrap_servers=addr.plaintext, linger_ms=20,
                                    compression_type=None if codec == "none" else codec,
                                    enable_idempotence=True)
        await producer.start()
        try:
            for key, value, headers in records(f"aio-{codec}"):
                await producer.send(topic, key=key, value=value, headers=headers, partition=0)
            await producer.flush()
        finally:
            await producer.stop()
    producer = AIOKafkaProducer(bootstrap_servers=addr.plaintext, transactional_id="aio-txn",
                                compression_type="zstd")
    await producer.start()
    try:
        for commit in (True, False):
            await producer.begin_transaction()
            for key, value, headers in records("aio-txn", 4):
                await producer.send(topic, key=key, value=value, headers=headers, partition=1)
            await (producer.commit_transaction() if commit else producer.abort_transaction())
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=addr.plaintext, group_id="aio-group",
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                isolation_level="read_committed")
    await consumer.start()
    try:
        await consumer.getmany(timeout_ms=5000)
        await consumer.commit()
    finally:
        await consumer.stop()


# -------------------------------------------------------------------------------- Java tools


def java_tools(addr: Addresses) -> None:
    server = ["--bootstrap-server", addr.plaintext]
    topic = "java-topic"
    kafka_tool("kafka-topics", *server, "--create", "--topic", topic, "--partitions", "2")
    kafka_tool("kafka-topics", *server, "--alter", "--topic", topic, "--partitions", "3")
    kafka_tool("kafka-topics", *server, "--describe", "--topic", topic)
    kafka_tool("kafka-configs", *server, "--alter", "--entity-type", "topics", "--entity-name",
               topic, "--add-config", "retention.ms=7200000")
    kafka_tool("kafka-configs", *server, "--describe", "--entity-type", "topics",
               "--entity-name", topic)
    for codec in CODECS:
        lines = "".join(f"{codec}-key-{i}\t{codec} java value {i} {codec} java value\n"
                        for i in range(6))
        kafka_tool("kafka-console-producer", *server, "--topic", topic, "--compression-codec",
                   codec, "--property", "parse.key=true", stdin=lines)
    kafka_tool("kafka-producer-perf-test", "--topic", topic, "--num-records", "20",
               "--record-size", "40", "--throughput", "-1", "--transactional-id", "java-txn",
               "--transaction-duration-ms", "100", "--producer-props",
               f"bootstrap.servers={addr.plaintext}", "compression.type=gzip",
               "max.block.ms=30000")
    kafka_tool("kafka-console-consumer", *server, "--topic", topic, "--group", "java-group",
               "--from-beginning", "--max-messages", "10", "--timeout-ms", "30000")
    kafka_tool("kafka-consumer-groups", *server, "--list")
    kafka_tool("kafka-consumer-groups", *server, "--describe", "--group", "java-group")
    kafka_tool("kafka-consumer-groups", *server, "--reset-offsets", "--group", "java-group",
               "--topic", topic, "--to-earliest", "--execute")
    kafka_tool("kafka-get-offsets", *server, "--topic", topic)
    kafka_tool("kafka-log-dirs", *server, "--describe", "--topic-list", topic)
    kafka_tool("kafka-transactions", *server, "list")
    kafka_tool("kafka-transactions", *server, "describe-producers", "--topic", topic,
               "--partition", "0")
    kafka_tool("kafka-metadata-quorum", *server, "describe", "--status")
    # No authorizer here: the broker answers SECURITY_DISABLED, the requests are what count.
    acl = ["--allow-principal", f"User:{USER}", "--operation", "Read", "--topic", topic]
    kafka_tool("kafka-acls", *server, "--add", *acl, check=False)
    kafka_tool("kafka-acls", *server, "--list", check=False)
    kafka_tool("kafka-acls", *server, "--remove", "--force", *acl, check=False)
    kafka_tool("kafka-leader-election", *server, "--election-type", "preferred",
               "--all-topic-partitions", check=False)
    with tempfile.TemporaryDirectory() as scratch:
        offsets = Path(scratch) / "offsets.json"
        offsets.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0,
                                                       "offset": 2}], "version": 1}))
        kafka_tool("kafka-delete-records", *server, "--offset-json-file", str(offsets))
        for mechanism in SCRAM_MECHANISMS:
            kafka_tool("kafka-configs", *server, "--alter", "--entity-type", "users",
                       "--entity-name", "bob", "--add-config",
                       f"{mechanism}=[iterations=4096,password=bob-secret]")
        kafka_tool("kafka-configs", *server, "--describe", "--entity-type", "users")
        client_config = Path(scratch) / "client.properties"
        client_config.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
            'required username="bob" password="bob-secret";\n')
        kafka_tool("kafka-console-producer", "--bootstrap-server", addr.sasl, "--topic",
                   "sasl-topic", "--producer.config", str(client_config),
                   stdin="java over scram\n")
    kafka_tool("kafka-topics", *server, "--delete", "--topic", topic)


def add_scram_users(addr: Addresses) -> None:
    """SCRAM credentials for the SASL steps (AlterUserScramCredentials, as Kafka's tool
    sends it)."""
    for mechanism in SCRAM_MECHANISMS:
        kafka_tool("kafka-configs", "--bootstrap-server", addr.plaintext, "--alter",
                   "--entity-type", "users", "--entity-name", USER, "--add-config",
                   f"{mechanism}=[iterations=4096,password={PASSWORD}]")


STEPS: tuple[tuple[str, Callable[[Addresses], None]], ...] = (
    ("scram users", add_scram_users),
    ("confluent-kafka", confluent),
    ("kafka-python", kafka_python),
    ("aiokafka", aiokafka),
    ("java tools", java_tools),
)


def _flushed(left: int, what: str) -> None:
    if left:
        raise RuntimeError(f"{what}: {left} messages not delivered")


def _poll_until(poll: Callable[[], object], seconds: float) -> None:
    """Poll until something arrives or `seconds` pass (a group join takes a few polls)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if poll():
            return

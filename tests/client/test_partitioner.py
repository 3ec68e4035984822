"""The default partitioner: murmur2 as Kafka computes it, the partition a key maps to
(checked against kafka-python and, on a real broker, against librdkafka's murmur2_random
partitioner, which is the Java client's), and sticky placement of keyless records."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from moldau.client.metadata import Cluster, PartitionMetadata, TopicMetadata
from moldau.client.producer.partitioner import (
    DefaultPartitioner,
    StickyPartitionCache,
    murmur2,
    partition_for_key,
)
from moldau.client.types import Node

# Values Kafka's own tests assert for Utils.murmur2.
KAFKA_VALUES = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("data,expected", KAFKA_VALUES.items())
def test_murmur2_matches_kafka(data, expected):
    assert murmur2(data) == expected


def test_murmur2_matches_kafka_python_for_random_keys():
    rng = random.Random(7)
    for _ in range(20000):
        key = rng.randbytes(rng.randint(0, 64))
        # kafka-python returns the same 32 bits as an unsigned value.
        assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key), key


def test_murmur2_accepts_bytearray_and_memoryview():
    assert murmur2(bytearray(b"foobar")) == murmur2(memoryview(b"foobar")) == -790332482


def cluster(partitions: int, without_leader: tuple[int, ...] = ()) -> Cluster:
    parts = {i: PartitionMetadata("t", i, -1 if i in without_leader else 1, 0, (1,), (1,))
             for i in range(partitions)}
    return Cluster([Node(1, "h", 1)], {"t": TopicMetadata("t", None, False, parts)})


def test_keyed_records_use_positive_murmur2_modulo_partitions():
    partitioner = DefaultPartitioner()
    view = cluster(12)
    for key in (b"a", b"user-42", b"\xff" * 9, b""):
        expected = (murmur2(key) & 0x7FFFFFFF) % 12
        assert partitioner.partition("t", key, 12, view) == expected == partition_for_key(key, 12)


def test_sticky_partition_holds_until_a_new_batch_is_needed():
    sticky = StickyPartitionCache()
    view = cluster(8)
    first = sticky.partition("t", view)
    assert all(sticky.partition("t", view) == first for _ in range(50))
    moved = sticky.next_partition("t", view, first)
    assert moved != first
    assert sticky.partition("t", view) == moved
    # A stale switch request (for a partition no longer current) changes nothing.
    assert sticky.next_partition("t", view, first) == moved


def test_sticky_prefers_partitions_with_a_leader():
    sticky = StickyPartitionCache()
    view = cluster(4, without_leader=(0, 1, 2))
    assert sticky.partition("t", view) == 3
    choices = Counter(sticky.next_partition("t", view, sticky.partition("t", view))
                      for _ in range(20))
    assert set(choices) == {3}


def test_ignore_keys_makes_keyed_records_sticky():
    partitioner = DefaultPartitioner(ignore_keys=True)
    view = cluster(16)
    chosen = {partitioner.partition("t", b"key-%d" % i, 16, view) for i in range(100)}
    assert len(chosen) == 1


@pytest.fixture
def real_broker(tmp_path: Path):
    from e2e.conftest import Broker

    instance = Broker(tmp_path / "broker").start()
    yield instance
    instance.close()


@pytest.mark.timeout(90)
def test_same_partitions_as_librdkafka_murmur2_random(real_broker):
    """Records keyed by librdkafka's Java-compatible partitioner land where ours would put
    them."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    partitions = 7
    topic = "murmur-check"
    admin = AdminClient({"bootstrap.servers": real_broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(20)
    rng = random.Random(3)
    keys = [b"k%d" % i for i in range(200)] + [rng.randbytes(rng.randint(1, 30))
                                               for _ in range(200)]
    producer = Producer({"bootstrap.servers": real_broker.bootstrap,
                         "partitioner": "murmur2_random", "linger.ms": 5})
    placed: dict[bytes, int] = {}

    def delivered(err, msg) -> None:
        assert err is None, err
        placed[msg.key()] = msg.partition()

    for key in keys:
        producer.produce(topic, value=b"v", key=key, on_delivery=delivered)
    assert producer.flush(30) == 0
    assert len(placed) == len(set(keys))
    mismatches = {key: (p, partition_for_key(key, partitions)) for key, p in placed.items()
                  if partition_for_key(key, partitions) != p}
    assert not mismatches
    # And the broker really holds them there.
    consumer = Consumer({"bootstrap.servers": real_broker.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    try:
        for partition in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 15)
            assert high - low == sum(1 for p in placed.values() if p == partition)
    finally:
        consumer.close()

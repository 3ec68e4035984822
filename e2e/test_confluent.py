"""confluent-kafka (librdkafka) against the broker: admin, idempotent produce, consume back."""

from __future__ import annotations

import time

import pytest

from e2e.support import (
    CODEC_IDS,
    CODECS,
    Rec,
    aio_produce,
    assert_codec,
    assert_idempotent_batches,
    assert_records_equal,
    ck_admin,
    ck_consume_all,
    ck_create_topic,
    ck_offsets_for_times,
    ck_produce,
    expected_offset_for_time,
    make_records,
    now_ms,
    run,
    stored_batches,
    unique,
    with_offsets,
)

pytestmark = pytest.mark.timeout(120)


def test_admin_creates_topic_visible_in_metadata(module_broker):
    topic = unique("ck-admin")
    ck_create_topic(module_broker.bootstrap, topic, partitions=3)
    metadata = ck_admin(module_broker.bootstrap).list_topics(topic, timeout=15)
    assert metadata.topics[topic].error is None
    partitions = metadata.topics[topic].partitions
    assert sorted(partitions) == [0, 1, 2]
    for partition in partitions.values():
        assert partition.leader in metadata.brokers
        assert partition.replicas == [partition.leader] == partition.isrs


def test_list_all_topics(module_broker):
    topics = {unique("ck-list-a"), unique("ck-list-b")}
    for topic in topics:
        ck_create_topic(module_broker.bootstrap, topic, partitions=2)
    metadata = ck_admin(module_broker.bootstrap).list_topics(timeout=15)
    assert topics <= set(metadata.topics)
    assert all(len(metadata.topics[t].partitions) == 2 for t in topics)
    assert [b.id for b in metadata.brokers.values()] == [1]


# librdkafka compresses with lz4 only when the broker advertises FindCoordinator v0, which it
# takes as the sign of a broker new enough for lz4; Kafka 4.0 advertises it.
@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_produce_and_consume_every_codec(module_broker, codec):
    bootstrap = module_broker.bootstrap
    topic = unique(f"ck-{codec}")
    ck_create_topic(bootstrap, topic, partitions=3)
    records = make_records(90, partitions=3, seed=200 + CODEC_IDS[codec])
    expected = with_offsets(records)

    offsets = ck_produce(bootstrap, topic, records, **{"enable.idempotence": True,
                                                       "compression.type": codec,
                                                       "linger.ms": 20})
    assert offsets == [r.offset for r in expected]
    assert_records_equal(ck_consume_all(bootstrap, topic, range(3)), expected)
    for partition in range(3):
        batches = stored_batches(bootstrap, topic, partition)
        assert_idempotent_batches(batches)
        assert_codec(batches, codec)


def test_offsets_for_times(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("ck-times")
    ck_create_topic(bootstrap, topic, partitions=2)
    records = make_records(30, partitions=2, seed=301)
    expected = with_offsets(records)
    ck_produce(bootstrap, topic, records)
    first, last = records[0].timestamp, records[-1].timestamp
    for ts in (first - 5000, first, first + 7_300, records[17].timestamp, last, last + 1):
        got = ck_offsets_for_times(bootstrap, topic, {0: ts, 1: ts})
        want = {p: expected_offset_for_time(expected, p, ts) for p in (0, 1)}
        assert got == want, f"timestamp {ts} (first {first})"


def test_list_offsets_earliest_latest_and_max_timestamp(module_broker):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    bootstrap = module_broker.bootstrap
    topic = unique("ck-maxts")
    ck_create_topic(bootstrap, topic)
    base = now_ms() - 100_000
    stamps = [base + 10, base + 50, base + 20, base + 90, base + 30]  # the maximum at offset 3
    records = [Rec(0, b"k%d" % i, b"v%d" % i, (), ts) for i, ts in enumerate(stamps)]
    ck_produce(bootstrap, topic, records, **{"linger.ms": 0})
    tp = TopicPartition(topic, 0)
    admin = ck_admin(bootstrap)
    answers = {}
    for name, spec in (("earliest", OffsetSpec.earliest()), ("latest", OffsetSpec.latest()),
                       ("max", OffsetSpec.max_timestamp()),
                       ("time", OffsetSpec.for_timestamp(base + 25))):
        futures = admin.list_offsets({tp: spec}, request_timeout=15)
        result = next(iter(futures.values())).result(timeout=20)
        answers[name] = (result.offset, result.timestamp)
    assert answers["earliest"][0] == 0
    assert answers["latest"][0] == 5
    assert answers["max"] == (3, base + 90)
    assert answers["time"] == (1, base + 50)  # the first record with timestamp >= base + 25


def test_log_append_time_topic_stamps_records(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("ck-appendtime")
    ck_create_topic(bootstrap, topic, configs={"message.timestamp.type": "LogAppendTime"})
    records = make_records(10, seed=7, ts_base=now_ms() - 1_000_000)
    before = now_ms()
    ck_produce(bootstrap, topic, records)
    after = now_ms()
    messages = ck_consume_all(bootstrap, topic, raw=True)
    assert [m.value() for m in messages] == [r.value for r in records]
    for msg in messages:
        kind, ts = msg.timestamp()
        assert kind == 2, f"timestamp type {kind} (want LogAppendTime)"
        assert before - 1000 <= ts <= after + 1000, (before, ts, after)


def test_reads_what_aiokafka_wrote(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("ck-cross")
    ck_create_topic(bootstrap, topic, partitions=2)
    records = make_records(40, partitions=2, seed=44)
    run(aio_produce(bootstrap, topic, records, enable_idempotence=True,
                    compression_type="snappy"))
    assert_records_equal(ck_consume_all(bootstrap, topic, range(2)), with_offsets(records))


def test_acks_variants(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("ck-acks")
    ck_create_topic(bootstrap, topic)
    written = []
    for acks in ("0", "1", "all"):
        records = make_records(5, seed=len(written) + 60,
                               ts_base=now_ms() - 60_000 + len(written) * 10)
        settings = {"acks": acks, "enable.idempotence": acks == "all"}
        ck_produce(bootstrap, topic, records, **settings)
        written.extend(records)
    # acks=0 gives no offsets back, so wait for all of them to be visible.
    deadline = time.monotonic() + 10
    while True:
        got = ck_consume_all(bootstrap, topic)
        if len(got) >= len(written) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert_records_equal(got, with_offsets(written))

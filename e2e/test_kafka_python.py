"""kafka-python against the broker: admin, idempotent produce with every codec, consume back."""

from __future__ import annotations

import random

import pytest

from e2e.support import (
    CODEC_IDS,
    CODECS,
    Rec,
    assert_codec,
    assert_idempotent_batches,
    assert_records_equal,
    ck_produce,
    expected_offset_for_time,
    kp_admin,
    kp_consume_all,
    kp_create_topic,
    kp_offsets_for_times,
    kp_produce,
    make_records,
    now_ms,
    stored_batches,
    unique,
    with_offsets,
)

pytestmark = pytest.mark.timeout(120)


def test_admin_creates_topic_visible_in_metadata(module_broker):
    topic = unique("kp-admin")
    kp_create_topic(module_broker.bootstrap, topic, partitions=4)
    admin = kp_admin(module_broker.bootstrap)
    try:
        assert topic in admin.list_topics()
        (described,) = admin.describe_topics([topic])
    finally:
        admin.close()
    assert described["error_code"] == 0
    partitions = sorted(described["partitions"], key=lambda p: p["partition_index"])
    assert [p["partition_index"] for p in partitions] == [0, 1, 2, 3]
    for p in partitions:
        assert p["leader_id"] >= 0 and p["replica_nodes"] == [p["leader_id"]]


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_produce_and_consume_every_codec(module_broker, codec):
    bootstrap = module_broker.bootstrap
    topic = unique(f"kp-{codec}")
    kp_create_topic(bootstrap, topic, partitions=3)
    records = make_records(90, partitions=3, seed=CODEC_IDS[codec])
    expected = with_offsets(records)

    offsets = kp_produce(bootstrap, topic, records, enable_idempotence=True, linger_ms=20,
                         compression_type=None if codec == "none" else codec)
    assert offsets == [r.offset for r in expected]

    assert_records_equal(kp_consume_all(bootstrap, topic, range(3)), expected)
    for partition in range(3):
        batches = stored_batches(bootstrap, topic, partition)
        assert_idempotent_batches(batches)
        assert_codec(batches, codec)


def test_idempotence_is_the_default(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("kp-default")
    kp_create_topic(bootstrap, topic)
    records = make_records(10)
    kp_produce(bootstrap, topic, records)  # kafka-python 3 enables idempotence by default
    assert_idempotent_batches(stored_batches(bootstrap, topic))
    assert_records_equal(kp_consume_all(bootstrap, topic), with_offsets(records))


def test_offsets_for_times(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("kp-times")
    kp_create_topic(bootstrap, topic, partitions=2)
    records = make_records(40, partitions=2, seed=9)
    expected = with_offsets(records)
    kp_produce(bootstrap, topic, records)
    first, last = records[0].timestamp, records[-1].timestamp
    queries = [first - 60_000, first, first + 10_500, records[21].timestamp, last, last + 1]
    for ts in queries:
        got = kp_offsets_for_times(bootstrap, topic, {0: ts, 1: ts})
        want = {p: expected_offset_for_time(expected, p, ts) for p in (0, 1)}
        assert got == want, f"timestamp {ts} (first {first})"


def test_reads_what_librdkafka_wrote(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("kp-cross")
    kp_create_topic(bootstrap, topic, partitions=2)
    records = make_records(50, partitions=2, seed=21)
    ck_produce(bootstrap, topic, records, **{"compression.type": "lz4"})
    assert_records_equal(kp_consume_all(bootstrap, topic, range(2)), with_offsets(records))


def test_consume_from_the_middle(module_broker):
    from kafka import TopicPartition

    from e2e.support import kp_consumer

    bootstrap = module_broker.bootstrap
    topic = unique("kp-seek")
    kp_create_topic(bootstrap, topic)
    records = with_offsets(make_records(25, seed=4, max_value=200))
    kp_produce(bootstrap, topic, records, compression_type="gzip", batch_size=1024,
               linger_ms=50)
    assert any(b.record_count > 1 for b in stored_batches(bootstrap, topic))
    consumer = kp_consumer(bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 17)  # inside a compressed batch: earlier records are skipped
        got = []
        for _ in range(40):
            for msgs in consumer.poll(timeout_ms=250).values():
                got.extend(msgs)
            if len(got) >= 8:
                break
    finally:
        consumer.close(autocommit=False)
    assert [m.offset for m in got] == list(range(17, 25))
    assert [m.value for m in got] == [r.value for r in records[17:]]


def test_out_of_range_position_resets_to_earliest(module_broker):
    from kafka import TopicPartition

    from e2e.support import kp_consumer

    bootstrap = module_broker.bootstrap
    topic = unique("kp-reset")
    kp_create_topic(bootstrap, topic)
    records = with_offsets(make_records(12, seed=15))
    kp_produce(bootstrap, topic, records)
    consumer = kp_consumer(bootstrap)  # auto_offset_reset="earliest"
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 1000)  # the broker answers OFFSET_OUT_OF_RANGE
        got = []
        for _ in range(40):
            for msgs in consumer.poll(timeout_ms=250).values():
                got.extend(msgs)
            if len(got) >= 12:
                break
    finally:
        consumer.close(autocommit=False)
    assert [m.offset for m in got] == list(range(12))


def test_records_larger_than_fetch_limits_still_arrive(module_broker):
    """KIP-74: the first batch is returned even when it exceeds the fetch size limits."""
    bootstrap = module_broker.bootstrap
    topic = unique("kp-bigfetch")
    kp_create_topic(bootstrap, topic)
    rng = random.Random(16)
    records = [Rec(0, b"big-%d" % i, rng.randbytes(50_000), (("n", b"%d" % i),), now_ms() + i)
               for i in range(6)]
    kp_produce(bootstrap, topic, records, max_request_size=2_000_000)
    got = kp_consume_all(bootstrap, topic, max_partition_fetch_bytes=10_000,
                         fetch_max_bytes=10_000)
    assert_records_equal(got, with_offsets(records))


def test_consume_from_a_timestamp(module_broker):
    from kafka import TopicPartition

    from e2e.support import kp_consumer

    bootstrap = module_broker.bootstrap
    topic = unique("kp-fromtime")
    kp_create_topic(bootstrap, topic)
    records = with_offsets(make_records(30, seed=17))
    kp_produce(bootstrap, topic, records, compression_type="snappy", linger_ms=20)
    consumer = kp_consumer(bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        found = consumer.offsets_for_times({tp: records[11].timestamp - 1}, timeout_ms=15000)
        assert (found[tp].offset, found[tp].timestamp) == (11, records[11].timestamp)
        consumer.assign([tp])
        consumer.seek(tp, found[tp].offset)
        got = []
        for _ in range(40):
            for msgs in consumer.poll(timeout_ms=250).values():
                got.extend(msgs)
            if len(got) >= 19:
                break
    finally:
        consumer.close(autocommit=False)
    assert [(m.offset, m.value, m.timestamp) for m in got] == [
        (r.offset, r.value, r.timestamp) for r in records[11:]]


def test_concurrent_producers_to_one_partition(module_broker):
    import threading

    from kafka import KafkaProducer

    bootstrap = module_broker.bootstrap
    topic = unique("kp-concurrent")
    kp_create_topic(bootstrap, topic)
    errors: list[BaseException] = []
    acked: dict[bytes, int] = {}

    def run_producer(name: bytes, codec: str | None) -> None:
        try:
            producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec,
                                     linger_ms=2, request_timeout_ms=15000)
            futures = [(b"%s-%04d" % (name, i),
                        producer.send(topic, value=b"%s-%04d" % (name, i), partition=0))
                       for i in range(300)]
            producer.flush(30)
            for value, future in futures:
                acked[value] = future.get(30).offset
            producer.close(timeout=10)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run_producer, args=(b"p%d" % n, codec))
               for n, codec in enumerate([None, "gzip", "lz4", "zstd"])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    stored = kp_consume_all(bootstrap, topic)
    assert [r.offset for r in stored] == list(range(1200))
    assert {r.value: r.offset for r in stored} == acked
    for n in range(4):  # each producer's records keep their order
        mine = [r.value for r in stored if r.value.startswith(b"p%d-" % n)]
        assert mine == sorted(mine) and len(mine) == 300

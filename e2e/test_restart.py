"""Durability across restarts: clean SIGTERM and kill -9, data, topics, configs, producer state."""

from __future__ import annotations

import time

import pytest

from e2e import wire
from e2e.support import (
    assert_idempotent_batches,
    assert_records_equal,
    ck_create_topic,
    ck_producer,
    kp_admin,
    kp_consume_all,
    kp_create_topic,
    kp_offsets,
    kp_produce,
    make_records,
    stored_batches,
    unique,
    with_offsets,
)
from e2e.wire import Conn

pytestmark = pytest.mark.timeout(180)


def test_clean_restart_keeps_every_record(broker):
    bootstrap = broker.bootstrap
    topic = unique("rs-clean")
    kp_create_topic(bootstrap, topic, partitions=2)
    first = make_records(100, partitions=2, seed=1)
    assert kp_produce(bootstrap, topic, first, acks="all", compression_type="gzip") == [
        r.offset for r in with_offsets(first)]

    broker.stop()
    broker.restart()

    assert_records_equal(kp_consume_all(bootstrap, topic, range(2)), with_offsets(first))
    more = make_records(10, partitions=2, seed=2)
    offsets = kp_produce(bootstrap, topic, more, acks="all")
    assert offsets == [r.offset for r in with_offsets(more, start={0: 50, 1: 50})]


def test_kill9_after_acknowledged_writes(broker):
    bootstrap = broker.bootstrap
    topic = unique("rs-kill")
    kp_create_topic(bootstrap, topic)
    records = make_records(200, seed=3)
    kp_produce(bootstrap, topic, records, acks="all", compression_type="lz4")

    broker.kill()
    broker.restart()

    assert_records_equal(kp_consume_all(bootstrap, topic), with_offsets(records))


def test_kill9_during_writes_loses_no_acknowledged_record(broker):
    bootstrap = broker.bootstrap
    topic = unique("rs-kill-stream")
    ck_create_topic(bootstrap, topic)
    producer = ck_producer(bootstrap, **{"acks": "all", "enable.idempotence": True,
                                         "linger.ms": 2, "message.timeout.ms": 5000})
    acked: dict[int, int] = {}  # value -> offset reported to the producer

    def delivered(err, msg) -> None:
        if err is None:
            acked[int(msg.value())] = msg.offset()

    sent = 0
    kill_at = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for _ in range(20):
            producer.produce(topic, value=b"%08d" % sent, partition=0, on_delivery=delivered)
            sent += 1
        producer.poll(0.002)
        if kill_at is None and len(acked) >= 500:
            broker.kill()  # writes are still in flight
            kill_at = sent
        if kill_at is not None and sent >= kill_at + 100:
            break
    assert kill_at is not None, f"only {len(acked)} acknowledgements in 30 s"
    producer.purge()
    producer.flush(5)

    broker.restart()

    stored = kp_consume_all(bootstrap, topic)
    values = [int(r.value) for r in stored]
    assert [r.offset for r in stored] == list(range(len(stored)))
    assert values == sorted(set(values)), "records duplicated or out of order after recovery"
    assert all(v < sent for v in values)
    by_offset = {r.offset: int(r.value) for r in stored}
    lost = sorted(v for v in acked if v not in set(values))
    assert not lost, f"{len(lost)} acknowledged records lost, first {lost[:5]}"
    wrong = [(v, o) for v, o in acked.items() if by_offset.get(o) != v]
    assert not wrong, f"acknowledged offsets that hold other records: {wrong[:5]}"

    # The log takes new writes right after what survived.
    more = make_records(5, seed=4)
    assert kp_produce(bootstrap, topic, more) == list(range(len(stored), len(stored) + 5))


def test_sigterm_during_writes_is_clean_and_keeps_acknowledged_records(broker):
    bootstrap = broker.bootstrap
    topic = unique("rs-term-stream")
    ck_create_topic(bootstrap, topic)
    producer = ck_producer(bootstrap, **{"acks": "all", "linger.ms": 2,
                                         "message.timeout.ms": 5000})
    acked: dict[int, int] = {}

    def delivered(err, msg) -> None:
        if err is None:
            acked[int(msg.value())] = msg.offset()

    sent = 0
    deadline = time.monotonic() + 30
    while len(acked) < 300 and time.monotonic() < deadline:
        for _ in range(20):
            producer.produce(topic, value=b"%08d" % sent, partition=0, on_delivery=delivered)
            sent += 1
        producer.poll(0.002)
    broker.stop()  # SIGTERM with a producer connected and sending; must exit 0
    producer.purge()
    producer.flush(5)
    broker.restart()
    stored = {int(r.value): r.offset for r in kp_consume_all(bootstrap, topic)}
    assert len(acked) >= 300
    assert all(stored.get(value) == offset for value, offset in acked.items())


def test_torn_write_at_the_log_tail_is_truncated_on_recovery(broker):
    bootstrap = broker.bootstrap
    topic = unique("rs-torn")
    kp_create_topic(bootstrap, topic)
    records = with_offsets(make_records(50, seed=8))
    kp_produce(bootstrap, topic, records, compression_type="gzip")
    broker.kill()
    segments = sorted((broker.log_dir / f"{topic}-0").glob("*.log"))
    assert segments, f"no segment files under {broker.log_dir / f'{topic}-0'}"
    # Half a batch: a plausible header whose body never reached the disk.
    torn = wire.record_batch([b"never acknowledged"] * 5, base_timestamp=1)[:40]
    with open(segments[-1], "ab") as segment:
        segment.write(wire.int64(50) + torn[8:])
    broker.restart()
    assert_records_equal(kp_consume_all(bootstrap, topic), records)
    assert kp_produce(bootstrap, topic, make_records(3, seed=9)) == [50, 51, 52]
    broker.stop()
    broker.restart()
    assert kp_offsets(bootstrap, topic) == (0, 53)


def test_topics_and_configs_survive_restarts(broker):
    from kafka.admin import ConfigResource, ConfigResourceType

    bootstrap = broker.bootstrap
    kept, dropped = unique("rs-kept"), unique("rs-dropped")
    kp_create_topic(bootstrap, kept, partitions=3, configs={"retention.ms": "86400000",
                                                            "cleanup.policy": "delete"})
    kp_create_topic(bootstrap, dropped)
    admin = kp_admin(bootstrap)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, kept,
                                            {"max.message.bytes": "300000"})])
        admin.create_partitions({kept: 5})
        admin.delete_topics([dropped])
        (before,) = admin.describe_topics([kept])
    finally:
        admin.close()

    def snapshot() -> tuple:
        admin = kp_admin(bootstrap)
        try:
            topics = admin.list_topics()
            (described,) = admin.describe_topics([kept])
            configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, kept)])
        finally:
            admin.close()
        return (kept in topics, dropped in topics, described["topic_id"],
                sorted(p["partition_index"] for p in described["partitions"]),
                {k: (v["value"], v["config_source"]) for k, v in configs["topic"][kept].items()})

    want = (True, False, before["topic_id"], [0, 1, 2, 3, 4], {
        "retention.ms": ("86400000", "DYNAMIC_TOPIC_CONFIG"),
        "cleanup.policy": ("delete", "DYNAMIC_TOPIC_CONFIG"),
        "max.message.bytes": ("300000", "DYNAMIC_TOPIC_CONFIG")})
    assert snapshot() == want
    broker.stop()
    broker.restart()
    assert snapshot() == want
    broker.kill()
    broker.restart()
    assert snapshot() == want


def test_deleted_records_stay_deleted_after_a_clean_restart(broker):
    from confluent_kafka import TopicPartition

    from e2e.support import ck_admin

    bootstrap = broker.bootstrap
    topic = unique("rs-delrec")
    kp_create_topic(bootstrap, topic)
    records = with_offsets(make_records(10, seed=7))
    kp_produce(bootstrap, topic, records)
    futures = ck_admin(bootstrap).delete_records([TopicPartition(topic, 0, 6)])
    assert next(iter(futures.values())).result(timeout=20).low_watermark == 6
    broker.stop()
    broker.restart()
    assert kp_offsets(bootstrap, topic) == (6, 10)
    assert_records_equal(kp_consume_all(bootstrap, topic), records[6:])


def test_idempotent_producer_state_survives_restart(broker):
    from kafka import KafkaProducer

    bootstrap = broker.bootstrap
    topic = unique("rs-idem")
    kp_create_topic(bootstrap, topic)
    records = make_records(60, seed=6, max_value=500)
    first = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all",
                          request_timeout_ms=10000, retry_backoff_ms=200,
                          reconnect_backoff_max_ms=1000)
    try:
        def send(producer: KafkaProducer, batch: list) -> list[int]:
            futures = [producer.send(topic, value=r.value, key=r.key, headers=list(r.headers),
                                     partition=0, timestamp_ms=r.timestamp) for r in batch]
            producer.flush(30)
            return [f.get(30).offset for f in futures]

        assert send(first, records[:20]) == list(range(20))
        broker.stop()
        broker.restart()
        # The same producer id continues its sequence numbers on the restarted broker.
        assert send(first, records[20:40]) == list(range(20, 40))
    finally:
        first.close(timeout=10)
    # A new producer gets a new producer id and is not mistaken for the first one.
    assert kp_produce(bootstrap, topic, records[40:]) == list(range(40, 60))

    assert_records_equal(kp_consume_all(bootstrap, topic), with_offsets(records))
    producer_ids = assert_idempotent_batches(stored_batches(bootstrap, topic), producers=2)
    assert producer_ids[0] != producer_ids[1]


def test_duplicate_batches_are_recognised_after_restarts(broker):
    versions = wire.fetch_api_versions(broker.bootstrap)
    wire.require_version(versions, wire.INIT_PRODUCER_ID, 4)
    wire.require_version(versions, wire.PRODUCE, 9)
    topic = unique("rs-dedup")
    with Conn(broker.bootstrap) as conn:
        wire.ensure_topic(conn, topic)
        error, pid, epoch = wire.init_producer_id(conn, 1)
        assert error == wire.NONE and pid >= 0 and epoch >= 0

    def batch(sequence: int) -> bytes:
        return wire.record_batch([b"r%d" % (sequence + i) for i in range(5)], producer_id=pid,
                                 producer_epoch=epoch, base_sequence=sequence)

    def send(sequence: int) -> wire.ProducePartition:
        with Conn(broker.bootstrap) as conn:
            return wire.produce(conn, 100 + sequence, topic, 0, batch(sequence), acks=-1)

    assert send(0).error_code == wire.NONE
    assert send(5).base_offset == 5
    broker.stop()
    broker.restart()
    retry = send(5)
    assert (retry.error_code, retry.base_offset) == (wire.NONE, 5), retry
    assert kp_offsets(broker.bootstrap, topic) == (0, 10)
    assert send(10).base_offset == 10
    assert send(20).error_code == wire.OUT_OF_ORDER_SEQUENCE_NUMBER

    broker.kill()
    broker.restart()
    retry = send(10)
    assert (retry.error_code, retry.base_offset) == (wire.NONE, 10), retry
    assert kp_offsets(broker.bootstrap, topic) == (0, 15)
    assert [b.base_sequence for b in stored_batches(broker.bootstrap, topic)] == [0, 5, 10]
    with Conn(broker.bootstrap) as conn:
        error, new_pid, _ = wire.init_producer_id(conn, 2)
    assert error == wire.NONE and new_pid != pid, "a producer id was handed out twice"

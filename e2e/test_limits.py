"""Size limits, segment rolling, retention, and start-up settings."""

from __future__ import annotations

import random

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from e2e import wire
from e2e.conftest import READY_MARKER, Broker
from e2e.support import (
    Rec,
    assert_records_equal,
    ck_admin,
    ck_create_topic,
    ck_producer,
    kp_consume_all,
    kp_create_topic,
    kp_offsets,
    kp_offsets_for_times,
    kp_produce,
    now_ms,
    unique,
    wait_until,
    with_offsets,
)
from e2e.wire import Conn

pytestmark = pytest.mark.timeout(180)

BROKER_OVERRIDES = {"log.retention.check.interval.ms": 300}
SEGMENT = 1048576  # the smallest segment size Kafka 4.0 accepts


def big_records(count: int, size: int, seed: int, ts_base: int) -> list[Rec]:
    rng = random.Random(seed)
    return [Rec(0, b"%06d" % i, rng.randbytes(size), (), ts_base + i) for i in range(count)]


def ck_send_one(bootstrap: str, topic: str, value: bytes) -> KafkaError | None:
    """Produce one record with a client limit far above the broker's; return the error."""
    producer = ck_producer(bootstrap, **{"message.max.bytes": 10_000_000,
                                         "enable.idempotence": False, "linger.ms": 0})
    outcome: list = []
    producer.produce(topic, value=value, partition=0,
                     on_delivery=lambda err, msg: outcome.append(err))
    assert producer.flush(30) == 0
    return outcome[0]


def test_record_over_message_max_bytes_is_rejected(module_broker):
    from kafka import KafkaProducer
    from kafka.errors import MessageSizeTooLargeError

    bootstrap = module_broker.bootstrap
    topic = unique("lim-big")
    kp_create_topic(bootstrap, topic)
    too_big = random.Random(1).randbytes(1_200_000)  # message.max.bytes defaults to 1048588

    error = ck_send_one(bootstrap, topic, too_big)
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE, error

    producer = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=10_000_000,
                             enable_idempotence=False, retries=0, request_timeout_ms=15000)
    try:
        future = producer.send(topic, value=too_big, partition=0)
        with pytest.raises(MessageSizeTooLargeError):
            future.get(timeout=30)
    finally:
        producer.close(timeout=10)
    assert kp_offsets(bootstrap, topic) == (0, 0)

    # Just under the limit is fine, and a consumer reads it back.
    fits = random.Random(2).randbytes(1_000_000)
    assert ck_send_one(bootstrap, topic, fits) is None
    (got,) = kp_consume_all(bootstrap, topic)
    assert got.value == fits


def test_topic_max_message_bytes_override(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("lim-topic")
    ck_create_topic(bootstrap, topic, configs={"max.message.bytes": "10000"})
    error = ck_send_one(bootstrap, topic, b"x" * 20_000)
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE, error
    assert ck_send_one(bootstrap, topic, b"y" * 5_000) is None

    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", "100000",
                    incremental_operation=AlterConfigOpType.SET)])
    ck_admin(bootstrap).incremental_alter_configs([resource])[resource].result(timeout=20)
    assert ck_send_one(bootstrap, topic, b"z" * 20_000) is None
    assert [len(r.value) for r in kp_consume_all(bootstrap, topic)] == [5_000, 20_000]


def test_small_segments_roll_and_consumers_read_across_them(broker_factory):
    broker = broker_factory({"log.segment.bytes": SEGMENT})
    bootstrap = broker.bootstrap
    topic = unique("lim-segments")
    kp_create_topic(bootstrap, topic)
    records = big_records(350, 10_000, seed=3, ts_base=now_ms() - 600_000)
    expected = with_offsets(records)
    kp_produce(bootstrap, topic, records, linger_ms=5)

    segments = sorted((broker.log_dir / f"{topic}-0").glob("*.log"))
    assert len(segments) >= 3, f"segments: {[s.name for s in segments]}"
    assert all(s.stat().st_size <= SEGMENT for s in segments)
    assert_records_equal(kp_consume_all(bootstrap, topic), expected)
    # The time index of every segment answers lookups by timestamp.
    for index in (0, 120, 230, 349):
        assert kp_offsets_for_times(bootstrap, topic, {0: records[index].timestamp}) == {
            0: index}

    broker.kill()
    broker.restart()
    assert_records_equal(kp_consume_all(bootstrap, topic), expected)


def test_retention_by_size_deletes_old_segments(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("lim-ret-size")
    kp_create_topic(bootstrap, topic, configs={"segment.bytes": str(SEGMENT),
                                               "retention.bytes": str(SEGMENT)})
    records = big_records(400, 10_000, seed=4, ts_base=now_ms() - 60_000)
    kp_produce(bootstrap, topic, records, linger_ms=5)

    # Retention runs every 300 ms while segments roll, so the first check after a roll may
    # leave older segments for the next one. Once it has caught up, at most one segment
    # beyond retention.bytes remains: about 100 to 200 records of 10 kB.
    most = 2 * SEGMENT // 10_000 + 5

    def caught_up():
        start, end = kp_offsets(bootstrap, topic)
        return (start, end) if end == 400 and 0 < end - start <= most else None

    start, end = wait_until(caught_up, 20, f"size-based retention to keep at most {most} records")
    kept = end - start
    assert kept >= 50, f"retention deleted too much: {kept} records kept"
    expected = with_offsets(records)[start:]
    assert_records_equal(kp_consume_all(bootstrap, topic), expected)


def test_retention_by_time_deletes_expired_segments(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("lim-ret-time")
    kp_create_topic(bootstrap, topic, configs={"segment.bytes": str(SEGMENT),
                                               "retention.ms": "60000"})
    old = big_records(300, 10_000, seed=5, ts_base=now_ms() - 600_000)
    fresh = [Rec(0, b"fresh-%d" % i, b"new value %d" % i, (), now_ms()) for i in range(5)]
    kp_produce(bootstrap, topic, old + fresh, linger_ms=5)

    start, end = wait_until(lambda: (lambda o: o if o[0] > 0 else None)(
        kp_offsets(bootstrap, topic)), 20, "time-based retention to move the log start")
    assert end == 305
    assert 0 < start <= 300, "the segment holding fresh records must stay"
    expected = with_offsets(old + fresh)[start:]
    assert_records_equal(kp_consume_all(bootstrap, topic), expected)


def test_acks_all_needs_min_insync_replicas(module_broker):
    """With one replica and min.insync.replicas=2, acks=all fails and acks=1 succeeds."""
    topic = unique("wire-minisr")
    kp_create_topic(module_broker.bootstrap, topic, configs={"min.insync.replicas": "2"})
    with Conn(module_broker.bootstrap) as conn:
        result = wire.produce(conn, 111, topic, 0, wire.record_batch([b"x"]), acks=-1)
        assert result.error_code == wire.NOT_ENOUGH_REPLICAS, result
        result = wire.produce(conn, 112, topic, 0, wire.record_batch([b"y"]), acks=1)
        assert (result.error_code, result.base_offset) == (wire.NONE, 0)


def test_timestamp_too_far_in_the_future_is_rejected(module_broker):
    """message.timestamp.after.max.ms defaults to one hour (Kafka 3.6+)."""
    from kafka.errors import InvalidTimestampError

    bootstrap = module_broker.bootstrap
    topic = unique("lim-future")
    kp_create_topic(bootstrap, topic)
    future = Rec(0, b"k", b"from the future", (), now_ms() + 2 * 3_600_000)
    with pytest.raises(InvalidTimestampError):
        kp_produce(bootstrap, topic, [future], retries=0, enable_idempotence=False)
    past = Rec(0, b"k", b"from the past", (), now_ms() - 30 * 86_400_000)
    assert kp_produce(bootstrap, topic, [past]) == [0]


# --------------------------------------------------------------------------- start-up settings


@pytest.mark.parametrize("setting,value", [
    ("num.partitions", "abc"),
    ("no.such.setting", "1"),
    ("auto.create.topics.enable", "maybe"),
    ("num.partitions", "0"),
    ("message.max.bytes", "99999999999"),
])
def test_bad_setting_stops_start_up_naming_it(tmp_path, setting, value):
    proc = Broker(tmp_path, {setting: value}).run_to_exit()
    output = (proc.stdout + proc.stderr).decode(errors="replace")
    assert proc.returncode != 0, f"broker started with {setting}={value}: {output[-1000:]}"
    assert READY_MARKER not in output
    assert setting in output, f"the error does not name {setting}: {output[-1000:]}"


def test_bad_setting_in_config_file(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text("# a comment\nnum.partitions=2\nlog.retention.hourz=5\n")
    proc = Broker(tmp_path, config_file=config).run_to_exit()
    output = (proc.stdout + proc.stderr).decode(errors="replace")
    assert proc.returncode != 0
    assert "log.retention.hourz" in output, output[-1000:]


def test_config_file_with_overrides(broker_factory, tmp_path):
    config = tmp_path / "server.properties"
    config.write_text("num.partitions=3\nauto.create.topics.enable=true\nnode.id=5\n"
                      "message.max.bytes=5000\n")
    broker = broker_factory({"message.max.bytes": "2000000"}, config_file=config)
    assert "node.id=5" in broker.ready_line
    topic = unique("lim-auto")
    kp_produce(broker.bootstrap, topic, [Rec(2, b"k", b"v" * 10_000, (), now_ms())])
    meta = ck_admin(broker.bootstrap).list_topics(topic, timeout=15).topics[topic]
    assert sorted(meta.partitions) == [0, 1, 2]  # num.partitions from the file
    # --override wins over the file: a 10 kB record fits in 2000000 but not in 5000.
    assert [len(r.value) for r in kp_consume_all(broker.bootstrap, topic, [2])] == [10_000]


def test_auto_create_disabled(broker_factory):
    broker = broker_factory({"auto.create.topics.enable": "false"})
    topic = unique("lim-noauto")
    with Conn(broker.bootstrap) as conn:
        meta = wire.metadata(conn, 1, [topic], allow_auto_create=True)
        assert meta.topics[topic].error_code == wire.UNKNOWN_TOPIC_OR_PARTITION
        assert topic not in wire.metadata(conn, 2, None).topics
    # Explicit creation still works.
    kp_create_topic(broker.bootstrap, topic)
    assert kp_produce(broker.bootstrap, topic, [Rec(0, None, b"v", (), now_ms())]) == [0]

"""Connection handling: per-IP limits, idle reaping, back-pressure, legacy Produce."""

from __future__ import annotations

import time

import pytest

from e2e import wire
from e2e.wire import Conn, int16, int32, string

pytestmark = pytest.mark.timeout(120)


def api_versions_answered(conn: Conn, correlation_id: int) -> bool:
    conn.send(wire.api_versions_request(0, correlation_id))
    corr, reader = conn.recv_response(header_v1=False)
    return corr == correlation_id and wire.parse_api_versions(reader, 0).error_code == 0


def test_connections_over_the_per_ip_limit_are_closed(broker_factory):
    broker = broker_factory({"max.connections.per.ip": 3})
    kept = [Conn(broker.bootstrap) for _ in range(3)]
    try:
        assert all(api_versions_answered(conn, i) for i, conn in enumerate(kept))
        with Conn(broker.bootstrap) as extra:
            assert extra.wait_closed(5), "the fourth connection from 127.0.0.1 stayed open"
        # The others are unaffected, and a freed slot can be used again.
        assert all(api_versions_answered(conn, 10 + i) for i, conn in enumerate(kept))
        kept.pop().close()
        deadline = time.monotonic() + 5
        while True:
            with Conn(broker.bootstrap) as again:
                try:
                    if api_versions_answered(again, 99):
                        break
                except wire.Closed:
                    assert time.monotonic() < deadline, "a freed slot was never reusable"
                    time.sleep(0.1)
    finally:
        for conn in kept:
            conn.close()


def test_idle_connections_are_closed(broker_factory):
    broker = broker_factory({"connections.max.idle.ms": 1000})
    with Conn(broker.bootstrap) as idle, Conn(broker.bootstrap) as busy:
        assert api_versions_answered(idle, 1)
        started = time.monotonic()
        for i in range(8):  # keep one connection busy across the idle limit
            assert api_versions_answered(busy, 100 + i)
            time.sleep(0.25)
        assert idle.wait_closed(5), "an idle connection was not reaped"
        assert time.monotonic() - started >= 0.9
        assert api_versions_answered(busy, 200)


def test_full_request_queue_pushes_back_and_drops_nothing(broker_factory):
    # One slot in the queue and one handler: every request must still be answered, in order.
    broker = broker_factory({"queued.max.requests": 1, "num.io.threads": 1})
    connections = [Conn(broker.bootstrap) for _ in range(20)]
    try:
        for index, conn in enumerate(connections):
            conn.send(b"".join(wire.api_versions_request(3 if n % 2 else 0, index * 100 + n)
                               for n in range(25)))
        for index, conn in enumerate(connections):
            for n in range(25):
                correlation_id, _ = conn.recv_response(header_v1=False)
                assert correlation_id == index * 100 + n
    finally:
        for conn in connections:
            conn.close()


@pytest.mark.parametrize("version", [0, 1, 2])
def test_legacy_produce_versions_get_unsupported_version(module_broker, version):
    # Kafka 4 advertises Produce from v0 but accepts only record batches v2 (Produce v3+).
    body = int16(1) + int32(1000) + int32(1) + string("legacy") + int32(1) + int32(0) + \
        int32(0)
    with Conn(module_broker.bootstrap) as conn:
        conn.send(wire.request(wire.PRODUCE, version, 7, body, flexible=False))
        correlation_id, reader = conn.recv_response(header_v1=False)
        assert correlation_id == 7
        assert reader.array_len() == 1
        assert reader.string() == "legacy"
        assert reader.array_len() == 1
        assert reader.int32() == 0
        assert reader.int16() == wire.UNSUPPORTED_VERSION
        assert reader.int64() == -1
        if version >= 2:
            assert reader.int64() == -1
        if version >= 1:
            assert reader.int32() == 0
        reader.done()
        assert api_versions_answered(conn, 8)


def test_offset_for_leader_epoch(module_broker):
    from e2e.support import ck_create_topic, ck_produce, make_records, unique
    from e2e.wire import compact_array, compact_string

    topic = unique("epochs")
    ck_create_topic(module_broker.bootstrap, topic)
    ck_produce(module_broker.bootstrap, topic, make_records(5))

    def ask(leader_epoch: int, current_leader_epoch: int) -> tuple[int, int, int]:
        partition = int32(0) + int32(current_leader_epoch) + int32(leader_epoch) + wire.TAGS
        body = (int32(-1) + compact_array([compact_string(topic) + compact_array([partition])
                                           + wire.TAGS]) + wire.TAGS)
        with Conn(module_broker.bootstrap) as conn:
            conn.send(wire.request(23, 4, 3, body, flexible=True))
            correlation_id, reader = conn.recv_response(header_v1=True)
            assert correlation_id == 3
            reader.int32()  # throttle time
            assert reader.compact_array_len() == 1
            assert reader.compact_string() == topic
            assert reader.compact_array_len() == 1
            error, index = reader.int16(), reader.int32()
            epoch, end_offset = reader.int32(), reader.int64()
            assert index == 0
            return error, epoch, end_offset

    # The only epoch so far (0) ends at the log end; later epochs are unknown to the log.
    assert ask(0, -1) == (wire.NONE, 0, 5)
    assert ask(0, 0) == (wire.NONE, 0, 5)
    # A client that believes in a newer leader epoch than the broker's is told so.
    assert ask(0, 7)[0] == 75  # UNKNOWN_LEADER_EPOCH


def test_clients_cannot_produce_to_internal_topics(module_broker):
    from confluent_kafka import Consumer, Producer

    # Any group use creates __consumer_offsets.
    consumer = Consumer({"bootstrap.servers": module_broker.bootstrap, "group.id": "internal"})
    consumer.list_topics(timeout=10)
    assert consumer.committed([], timeout=10) == []
    consumer.close()
    results = []
    producer = Producer({"bootstrap.servers": module_broker.bootstrap,
                         "message.timeout.ms": 10000})
    producer.produce("__consumer_offsets", b"x", partition=0,
                     on_delivery=lambda err, msg: results.append(err))
    producer.flush(15)
    assert len(results) == 1 and results[0] is not None
    assert results[0].code() == 17  # INVALID_TOPIC_EXCEPTION

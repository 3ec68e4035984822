"""The Moldau producer against real broker processes, checked by other clients.

Everything the Moldau producer writes is read back by confluent-kafka (librdkafka) and
kafka-python consumers and compared field by field: partition, offset, key, value, headers
and timestamp, for every codec. Idempotence survives a broker restart with nothing lost or
duplicated.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from e2e.support import (
    CODECS,
    Rec,
    assert_codec,
    assert_idempotent_batches,
    assert_records_equal,
    ck_consume_all,
    kp_consume_all,
    kp_create_topic,
    make_records,
    stored_batches,
    unique,
    wait_until,
    with_offsets,
)
from moldau.client import AsyncProducer, Producer
from moldau.client.errors import (
    ClientClosedError,
    KafkaTimeoutError,
    RecordTooLargeError,
)
from moldau.client.producer.partitioner import partition_for_key

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 3


def producer_config(bootstrap: str, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "request.timeout.ms": 15000, **extra}


@pytest.mark.parametrize("codec", CODECS)
def test_records_are_read_back_exactly_by_other_clients(module_broker, codec):
    bootstrap = module_broker.bootstrap
    topic = unique(f"moldau-producer-{codec}")
    kp_create_topic(bootstrap, topic, PARTITIONS)
    records = make_records(90, partitions=PARTITIONS, seed=len(codec))
    with Producer(producer_config(bootstrap, **{"compression.type": codec,
                                                "linger.ms": 20})) as producer:
        futures = [producer.send(topic, r.value, key=r.key, headers=list(r.headers),
                                 partition=r.partition, timestamp_ms=r.timestamp)
                   for r in records]
        acknowledged = [future.get(30) for future in futures]
    expected = with_offsets(records)
    assert [(m.topic, m.partition, m.offset, m.timestamp) for m in acknowledged] == [
        (topic, r.partition, r.offset, r.timestamp) for r in expected]
    assert [(m.serialized_key_size, m.serialized_value_size) for m in acknowledged] == [
        (-1 if r.key is None else len(r.key), -1 if r.value is None else len(r.value))
        for r in records]
    assert_records_equal(ck_consume_all(bootstrap, topic, range(PARTITIONS)), expected)
    assert_records_equal(kp_consume_all(bootstrap, topic, range(PARTITIONS)), expected)
    for partition in range(PARTITIONS):
        batches = stored_batches(bootstrap, topic, partition)
        if codec != "none":
            assert_codec(batches, codec)
        assert_idempotent_batches(batches)


def test_async_producer_keys_and_sticky_keyless_records(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("moldau-keys")
    partitions = 6
    kp_create_topic(bootstrap, topic, partitions)
    keys = [b"user-%d" % i for i in range(60)]

    async def produce() -> tuple[list, list]:
        async with AsyncProducer(producer_config(bootstrap), key_serializer="str",
                                 value_serializer="json") as producer:
            keyed = [await producer.send(topic, {"n": i}, key=key.decode())
                     for i, key in enumerate(keys)]
            keyless = [await producer.send(topic, {"n": i}) for i in range(50)]
            await producer.flush()
            return [await f for f in keyed], [await f for f in keyless]

    keyed, keyless = asyncio.run(produce())
    # Keys land where the Java client would put them.
    assert [m.partition for m in keyed] == [partition_for_key(k, partitions) for k in keys]
    # Keyless records queued together stay on one partition (one batch).
    assert len({m.partition for m in keyless}) == 1
    consumed = ck_consume_all(bootstrap, topic, range(partitions))
    values = sorted((r.key or b"", r.value) for r in consumed)
    assert len(values) == 110
    assert (b"user-3", b'{"n":3}') in values


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_idempotent_producer_survives_a_broker_restart(broker_factory, how):
    """A clean stop, or SIGKILL with requests in flight (their batches may be in the log
    while the responses are lost, so the retries must be recognized as duplicates)."""
    broker = broker_factory()
    bootstrap = broker.bootstrap
    topic = unique("moldau-restart")
    kp_create_topic(bootstrap, topic, 2)
    acked: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()
    sent = [0]

    def callback(index: int):
        def done(metadata, error) -> None:
            if error is not None:
                errors.append(error)
            else:
                acked.append(index)
        return done

    producer = Producer(producer_config(bootstrap, **{"linger.ms": 2, "batch.size": 2048,
                                                      "retry.backoff.ms": 50}))
    try:
        def produce() -> None:
            # A steady stream, so that requests are in flight when the broker goes away
            # and records keep queueing while it is down.
            while not stop.is_set():
                index = sent[0]
                producer.send(topic, b"%06d" % index, partition=index % 2,
                              callback=callback(index))
                sent[0] = index + 1
                if index % 20 == 0:
                    time.sleep(0.005)

        sender = threading.Thread(target=produce)
        sender.start()
        wait_until(lambda: len(acked) >= 500, 30, "progress before the restart")
        sent_before = sent[0]
        if how == "kill":
            broker.kill()
            broker.start()
        else:
            broker.restart()
        assert sent[0] > sent_before, "records were queued while the broker was down"
        resumed = len(acked)
        wait_until(lambda: len(acked) >= resumed + 500, 30, "progress after the restart")
        stop.set()
        sender.join(30)
        producer.flush(60)
    finally:
        stop.set()
        producer.close(10)
    total = sent[0]
    assert not errors, errors[:3]
    assert sorted(acked) == list(range(total))
    consumed = ck_consume_all(bootstrap, topic, range(2))
    for partition in range(2):
        values = [r.value for r in consumed if r.partition == partition]
        expected = [b"%06d" % i for i in range(partition, total, 2)]
        assert values == expected, f"partition {partition}: lost, duplicated or reordered"
        assert_idempotent_batches(stored_batches(bootstrap, topic, partition))


def test_acks_zero_and_acks_one(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("moldau-acks")
    kp_create_topic(bootstrap, topic, 1)
    records = make_records(20, seed=5)
    with Producer(producer_config(bootstrap, acks=0)) as producer:
        offsets = [producer.send(topic, r.value, key=r.key, headers=list(r.headers),
                                 timestamp_ms=r.timestamp).get(10).offset for r in records]
    assert offsets == [-1] * len(records)
    with Producer(producer_config(bootstrap, acks="1")) as producer:
        more = [producer.send(topic, r.value, key=r.key, headers=list(r.headers),
                              timestamp_ms=r.timestamp).get(10).offset for r in records]
    assert more == list(range(20, 40))
    expected = with_offsets([*records, *records])
    assert_records_equal(kp_consume_all(bootstrap, topic), expected)


def test_callbacks_run_in_order_before_futures(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("moldau-callbacks")
    seen: list[tuple[int, bool]] = []
    futures = []
    with Producer(producer_config(bootstrap, **{"linger.ms": 50})) as producer:
        for i in range(30):
            futures.append(producer.send(
                topic, b"%d" % i, partition=0,
                callback=lambda metadata, error, i=i: seen.append(
                    (metadata.offset, futures[i].done()))))
        producer.flush()
    assert [offset for offset, _ in seen] == list(range(30))
    assert not any(done for _, done in seen)


def test_send_errors(broker_factory):
    broker = broker_factory({"auto.create.topics.enable": "false"})
    config = producer_config(broker.bootstrap, **{"max.block.ms": 500,
                                                  "max.request.size": 10000})
    with Producer(config) as producer:
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="not present in metadata"):
            producer.send(unique("missing"), b"x")
        assert time.monotonic() - started < 5
        with pytest.raises(RecordTooLargeError, match="max.request.size"):
            producer.send("whatever", b"x" * 20000)
    with pytest.raises(ClientClosedError):
        producer.send("whatever", b"x")


def test_delivery_timeout_when_the_broker_is_gone(broker_factory):
    broker = broker_factory()
    topic = unique("moldau-gone")
    kp_create_topic(broker.bootstrap, topic, 1)
    config = producer_config(broker.bootstrap, **{"delivery.timeout.ms": 1500,
                                                  "request.timeout.ms": 1000,
                                                  "linger.ms": 0})
    with Producer(config) as producer:
        producer.send(topic, b"first").get(10)
        broker.stop()
        started = time.monotonic()
        future = producer.send(topic, b"lost")
        with pytest.raises(KafkaTimeoutError, match="Expiring 1 record"):
            future.get(10)
        assert time.monotonic() - started < 5
        producer.close(0)


def test_records_larger_than_batch_size_and_many_partitions(module_broker):
    bootstrap = module_broker.bootstrap
    topic = unique("moldau-large")
    kp_create_topic(bootstrap, topic, 4)
    big = [Rec(i % 4, b"k%d" % i, bytes([i]) * (40000 + i), (), 1_700_000_000_000 + i)
           for i in range(8)]
    with Producer(producer_config(bootstrap, **{"batch.size": 1024,
                                                "compression.type": "lz4"})) as producer:
        for r in big:
            producer.send(topic, r.value, key=r.key, partition=r.partition,
                          timestamp_ms=r.timestamp)
    assert_records_equal(ck_consume_all(bootstrap, topic, range(4)), with_offsets(big))

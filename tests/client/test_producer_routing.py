"""The producer's record path without a network: partition choice, sticky switching when a
batch is sent or full, size checks and serialization errors."""

from __future__ import annotations

import threading
import time
import uuid
from types import SimpleNamespace

import pytest

from moldau.client.errors import ClientClosedError, RecordTooLargeError, SerializationError
from moldau.client.producer.batch import RecordFuture
from moldau.client.producer.partitioner import partition_for_key
from moldau.client.producer.producer import AsyncProducer

PARTITIONS = 8


def metadata_response() -> SimpleNamespace:
    partitions = [SimpleNamespace(error_code=0, partition_index=i, leader_id=1, leader_epoch=0,
                                  replica_nodes=[1], isr_nodes=[1], offline_replicas=[])
                  for i in range(PARTITIONS)]
    topic = SimpleNamespace(error_code=0, name="t", topic_id=uuid.uuid4(), is_internal=False,
                            partitions=partitions)
    return SimpleNamespace(brokers=[SimpleNamespace(node_id=1, host="h", port=1, rack=None)],
                           topics=[topic], controller_id=1, cluster_id="c")


def offline_producer(**settings) -> AsyncProducer:
    producer = AsyncProducer({"bootstrap.servers": "h:1", **settings})
    producer.metadata.update(metadata_response())
    producer.sender._loop_thread = threading.get_ident()  # wakeups stay on this thread
    if producer.transaction_manager is not None:
        producer.transaction_manager.set_producer_id(1, 0)  # as if InitProducerId ran
    return producer


def send(producer: AsyncProducer, value, key=None, partition=None, headers=None):
    result = producer.try_send("t", value, key, headers, partition, None, None)
    assert type(result) is RecordFuture, "expected the no-wait path"
    return result


def partition_of(future: RecordFuture) -> int:
    return future._batch.tp.partition


def test_keyed_records_follow_murmur2_and_explicit_partitions_win():
    producer = offline_producer()
    for i in range(50):
        key = b"key-%d" % i
        assert partition_of(send(producer, b"v", key=key)) == partition_for_key(key, PARTITIONS)
    assert partition_of(send(producer, b"v", key=b"k", partition=5)) == 5


def test_keyless_records_stick_until_the_batch_is_sent():
    producer = offline_producer()
    first = {partition_of(send(producer, b"v")) for _ in range(20)}
    assert len(first) == 1
    (sticky,) = first
    # The sender takes the batch: the next keyless record starts a batch elsewhere.
    drained = producer.accumulator.drain(producer.metadata.cluster, {1}, 10**6,
                                         time.monotonic())
    assert [b.tp.partition for b in drained[1]] == [sticky]
    moved = partition_of(send(producer, b"v"))
    assert moved != sticky
    assert {partition_of(send(producer, b"v")) for _ in range(10)} == {moved}


def test_keyless_records_move_on_when_the_batch_is_full():
    producer = offline_producer(**{"batch.size": 1024})
    partitions = [partition_of(send(producer, b"x" * 100)) for _ in range(40)]
    runs = [p for i, p in enumerate(partitions) if i == 0 or p != partitions[i - 1]]
    assert len(runs) >= 3, "a new partition for each new batch"
    for batch_queue in producer.accumulator._batches.values():
        assert all(batch.full for batch in list(batch_queue)[:-1])


def test_size_limits_and_serialization_errors():
    producer = offline_producer(**{"max.request.size": 1000})
    with pytest.raises(RecordTooLargeError, match="max.request.size"):
        send(producer, b"x" * 2000)
    producer = offline_producer(**{"buffer.memory": 5000, "batch.size": 1000})
    with pytest.raises(RecordTooLargeError, match="buffer.memory"):
        send(producer, b"x" * 6000)
    with pytest.raises(SerializationError):
        send(producer, 12345)
    with pytest.raises(ValueError, match="timestamp"):
        producer.try_send("t", b"v", None, None, None, -5, None)


def test_unknown_topic_or_partition_needs_waiting():
    producer = offline_producer()
    pending = producer.try_send("other", b"v", None, None, None, None, None)
    assert type(pending) is not RecordFuture
    pending = producer.try_send("t", b"v", None, None, PARTITIONS, None, None)
    assert type(pending) is not RecordFuture


def test_headers_and_string_values():
    producer = offline_producer()
    future = send(producer, "text", key="k", headers={"a": "b", "n": None})
    batch = future._batch
    built = bytes(batch.build())
    from moldau.records.codec import decode_records

    (record,) = decode_records(built)
    assert (record.key, record.value, record.headers) == (b"k", b"text",
                                                          [("a", b"b"), ("n", None)])


def test_send_after_close_fails():
    import asyncio

    producer = offline_producer()
    asyncio.run(producer.close())
    with pytest.raises(ClientClosedError):
        producer.try_send("t", b"v", None, None, None, None, None)

"""ProducerBatch: the encoded batch, completion exactly once, callback order, offsets."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from moldau.client.errors import NotLeaderOrFollowerError  # type: ignore[attr-defined]
from moldau.client.producer.batch import ProducerBatch
from moldau.client.types import RecordMetadata, TopicPartition
from moldau.records.batch import Compression, compute_crc, parse_header
from moldau.records.codec import decode_records

TP = TopicPartition("t", 3)


def new_batch(size: int = 16384, limit: int | None = None, **kwargs) -> ProducerBatch:
    return ProducerBatch(TP, bytearray(size), 0.0, limit=limit, **kwargs)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_encoded_batch_decodes_to_the_appended_records(codec):
    batch = new_batch(compression=Compression.NAMES[codec])
    records = [(1000 + i * 7, None if i % 3 == 0 else b"key%d" % i,
                None if i == 4 else b"value-%d" % i * (i + 1),
                [("h", b"x"), ("empty", None)] if i % 2 else None) for i in range(20)]
    records.append((900, b"earlier", b"timestamp", None))  # a negative delta
    for ts, key, value, headers in records:
        assert batch.try_append(ts, key, value, headers, None) is not None
    data = bytes(batch.build(producer_id=12, producer_epoch=3, base_sequence=40))
    header = parse_header(data)
    assert header.record_count == len(records) and header.last_offset_delta == 20
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (12, 3, 40)
    assert header.base_timestamp == 1000 and header.max_timestamp == 1000 + 19 * 7
    assert header.attributes & 7 == Compression.NAMES[codec]
    assert compute_crc(data, 0, len(data)) == header.crc
    decoded = decode_records(data, verify_crc=True)
    assert [(header.base_timestamp + r.timestamp_delta, r.key, r.value, r.headers or None)
            for r in decoded] == [(ts, k, v, h) for ts, k, v, h in records]
    assert [r.offset_delta for r in decoded] == list(range(len(records)))


def test_rebuild_with_new_producer_state_rewrites_header_and_crc():
    batch = new_batch(compression=Compression.GZIP)
    batch.try_append(1, b"k", b"v", None, None)
    first = bytes(batch.build(5, 0, 0))
    batch.reset_producer_state()
    second = bytes(batch.build(5, 1, 0))
    assert first[61:] == second[61:], "the compressed section is reused"
    assert parse_header(second).producer_epoch == 1
    decode_records(second, verify_crc=True)


def test_append_until_full_then_refuse():
    batch = new_batch(size=200, limit=200)
    appended = 0
    while batch.try_append(0, None, b"x" * 20, None, None) is not None:
        appended += 1
    assert appended > 1 and batch.full
    assert batch.size <= 200
    assert batch.try_append(0, None, b"x", None, None) is None


def test_first_record_always_fits():
    batch = new_batch(size=5000, limit=100)
    assert batch.try_append(0, None, b"x" * 4000, None, None) is not None
    assert batch.try_append(0, None, b"y", None, None) is None


def test_offsets_are_base_plus_index_and_callbacks_run_in_order_before_futures():
    batch = new_batch()
    seen: list[tuple[int, bool]] = []
    futures = []

    def callback(index):
        def call(metadata: RecordMetadata | None, error: Exception | None) -> None:
            assert error is None
            # Every future is still pending while callbacks run.
            seen.append((metadata.offset, any(f.done() for f in futures)))
        return call

    for i in range(5):
        futures.append(batch.try_append(100 + i, b"k", b"v" * i, None, callback(i)))
    assert batch.complete(base_offset=40, log_start_offset=0)
    assert seen == [(40 + i, False) for i in range(5)]
    results = [f.result() for f in futures]
    assert [r.offset for r in results] == [40, 41, 42, 43, 44]
    assert [r.timestamp for r in results] == [100, 101, 102, 103, 104]
    assert results[2] == RecordMetadata("t", 3, 42, 102, 1, 2)


def test_log_append_time_replaces_record_timestamps():
    batch = new_batch()
    future = batch.try_append(5, None, b"v", None, None)
    batch.complete(base_offset=0, log_append_time=99999)
    assert future.result().timestamp == 99999
    assert future.result().serialized_key_size == -1


def test_a_raising_callback_does_not_stop_the_others(caplog):
    batch = new_batch()
    calls = []

    def bad(metadata, error):
        calls.append("bad")
        raise RuntimeError("boom")

    batch.try_append(0, None, b"a", None, bad)
    batch.try_append(0, None, b"b", None, lambda m, e: calls.append("good"))
    with caplog.at_level(logging.ERROR, "moldau.client.producer"):
        batch.complete(0)
    assert calls == ["bad", "good"]
    assert "raised" in caplog.text


def test_completes_exactly_once():
    batch = new_batch()
    errors = []
    future = batch.try_append(0, None, b"a", None, lambda m, e: errors.append(e))
    error = NotLeaderOrFollowerError("moved")
    assert batch.fail(error)
    assert not batch.complete(10)
    assert not batch.fail(RuntimeError("again"))
    assert errors == [error]
    with pytest.raises(NotLeaderOrFollowerError):
        future.result()
    assert future.exception() is error


def test_future_is_awaitable_and_waitable_from_threads():
    async def main():
        batch = new_batch()
        future = batch.try_append(0, None, b"a", None, None)
        done = []
        future.add_done_callback(lambda f: done.append(f.result().offset))
        waiter = threading.Thread(target=lambda: done.append(future.get(5).offset))
        waiter.start()
        asyncio.get_running_loop().call_later(0.05, batch.complete, 7)
        metadata = await future
        waiter.join(5)
        assert metadata.offset == 7
        assert sorted(done) == [7, 7]
    asyncio.run(main())


def test_get_times_out():
    from moldau.client.errors import KafkaTimeoutError

    batch = new_batch()
    future = batch.try_append(0, None, b"a", None, None)
    with pytest.raises(KafkaTimeoutError):
        future.get(0.05)

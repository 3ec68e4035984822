"""RecordAccumulator and the idempotence bookkeeping: appending, readiness, draining,
retries in sequence order, expiry; sequences and epoch bumps; the Produce request
encoding."""

from __future__ import annotations

import pytest

from moldau.client.metadata import Cluster, PartitionMetadata, TopicMetadata
from moldau.client.producer.accumulator import RecordAccumulator
from moldau.client.producer.buffer_pool import BufferPool
from moldau.client.producer.sender import encode_produce
from moldau.client.producer.transaction_manager import TransactionManager
from moldau.client.types import Node, TopicPartition
from moldau.errors import ErrorCode
from moldau.protocol.messages import decode_request, is_flexible_request, parse_header

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def cluster() -> Cluster:
    # a-0 and b-0 are led by node 1, a-1 by node 2.
    def topic(name: str, leaders: list[int]) -> TopicMetadata:
        return TopicMetadata(name, None, False, {
            i: PartitionMetadata(name, i, leader, 0, (leader,), (leader,))
            for i, leader in enumerate(leaders)})
    return Cluster([Node(1, "h", 1), Node(2, "h", 2)],
                   {"a": topic("a", [1, 2]), "b": topic("b", [1])})


def accumulator(batch_size: int = 1024, linger_ms: int = 50, tm=None, **kw
                ) -> RecordAccumulator:
    pool = BufferPool(64 * 1024, batch_size)
    return RecordAccumulator(pool, batch_size=batch_size, linger_ms=linger_ms,
                             transaction_manager=tm, **kw)


def append(acc: RecordAccumulator, tp: TopicPartition, value: bytes, now: float = 0.0):
    future = acc.try_append(tp, 0, None, value, None, None)
    if future is None:
        buffer = acc.pool.try_allocate(acc.buffer_size_for(len(value) + 40))
        future, used = acc.append_new(tp, buffer, now, 0, None, value, None, None)
        if not used:
            acc.pool.deallocate(buffer)
    return future


def test_records_share_the_last_batch_until_it_is_full():
    acc = accumulator(batch_size=300)
    for _ in range(20):
        append(acc, A0, b"x" * 30)
    queue = acc._batches[A0]
    assert len(queue) > 1
    assert all(batch.full for batch in list(queue)[:-1])
    assert sum(batch.count for batch in queue) == 20


def test_a_record_larger_than_batch_size_gets_its_own_batch():
    acc = accumulator(batch_size=256)
    append(acc, A0, b"small")
    append(acc, A0, b"x" * 2000)
    queue = acc._batches[A0]
    assert [b.count for b in queue] == [1, 1]
    assert queue[1].buffer_size >= 2000


def test_ready_after_linger_or_when_full():
    acc = accumulator(batch_size=300, linger_ms=50)
    append(acc, A0, b"x", now=0.0)
    result = acc.ready(cluster(), 0.01)
    assert result.ready_nodes == set()
    assert result.next_ready_check == pytest.approx(0.04)
    assert acc.ready(cluster(), 0.05).ready_nodes == {1}
    for _ in range(20):  # fills a batch of a-1 (node 2)
        append(acc, A1, b"y" * 30, now=0.01)
    assert acc.ready(cluster(), 0.02).ready_nodes == {2}


def test_flush_and_close_make_everything_ready():
    acc = accumulator(linger_ms=10_000)
    append(acc, B0, b"x")
    assert not acc.ready(cluster(), 0.0).ready_nodes
    acc.begin_flush()
    assert acc.ready(cluster(), 0.0).ready_nodes == {1}
    acc.end_flush()
    acc.close()
    assert acc.ready(cluster(), 0.0).ready_nodes == {1}


def test_unknown_leaders_are_reported():
    acc = accumulator()
    append(acc, TopicPartition("c", 0), b"x")
    assert acc.ready(cluster(), 1.0).unknown_leader_topics == {"c"}


def test_drain_takes_one_batch_per_partition_and_respects_the_request_size():
    acc = accumulator(batch_size=300, linger_ms=0)
    for _ in range(30):
        append(acc, A0, b"x" * 30)
        append(acc, B0, b"y" * 30)
    drained = acc.drain(cluster(), {1}, 10_000, 1.0)
    assert sorted(b.tp for b in drained[1]) == [A0, B0]
    # A small limit still lets one batch through.
    drained = acc.drain(cluster(), {1}, 10, 1.0)
    assert len(drained[1]) == 1


def test_drain_rotates_the_starting_partition():
    acc = accumulator(batch_size=300, linger_ms=0)
    for _ in range(30):
        append(acc, A0, b"x" * 30)
        append(acc, B0, b"y" * 30)
    firsts = [acc.drain(cluster(), {1}, 10, 1.0)[1][0].tp for _ in range(4)]
    assert set(firsts) == {A0, B0}


def test_expired_batches_are_removed():
    acc = accumulator(delivery_timeout_ms=1000)
    append(acc, A0, b"x", now=0.0)
    assert acc.expired_batches(0.5) == []
    expired = acc.expired_batches(1.5)
    assert len(expired) == 1 and expired[0].tp == A0
    assert not acc.has_undrained()


def test_idempotent_drain_assigns_sequences_and_retries_go_back_in_order():
    tm = TransactionManager()
    tm.set_producer_id(7, 0)
    acc = accumulator(batch_size=300, linger_ms=0, tm=tm)
    for _ in range(40):
        append(acc, A0, b"x" * 30)
    batches = [acc.drain(cluster(), {1}, 10_000, 1.0)[1][0] for _ in range(3)]
    assert [(b.producer_id, b.producer_epoch) for b in batches] == [(7, 0)] * 3
    assert batches[0].base_sequence == 0
    assert batches[1].base_sequence == batches[0].count
    assert batches[2].base_sequence == batches[0].count + batches[1].count
    # Retried out of order, they queue in sequence order ahead of new batches.
    acc.reenqueue(batches[2], 2.0)
    acc.reenqueue(batches[0], 2.0)
    acc.reenqueue(batches[1], 2.0)
    queue = list(acc._batches[A0])
    assert queue[:3] == batches
    # While in backoff nothing is drained; afterwards the lowest sequence goes first.
    assert acc.drain(cluster(), {1}, 10_000, 2.01) == {}
    again = acc.drain(cluster(), {1}, 10_000, 10.0)[1]
    assert again == [batches[0]]
    # The next one waits until the first retried batch is resolved.
    assert acc.drain(cluster(), {1}, 10_000, 10.0) == {}
    tm.on_success(batches[0])
    assert acc.drain(cluster(), {1}, 10_000, 10.0)[1] == [batches[1]]


def test_out_of_order_sequence_is_retried_only_behind_an_unresolved_batch():
    tm = TransactionManager()
    tm.set_producer_id(1, 0)
    acc = accumulator(batch_size=300, linger_ms=0, tm=tm)
    for _ in range(20):
        append(acc, A0, b"x" * 30)
    first = acc.drain(cluster(), {1}, 10_000, 1.0)[1][0]
    second = acc.drain(cluster(), {1}, 10_000, 1.0)[1][0]  # both in flight
    # The second is rejected because the first is not written yet: send it again.
    assert tm.retry_decision(second, ErrorCode.out_of_order_sequence_number) is True
    # The first is the next sequence the broker expects: a real gap, the batch fails.
    assert tm.retry_decision(first, ErrorCode.out_of_order_sequence_number) is False
    tm.on_success(first)
    assert tm.retry_decision(second, ErrorCode.out_of_order_sequence_number) is False


def test_failed_sequenced_batch_bumps_the_epoch_and_resets_sequences():
    tm = TransactionManager()
    tm.set_producer_id(3, 4)
    acc = accumulator(batch_size=300, linger_ms=0, tm=tm)
    for _ in range(20):
        append(acc, A0, b"x" * 30)
    failed = acc.drain(cluster(), {1}, 10_000, 1.0)[1][0]
    tm.on_failure(failed, RuntimeError("gone"))
    assert tm.bump_required
    assert acc.drain(cluster(), {1}, 10_000, 1.0) == {}, "no sends until the bump"
    tm.bump_epoch()
    assert (tm.producer_id, tm.producer_epoch, tm.bump_required) == (3, 5, False)
    nxt = acc.drain(cluster(), {1}, 10_000, 1.0)[1][0]
    assert (nxt.producer_epoch, nxt.base_sequence) == (5, 0)


@pytest.mark.parametrize("version", [3, 8, 9, 12])
def test_produce_request_encoding_decodes_with_the_schema(version):
    from moldau.client.connection import frame_request

    pieces = encode_produce(version, -1, 30000, None, [("a", 0, b"batch-a0"),
                                                       ("b", 2, memoryview(b"batch-b2")),
                                                       ("a", 1, b"batch-a1")])
    frame = frame_request(0, version, 99, b"client", pieces)[4:]
    header = parse_header(frame, is_flexible_request(0, version))
    assert header.correlation_id == 99 and header.client_id == "client"
    body = decode_request(0, version, frame, header.size)
    assert body.acks == -1 and body.transactional_id is None
    assert {t.name: [(p.index, p.records) for p in t.partition_data]
            for t in body.topic_data} == {"a": [(0, b"batch-a0"), (1, b"batch-a1")],
                                          "b": [(2, b"batch-b2")]}

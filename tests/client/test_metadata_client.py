"""Cluster metadata (leader epochs, refresh timing) and the sender's reaction to partition
errors: refresh and retry for stale leaders, success for duplicates, failure otherwise."""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace

import pytest

from moldau.client.errors import KafkaTimeoutError
from moldau.client.metadata import Metadata
from moldau.client.producer.accumulator import RecordAccumulator
from moldau.client.producer.buffer_pool import BufferPool
from moldau.client.producer.sender import Sender
from moldau.client.producer.transaction_manager import TransactionManager
from moldau.client.types import TopicPartition
from moldau.errors import ErrorCode

TOPIC_ID = uuid.uuid4()
TP = TopicPartition("t", 0)


def response(leader: int, epoch: int, topic_id: uuid.UUID = TOPIC_ID, *, error: int = 0,
             brokers: tuple[int, ...] = (1, 2)) -> SimpleNamespace:
    partition = SimpleNamespace(error_code=0, partition_index=0, leader_id=leader,
                                leader_epoch=epoch, replica_nodes=[1, 2], isr_nodes=[1, 2],
                                offline_replicas=[])
    topic = SimpleNamespace(error_code=error, name="t", topic_id=topic_id, is_internal=False,
                            partitions=[] if error else [partition])
    return SimpleNamespace(
        brokers=[SimpleNamespace(node_id=b, host="h", port=9000 + b, rack=None)
                 for b in brokers],
        topics=[topic], controller_id=1, cluster_id="c")


def test_older_leader_epochs_are_ignored():
    metadata = Metadata(["h:1"])
    metadata.update(response(leader=1, epoch=5))
    assert metadata.cluster.leader_for(TP) == 1
    metadata.update(response(leader=2, epoch=3))  # a lagging broker's view
    assert metadata.cluster.leader_for(TP) == 1
    assert metadata.cluster.partition(TP).leader_epoch == 5
    metadata.update(response(leader=2, epoch=6))
    assert metadata.cluster.leader_for(TP) == 2
    # A recreated topic (new id) starts its epochs over.
    metadata.update(response(leader=1, epoch=0, topic_id=uuid.uuid4()))
    assert metadata.cluster.leader_for(TP) == 1


def test_update_leader_needs_a_newer_epoch_and_a_known_node():
    metadata = Metadata(["h:1"])
    metadata.update(response(leader=1, epoch=5))
    assert not metadata.update_leader(TP, 2, 5)
    assert not metadata.update_leader(TP, 7, 9)  # node 7 is unknown
    assert metadata.update_leader(TP, 2, 6)
    assert metadata.cluster.leader_for(TP) == 2
    assert metadata.cluster.partitions_for_node(2) == [TP]


def test_topic_errors_and_bootstrap_nodes():
    metadata = Metadata(["a:1", "b:2"])
    assert [n.node_id for n in metadata.cluster.nodes] == [-1, -2]
    assert metadata.cluster.is_bootstrap
    metadata.update(response(1, 0, error=ErrorCode.unknown_topic_or_partition))
    assert metadata.cluster.topic_errors["t"] is ErrorCode.unknown_topic_or_partition
    assert metadata.cluster.partition_count("t") is None
    assert [n.node_id for n in metadata.cluster.nodes] == [1, 2]


def test_refresh_timing():
    metadata = Metadata(["h:1"], max_age_ms=1000, retry_backoff_ms=100)
    assert metadata.time_to_next_update(0.0) == 0  # nothing known yet
    metadata.update(response(1, 0), now=10.0)
    metadata._last_attempt = 10.0
    assert metadata.time_to_next_update(10.0) == pytest.approx(1.0)  # max age
    metadata.request_update()
    assert metadata.time_to_next_update(10.05) == pytest.approx(0.05)  # retry backoff
    metadata.add_topic("new")  # a topic seen for the first time goes at once
    assert metadata.time_to_next_update(10.05) == 0


def test_fetch_topic_times_out_with_a_clear_message():
    import asyncio

    async def main():
        metadata = Metadata(["h:1"])
        with pytest.raises(KafkaTimeoutError, match="Topic t not present in metadata after"):
            await metadata.fetch_topic("t", 0.05)
    asyncio.run(main())


class Network:
    def add_listener(self, callback) -> None:
        pass


def sender_with_batch(tm: TransactionManager | None = None):
    metadata = Metadata(["h:1"])
    metadata.update(response(1, 0))
    pool = BufferPool(1 << 20, 1024)
    accumulator = RecordAccumulator(pool, batch_size=1024, linger_ms=0,
                                    transaction_manager=tm)
    buffer = pool.try_allocate(1024)
    now = time.monotonic()
    future, _ = accumulator.append_new(TP, buffer, now, 1, None, b"v", None, None)
    batch = accumulator.drain(metadata.cluster, {1}, 10000, now)[1][0]
    sender = Sender(accumulator, metadata, Network(), transaction_manager=tm)  # type: ignore
    metadata._need_update = False
    return sender, batch, future


def produce_response(code: int, base_offset: int = -1, leader: int = -1,
                     epoch: int = -1) -> SimpleNamespace:
    part = SimpleNamespace(index=0, error_code=code, base_offset=base_offset,
                           log_append_time=None, log_start_offset=0, record_errors=[],
                           error_message=None,
                           current_leader=SimpleNamespace(leader_id=leader,
                                                          leader_epoch=epoch))
    return SimpleNamespace(responses=[SimpleNamespace(name="t", partition_responses=[part])])


@pytest.mark.parametrize("code", [ErrorCode.not_leader_or_follower,
                                  ErrorCode.unknown_topic_or_partition,
                                  ErrorCode.leader_not_available])
def test_stale_leader_errors_refresh_metadata_and_retry(code):
    sender, batch, future = sender_with_batch()
    sender._handle_result([batch], 1, None, produce_response(code))
    assert sender.metadata._need_update
    assert not future.done() and batch.attempts == 1
    assert list(sender.accumulator._batches[TP]) == [batch]


def test_new_leader_from_the_produce_response_is_used():
    sender, batch, _ = sender_with_batch()
    sender._handle_result([batch], 1, None, produce_response(
        ErrorCode.not_leader_or_follower, leader=2, epoch=1))
    assert sender.metadata.cluster.leader_for(TP) == 2


def test_success_duplicate_and_fatal_errors():
    sender, batch, future = sender_with_batch()
    sender._handle_result([batch], 1, None, produce_response(0, base_offset=42))
    assert future.result().offset == 42
    tm = TransactionManager()
    tm.set_producer_id(1, 0)
    sender, batch, future = sender_with_batch(tm)
    sender._handle_result([batch], 1, None, produce_response(
        ErrorCode.duplicate_sequence_number, base_offset=7))
    assert future.result().offset == 7
    sender, batch, future = sender_with_batch()
    sender._handle_result([batch], 1, None, produce_response(ErrorCode.message_too_large))
    assert type(future.exception()).__name__ == "MessageTooLargeError"
    assert sender.accumulator.pool.available_memory == 1 << 20, "memory returned"

"""Offsets committed in transactions, over the wire against a real broker process.

A producer id comes from InitProducerId (no transactional id), the offsets from a raw
TxnOffsetCommit, and the transaction ends with a raw WriteTxnMarkers sent to the leader of
the group's `__consumer_offsets` partition, as the transaction coordinator sends it.
Until the COMMIT marker the offsets are pending: OffsetFetch returns the last committed
offset, or UNSTABLE_OFFSET_COMMIT with require_stable; real consumers' committed() agree.
The last test drives it all from librdkafka's transactional producer instead.
"""

from __future__ import annotations

import pytest

from e2e import txn_wire, wire
from e2e.support import ck_consumer, ck_create_topic, kp_consumer, unique, wait_until
from e2e.test_cluster_failover import create_topic, partition_state
from e2e.test_groups_wire import find_coordinator
from e2e.test_transactions import fresh_producer_id
from e2e.txn_wire import UNSTABLE_OFFSET_COMMIT, TxnCommit
from moldau.broker.coordinators.group.records import OFFSETS_TOPIC, partition_for
from moldau.cluster.launcher import LocalCluster

pytestmark = pytest.mark.timeout(180)
OFFSETS_PARTITIONS = 50  # offsets.topic.num.partitions, Kafka's default
TIMEOUT = 60.0
# What clients retry on while the coordinator starts: loading, or not yet the leader.
NOT_COORDINATOR = 16
COORDINATOR_RETRIABLE = (txn_wire.COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR)


class Txn:
    """Transactions of fresh producer ids committing offsets of `topic` for `group`."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        wait_until(lambda: find_coordinator(bootstrap, group)[0] == wire.NONE, TIMEOUT,
                   "the group coordinator")
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.conn = wire.Conn(bootstrap, timeout=30)
        self.offsets_partition = partition_for(group, OFFSETS_PARTITIONS)
        self.fetch(require_stable=False)  # the group's partition is loaded: it coordinates


    def producer(self) -> int:
        return fresh_producer_id(self.conn)

    def commit_offsets(self, producer_id: int, offset: int, *, epoch: int = 0,
                       version: int = 3, **member: object) -> int:
        errors = txn_wire.txn_offset_commit(self.conn, 5, TxnCommit(
            "txn-id", self.group, producer_id, epoch, {(self.topic, 0): offset},
            **member), version)  # type: ignore[arg-type]
        return errors[(self.topic, 0)]

    def end(self, producer_id: int, commit: bool) -> int:
        marker = wire.TxnMarker(producer_id, 0, commit, {OFFSETS_TOPIC: [self.offsets_partition]})
        return wire.write_txn_markers(self.conn, 6, [marker])[
            (producer_id, OFFSETS_TOPIC, self.offsets_partition)]

    def fetch(self, require_stable: bool) -> tuple[int, int]:
        """(offset, error) of the partition, once the group is loaded."""
        def answered() -> tuple[int, int] | None:
            group_error, found = txn_wire.offset_fetch(self.conn, 7, self.group,
                                                       {self.topic: [0]}, require_stable)
            if group_error in COORDINATOR_RETRIABLE:
                return None
            assert group_error == wire.NONE
            offset, error, _ = found[(self.topic, 0)]
            return offset, error
        return wait_until(answered, TIMEOUT, "an OffsetFetch answer")


@pytest.fixture
def txn(module_broker):
    topic = unique("txn-offsets")
    ck_create_topic(module_broker.bootstrap, topic)
    run = Txn(module_broker.bootstrap, topic, unique("txn-group"))
    yield run
    run.conn.close()


def test_pending_until_commit_dropped_on_abort(txn):
    first, second, third = txn.producer(), txn.producer(), txn.producer()
    assert txn.commit_offsets(first, 5) == wire.NONE
    assert txn.fetch(require_stable=False) == (-1, wire.NONE)
    assert txn.fetch(require_stable=True) == (-1, UNSTABLE_OFFSET_COMMIT)
    assert txn.end(first, commit=True) == wire.NONE
    assert txn.fetch(require_stable=True) == (5, wire.NONE)

    assert txn.commit_offsets(second, 9, version=0) == wire.NONE
    assert txn.fetch(require_stable=False) == (5, wire.NONE)  # the last committed
    assert txn.fetch(require_stable=True) == (-1, UNSTABLE_OFFSET_COMMIT)
    every = txn_wire.offset_fetch(txn.conn, 8, txn.group, None, require_stable=True)
    assert every == (wire.NONE, {(txn.topic, 0): (-1, UNSTABLE_OFFSET_COMMIT, "")})
    assert txn.end(second, commit=False) == wire.NONE
    assert txn.fetch(require_stable=True) == (5, wire.NONE)

    assert txn.commit_offsets(third, 12) == wire.NONE
    assert txn.end(third, commit=True) == wire.NONE
    assert txn.fetch(require_stable=True) == (12, wire.NONE)


def test_errors_as_kafka_answers_them(txn):
    producer = txn.producer()
    unknown = txn_wire.txn_offset_commit(txn.conn, 9, TxnCommit(
        "txn-id", txn.group, producer, 0, {(txn.topic, 0): 1, (txn.topic, 7): 1,
                                           (unique("no-such-topic"), 0): 1}))
    assert sorted(unknown.values()) == [wire.NONE, wire.UNKNOWN_TOPIC_OR_PARTITION,
                                        wire.UNKNOWN_TOPIC_OR_PARTITION]
    assert txn.commit_offsets(producer, 2, epoch=1) == wire.NONE
    assert txn.commit_offsets(producer, 3, epoch=0) == txn_wire.INVALID_PRODUCER_EPOCH
    other = Txn(txn.bootstrap, txn.topic, unique("txn-no-group"))
    assert other.commit_offsets(producer, 1, epoch=1, generation=3, member_id="m") == \
        txn_wire.ILLEGAL_GENERATION
    empty = txn_wire.txn_offset_commit(txn.conn, 10, TxnCommit(
        "txn-id", "", producer, 1, {(txn.topic, 0): 1}))
    assert empty == {(txn.topic, 0): txn_wire.INVALID_GROUP_ID}
    other.conn.close()


def test_real_consumers_see_the_offset_only_after_the_commit_marker(txn):
    from confluent_kafka import KafkaException, TopicPartition
    from kafka import TopicPartition as KpTopicPartition

    earlier, producer = txn.producer(), txn.producer()
    assert txn.commit_offsets(earlier, 4) == wire.NONE
    assert txn.end(earlier, commit=True) == wire.NONE
    assert txn.commit_offsets(producer, 8) == wire.NONE

    kp = kp_consumer(txn.bootstrap, group_id=txn.group)
    ck = ck_consumer(txn.bootstrap, **{"group.id": txn.group})
    try:
        tp = KpTopicPartition(txn.topic, 0)
        # kafka-python asks without require_stable: the last committed offset.
        assert kp.committed(tp) == 4
        # librdkafka requires stable offsets: it retries until its timeout.
        with pytest.raises(KafkaException):
            ck.committed([TopicPartition(txn.topic, 0)], timeout=3)
        assert txn.end(producer, commit=True) == wire.NONE
        assert kp.committed(tp) == 8
        [committed] = ck.committed([TopicPartition(txn.topic, 0)], timeout=15)
        assert committed.offset == 8
    finally:
        kp.close(autocommit=False)
        ck.close()


def test_pending_offsets_survive_a_kill_and_restart(broker):
    """kill -9 between the TxnOffsetCommit and the marker: the restarted broker loads the
    offset as pending (and the one whose marker was written as committed); the marker sent
    after the restart commits it."""
    topic = unique("txn-restart")
    ck_create_topic(broker.bootstrap, topic)
    txn = Txn(broker.bootstrap, topic, unique("txn-restart-group"))
    committed, pending = txn.producer(), txn.producer()
    assert txn.commit_offsets(committed, 3) == wire.NONE
    assert txn.end(committed, commit=True) == wire.NONE
    assert txn.commit_offsets(pending, 7) == wire.NONE
    txn.conn.close()

    broker.kill()
    broker.restart()
    txn = Txn(broker.bootstrap, topic, txn.group)
    assert txn.fetch(require_stable=False) == (3, wire.NONE)
    assert txn.fetch(require_stable=True) == (-1, UNSTABLE_OFFSET_COMMIT)
    assert txn.end(pending, commit=True) == wire.NONE
    assert txn.fetch(require_stable=True) == (7, wire.NONE)
    txn.conn.close()


def test_pending_offsets_move_with_the_coordinator(cluster: LocalCluster):
    """kill -9 of the group coordinator mid-transaction: the new leader of the group's
    `__consumer_offsets` partition loads the offset as pending, and the marker the
    transaction coordinator then sends it commits the offset."""
    topic, group = unique("txn-failover"), unique("txn-failover-group")
    create_topic(cluster.bootstrap_servers, topic)
    wait_until(lambda: find_coordinator(cluster.node(1).broker_address, group)[0] == wire.NONE,
               TIMEOUT, "the group coordinator")
    offsets_partition = partition_for(group, OFFSETS_PARTITIONS)
    wait_until(lambda: len(partition_state(cluster, OFFSETS_TOPIC, offsets_partition)[1]) == 3,
               TIMEOUT, "a full ISR of the group's partition")
    coordinator, _ = partition_state(cluster, OFFSETS_TOPIC, offsets_partition)
    txn = Txn(cluster.node(coordinator).broker_address, topic, group)
    committed, pending = txn.producer(), txn.producer()
    assert txn.commit_offsets(committed, 3) == wire.NONE
    assert txn.end(committed, commit=True) == wire.NONE
    assert txn.commit_offsets(pending, 7) == wire.NONE
    txn.conn.close()
    bystander = next(node.node_id for node in cluster.nodes if node.node_id != coordinator)
    with wire.Conn(cluster.node(bystander).broker_address, timeout=30) as conn:
        assert txn_wire.txn_offset_commit(conn, 1, TxnCommit(
            "txn-id", group, pending, 0, {(topic, 0): 8})) == {(topic, 0): NOT_COORDINATOR}

    cluster.kill(coordinator)
    wait_until(lambda: partition_state(cluster, OFFSETS_TOPIC, offsets_partition)[0]
               not in (-1, coordinator), TIMEOUT, "a new coordinator")
    successor, _ = partition_state(cluster, OFFSETS_TOPIC, offsets_partition)
    txn = Txn(cluster.node(successor).broker_address, topic, group)
    assert txn.fetch(require_stable=False) == (3, wire.NONE)
    assert txn.fetch(require_stable=True) == (-1, UNSTABLE_OFFSET_COMMIT)
    assert txn.end(pending, commit=True) == wire.NONE
    assert txn.fetch(require_stable=True) == (7, wire.NONE)
    txn.conn.close()


def test_send_offsets_to_transaction_commits_them_only_with_the_transaction(module_broker):
    """Consume-transform-produce with librdkafka's transactional producer on one broker: the
    coordinator writes the markers through its local append path, which must end the offsets
    pending in the group coordinator. committed() moves on commit, never on abort."""
    from confluent_kafka import OFFSET_INVALID, TopicPartition

    from e2e.support import ck_produce, make_records
    from e2e.test_transaction_coordinator import ck_txn_producer, values

    bootstrap = module_broker.bootstrap
    source, sink, group = unique("ctp-in"), unique("ctp-out"), unique("ctp-group")
    ck_create_topic(bootstrap, source)
    ck_create_topic(bootstrap, sink)
    ck_produce(bootstrap, source, make_records(10))
    consumer = ck_consumer(bootstrap, **{"group.id": group, "isolation.level": "read_committed"})
    producer = ck_txn_producer(bootstrap, unique("ctp-txn"))
    consumer.subscribe([source])
    consumed: list = []
    wait_until(lambda: consumed.extend(consumer.consume(10, 1)) or len(consumed) >= 10,
               TIMEOUT, "the input records")
    position = [TopicPartition(source, 0, consumed[-1].offset() + 1)]

    def output(message) -> bytes:
        return b"out-%d" % message.offset()

    def committed() -> int:
        [found] = consumer.committed([TopicPartition(source, 0)], timeout=15)
        return found.offset

    def transform(commit: bool) -> None:
        producer.begin_transaction()
        for message in consumed:
            producer.produce(sink, output(message), partition=0)
        producer.send_offsets_to_transaction(position, consumer.consumer_group_metadata(),
                                             TIMEOUT)
        if commit:
            producer.commit_transaction(TIMEOUT)
        else:
            producer.abort_transaction(TIMEOUT)

    try:
        transform(commit=False)
        assert committed() == OFFSET_INVALID
        transform(commit=True)
        assert committed() == 10
        assert values(bootstrap, sink, "read_committed") == \
            [output(message) for message in consumed]
    finally:
        consumer.close()

"""The partition side of transactions against real brokers and real consumers.

Transactional batches go in with raw Produce requests and are ended with raw WriteTxnMarkers
(what the transaction coordinator sends; see test_transaction_coordinator.py for real
transactional producers); librdkafka, kafka-python and Moldau consumers with
isolation.level=read_committed must then see exactly the committed records.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e import wire
from e2e.conftest import FAST_FAILOVER, Broker
from e2e.support import ck_consumer, ck_create_topic, kp_consumer, unique, wait_until
from e2e.test_cluster_failover import create_topic, partition_state
from moldau.cluster.launcher import LocalCluster, free_base_port

PLAIN = [b"plain-0", b"plain-1"]
COMMITTED = [b"c1", b"c2"]
ABORTED = [b"a1", b"a2", b"a3"]
TIMEOUT = 60.0
# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT
RETRIABLE = (14, 15, 19, 7)


# These tests act as the transaction coordinator themselves (transactional writes under
# made-up transactional ids, markers through WriteTxnMarkers), so the partition leaders must
# not ask a coordinator about them first (KIP-890 verification, see
# test_txn_verification.py).
UNVERIFIED = {"transaction.partition.verification.enable": "false"}


@pytest.fixture(name="broker")
def unverified_broker(broker_factory) -> Broker:
    return broker_factory(UNVERIFIED)


@pytest.fixture(name="cluster")
def unverified_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path / "cluster", brokers=3, base_port=free_base_port(3),
                         overrides={**FAST_FAILOVER, **UNVERIFIED})
    local.start(timeout=60)
    try:
        yield local
    finally:
        local.stop(timeout=30)


def fresh_producer_id(conn: wire.Conn) -> int:
    """A fresh idempotent producer id (retried while the broker is not ready to hand one
    out, as clients do)."""
    def granted() -> int | None:
        error, producer_id, _ = wire.init_producer_id(conn, 1)
        assert error in (wire.NONE, *RETRIABLE), f"InitProducerId error {error}"
        return producer_id if error == wire.NONE else None
    return wait_until(granted, TIMEOUT, "a producer id")


class Scenario:
    """plain-0 at 0, P1's c1-c2 at 1-2, P2's a1-a3 at 3-5, plain-1 at 6; P1 commits at 7,
    P2 aborts at 8."""

    def __init__(self, bootstrap: str, topic: str, acks: int = 1) -> None:
        self.conn = wire.Conn(bootstrap, timeout=30)
        self.topic = topic
        self.acks = acks
        self.p1, self.p2 = fresh_producer_id(self.conn), fresh_producer_id(self.conn)

    def produce_all(self) -> None:
        self.produce(wire.record_batch([PLAIN[0]]))
        self.produce(self.txn_batch(self.p1, COMMITTED), "txn-one")
        self.produce(self.txn_batch(self.p2, ABORTED), "txn-two")
        self.produce(wire.record_batch([PLAIN[1]]))

    def end(self, producer_id: int, commit: bool, coordinator_epoch: int = 0) -> int:
        marker = wire.TxnMarker(producer_id, 0, commit, {self.topic: [0]}, coordinator_epoch)
        return wire.write_txn_markers(self.conn, 20, [marker])[(producer_id, self.topic, 0)]

    def latest(self, isolation: int) -> int:
        error, _, offset = wire.list_offset(self.conn, 30, self.topic, 0,
                                            wire.LATEST_TIMESTAMP, isolation)
        assert error == wire.NONE
        return offset

    @staticmethod
    def txn_batch(producer_id: int, values: list[bytes]) -> bytes:
        return wire.record_batch(values, producer_id=producer_id, producer_epoch=0,
                                 base_sequence=0, transactional=True)

    def produce(self, batch: bytes, transactional_id: str | None = None) -> None:
        got = wire.produce(self.conn, 10, self.topic, 0, batch, acks=self.acks,
                           transactional_id=transactional_id)
        assert got.error_code == wire.NONE, got


def ck_read(bootstrap: str, topic: str, isolation: str, end: int) -> list[bytes]:
    """Values a librdkafka consumer gets from the start until its position reaches `end`."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    consumer = ck_consumer(bootstrap, **{"isolation.level": isolation})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        return _ck_poll_until(consumer, topic, end)
    finally:
        consumer.close()


def _ck_poll_until(consumer, topic: str, end: int) -> list[bytes]:
    from confluent_kafka import TopicPartition

    out: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    while consumer.position([TopicPartition(topic, 0)])[0].offset < end:
        assert time.monotonic() < deadline, f"stuck before {end}: got {out}"
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            out.append(msg.value())
    return out


def kp_read(bootstrap: str, topic: str, isolation: str, end: int) -> list[bytes]:
    from kafka import TopicPartition

    consumer = kp_consumer(bootstrap, isolation_level=isolation)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        out: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while consumer.position(tp, timeout_ms=15000) < end:
            assert time.monotonic() < deadline, f"stuck before {end}: got {out}"
            for msgs in consumer.poll(timeout_ms=500).values():
                out.extend(m.value for m in msgs)
        return out
    finally:
        consumer.close(autocommit=False)


def moldau_read(bootstrap: str, topic: str, isolation: str, end: int) -> list[bytes]:
    from moldau.client import Consumer, TopicPartition

    tp = TopicPartition(topic, 0)
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
                   "isolation.level": isolation, "fetch.max.wait.ms": 100}) as consumer:
        consumer.assign([tp])
        out: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while consumer.position(tp, timeout=15) < end:
            assert time.monotonic() < deadline, f"stuck before {end}: got {out}"
            out.extend(r.value for r in consumer.poll(0.5))
        return out


def assert_clients_see_only_committed(bootstrap: str, topic: str) -> None:
    committed = [PLAIN[0], *COMMITTED, PLAIN[1]]
    everything = [PLAIN[0], *COMMITTED, *ABORTED, PLAIN[1]]
    for read in (ck_read, kp_read, moldau_read):
        assert read(bootstrap, topic, "read_committed", 9) == committed, read.__name__
        assert read(bootstrap, topic, "read_uncommitted", 9) == everything, read.__name__


def test_read_committed_consumers_see_only_committed_records(broker) -> None:
    topic = unique("txn")
    ck_create_topic(broker.bootstrap, topic)
    run = Scenario(broker.bootstrap, topic)
    # As Kafka: transactional records need the request's transactional id.
    denied = wire.produce(run.conn, 3, topic, 0, run.txn_batch(run.p1, [b"x"]))
    assert denied.error_code == wire.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    run.produce_all()
    assert run.latest(wire.READ_COMMITTED) == 1  # the last stable offset: P1 is open
    assert run.latest(wire.READ_UNCOMMITTED) == 7

    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    consumer = ck_consumer(broker.bootstrap, **{"isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        assert _ck_poll_until(consumer, topic, 1) == [PLAIN[0]]
        # Nothing past the open transaction, however long the consumer waits.
        quiet_until = time.monotonic() + 3
        while time.monotonic() < quiet_until:
            msg = consumer.poll(0.5)
            assert msg is None or msg.error() is not None, msg.value()
        assert consumer.position([TopicPartition(topic, 0)])[0].offset == 1

        assert run.end(run.p1, commit=True, coordinator_epoch=5) == wire.NONE  # offset 7
        assert run.latest(wire.READ_COMMITTED) == 3  # P2 is still open
        assert _ck_poll_until(consumer, topic, 3) == COMMITTED
        assert run.end(run.p2, commit=False) == wire.NONE  # offset 8
        assert _ck_poll_until(consumer, topic, 9) == [PLAIN[1]]
    finally:
        consumer.close()
    assert run.latest(wire.READ_COMMITTED) == run.latest(wire.READ_UNCOMMITTED) == 9

    fetched = wire.fetch_partition(run.conn, 40, topic, 0, 0, wire.READ_COMMITTED)
    assert (fetched.last_stable_offset, fetched.aborted) == (9, [(run.p2, 3)])
    plain = wire.fetch_partition(run.conn, 41, topic, 0, 0, wire.READ_UNCOMMITTED)
    assert (plain.last_stable_offset, plain.aborted) == (9, None)
    assert_clients_see_only_committed(broker.bootstrap, topic)

    # The coordinator's own checks: an older coordinator epoch is fenced; unknown partitions.
    assert run.end(run.p1, commit=False, coordinator_epoch=4) == \
        wire.TRANSACTION_COORDINATOR_FENCED
    stray = wire.TxnMarker(run.p1, 0, True, {unique("missing"): [0]})
    assert list(wire.write_txn_markers(run.conn, 50, [stray]).values()) == \
        [wire.UNKNOWN_TOPIC_OR_PARTITION]
    run.conn.close()


def txnindex_files(data_dir: Path, topic: str) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((data_dir / f"{topic}-0").glob("*.txnindex"))}


def test_markers_replicate_and_a_new_leader_serves_read_committed(cluster: LocalCluster
                                                                   ) -> None:
    topic = unique("txn-replicated")
    create_topic(cluster.bootstrap_servers, topic, configs={"min.insync.replicas": "2"})
    leader, _ = partition_state(cluster, topic)
    wait_until(lambda: len(partition_state(cluster, topic)[1]) == 3, TIMEOUT, "a full ISR")
    run = Scenario(cluster.node(leader).broker_address, topic, acks=-1)
    run.produce_all()
    assert run.end(run.p1, commit=True) == wire.NONE
    assert run.end(run.p2, commit=False) == wire.NONE
    run.conn.close()
    nodes = [1, 2, 3]
    follower = next(n for n in nodes if n != leader)
    with wire.Conn(cluster.node(follower).broker_address, timeout=30) as conn:
        marker = wire.TxnMarker(run.p1, 0, True, {topic: [0]})
        assert list(wire.write_txn_markers(conn, 60, [marker]).values()) == \
            [wire.NOT_LEADER_OR_FOLLOWER]
    wait_until(lambda: all(txnindex_files(cluster.node(n).data_dir, topic) for n in nodes),
               TIMEOUT, "every replica to index the abort")
    leader_index = txnindex_files(cluster.node(leader).data_dir, topic)
    assert len(leader_index) == 1
    for node in nodes:
        assert txnindex_files(cluster.node(node).data_dir, topic) == leader_index

    cluster.kill(leader)
    wait_until(lambda: partition_state(cluster, topic)[0] not in (-1, leader), TIMEOUT,
               "a new leader")
    assert_clients_see_only_committed(cluster.bootstrap_servers, topic)


def test_an_open_transaction_holds_the_lso_across_restarts_and_crashes(broker) -> None:
    topic = unique("txn-restart")
    ck_create_topic(broker.bootstrap, topic)
    run = Scenario(broker.bootstrap, topic)
    run.produce_all()
    assert run.end(run.p1, commit=True) == wire.NONE  # P2 stays open from offset 3
    run.conn.close()
    for restart in (broker.restart, lambda: (broker.kill(), broker.start())):
        restart()
        run.conn = wire.Conn(broker.bootstrap, timeout=30)
        assert run.latest(wire.READ_COMMITTED) == 3, "the open transaction was forgotten"
        assert run.latest(wire.READ_UNCOMMITTED) == 8
        run.conn.close()
    run.conn = wire.Conn(broker.bootstrap, timeout=30)
    assert run.end(run.p2, commit=False) == wire.NONE
    run.conn.close()
    assert_clients_see_only_committed(broker.bootstrap, topic)

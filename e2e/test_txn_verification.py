"""Transaction verification (KIP-890 part 1): a transactional write that reaches a partition
leader after its transaction ended must not open a new transaction there.

The late write is sent by hand, as a produce request of an aborted transaction that was
still in flight when the abort's markers were written (librdkafka purges what it has not
sent, but not what is on the wire). Without verification the leader starts a transaction
for it, and the producer's next commit makes the aborted record visible (the G1a anomaly
the transactional fault-injection run found); with it, the leader asks the transaction
coordinator and refuses the write with INVALID_TXN_STATE.
"""

from __future__ import annotations

import pytest

from e2e import txn_wire, wire
from e2e.support import ck_create_topic, unique, wait_until
from e2e.test_cluster_failover import create_topic, partition_state
from e2e.test_transactions import TIMEOUT, ck_read
from moldau.cluster.launcher import LocalCluster

# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
# CONCURRENT_TRANSACTIONS: answers a producer retries.
RETRIABLE = (14, 15, 16, 51)


def retried(call, what: str) -> int:
    """The first answer of `call` that is not retriable."""
    def answer() -> tuple[int] | None:
        error = call()
        return None if error in RETRIABLE else (error,)
    return wait_until(answer, TIMEOUT, what)[0]


def coordinator_of(conn: wire.Conn, txn_id: str) -> int:
    """The node coordinating `txn_id` (FindCoordinator, retried until known)."""
    found: list[int] = []

    def find() -> int:
        error, node, _ = wire.find_coordinator(conn, 6, txn_id, wire.TRANSACTION_KEY)
        found.append(node)
        return error
    assert retried(find, f"the coordinator of {txn_id}") == wire.NONE
    return found[-1]


class Producer:
    """A transactional producer speaking raw requests: the coordinator on one connection,
    the partition leader (partition 0 of `topic`) on another."""

    def __init__(self, coordinator: wire.Conn, leader: wire.Conn, txn_id: str,
                 topic: str) -> None:
        self.coordinator, self.leader = coordinator, leader
        self.txn_id, self.topic = txn_id, topic
        self.sequence = 0
        coordinator_of(coordinator, txn_id)  # creates __transaction_state on first use
        granted: list[tuple[int, int]] = []

        def init() -> int:
            error, producer_id, epoch = wire.init_producer_id(coordinator, 1, txn_id)
            granted.append((producer_id, epoch))
            return error
        assert retried(init, "a transactional producer id") == wire.NONE
        self.producer_id, self.epoch = granted[-1]

    def add_partition(self) -> None:
        def add() -> int:
            [error] = txn_wire.add_partitions_to_txn(
                self.coordinator, 2, self.txn_id, self.producer_id, self.epoch,
                {self.topic: [0]}).values()
            return error
        assert retried(add, "partition 0 in the transaction") == wire.NONE

    def send(self, value: bytes) -> wire.ProducePartition:
        """A transactional produce at the next sequence (which moves on only if written)."""
        batch = wire.record_batch([value], producer_id=self.producer_id,
                                  producer_epoch=self.epoch, base_sequence=self.sequence,
                                  transactional=True)
        got = wire.produce(self.leader, 3, self.topic, 0, batch, acks=-1,
                           transactional_id=self.txn_id)
        if got.error_code == wire.NONE:
            self.sequence += 1
        return got

    def end(self, commit: bool) -> None:
        assert retried(lambda: wire.end_txn(self.coordinator, 4, 3, self.txn_id,
                                            self.producer_id, self.epoch, commit),
                       "the transaction to end") == wire.NONE
        # The markers are written once nothing is unstable on the partition.
        wait_until(lambda: self.end_offset(wire.READ_COMMITTED)
                   == self.end_offset(wire.READ_UNCOMMITTED), TIMEOUT, "the markers")

    def end_offset(self, isolation: int) -> int:
        error, _, offset = wire.list_offset(self.leader, 5, self.topic, 0,
                                            wire.LATEST_TIMESTAMP, isolation)
        assert error == wire.NONE
        return offset


def late_write_after_abort(producer: Producer, bootstrap: str, verified: bool) -> None:
    producer.add_partition()
    assert producer.send(b"aborted").error_code == wire.NONE
    producer.end(commit=False)
    end = producer.end_offset(wire.READ_UNCOMMITTED)

    late = producer.send(b"late")  # same producer id, epoch and next sequence
    if verified:
        assert late.error_code == txn_wire.INVALID_TXN_STATE, late
        assert late.error_message == "Partition was not added to the transaction"
        assert producer.end_offset(wire.READ_UNCOMMITTED) == end, "the late write was stored"
    else:
        assert late.error_code == wire.NONE, late

    # The producer's next transaction: the normal path is verified and written.
    producer.add_partition()
    assert producer.send(b"committed").error_code == wire.NONE
    producer.end(commit=True)
    seen = ck_read(bootstrap, producer.topic, "read_committed",
                   producer.end_offset(wire.READ_UNCOMMITTED))
    # Without verification the aborted transaction's late write is committed (G1a).
    assert seen == ([b"committed"] if verified else [b"late", b"committed"])


@pytest.mark.parametrize("verified", [True, False], ids=["verified", "unverified"])
def test_a_write_arriving_after_its_transaction_aborted(broker_factory, verified: bool
                                                         ) -> None:
    broker = broker_factory(
        {"transaction.partition.verification.enable": str(verified).lower()})
    topic = unique("txn-late")
    ck_create_topic(broker.bootstrap, topic)
    with wire.Conn(broker.bootstrap, timeout=30) as conn:
        producer = Producer(conn, conn, unique("late-writer"), topic)
        late_write_after_abort(producer, broker.bootstrap, verified)


def test_a_leader_asks_the_coordinator_on_another_broker(cluster: LocalCluster) -> None:
    """The verification crosses brokers (AddPartitionsToTxn v5, VerifyOnly)."""
    topic = unique("txn-late-remote")
    create_topic(cluster.bootstrap_servers, topic)
    leader, _ = partition_state(cluster, topic)
    with wire.Conn(cluster.node(leader).broker_address, timeout=30) as conn:
        txn_id = next(name for name in (unique("late-remote") for _ in range(100))
                      if coordinator_of(conn, name) != leader)
        node = coordinator_of(conn, txn_id)
    with wire.Conn(cluster.node(node).broker_address, timeout=30) as coordinator, \
            wire.Conn(cluster.node(leader).broker_address, timeout=30) as on_leader:
        producer = Producer(coordinator, on_leader, txn_id, topic)
        late_write_after_abort(producer, cluster.bootstrap_servers, verified=True)

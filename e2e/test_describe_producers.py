"""DescribeProducers (KIP-664) against real broker processes: the producer state of a
partition as any of its replicas holds it, and of a `__consumer_offsets` partition while a
transaction's offsets are pending there."""

from __future__ import annotations

import pytest

from e2e import wire
from e2e.support import ck_create_topic, unique, wait_until
from e2e.test_cluster_failover import create_topic, partition_state
from e2e.test_transactions import (  # the cluster's brokers do not verify
    UNVERIFIED,
    Scenario,
    unverified_cluster,  # noqa: F401
)
from e2e.test_txn_offsets import Txn
from e2e.txn_wire import describe_producers
from moldau.cluster.launcher import LocalCluster

pytestmark = pytest.mark.timeout(180)
# Scenario writes transactions by hand as its own coordinator (see test_transactions.py).
BROKER_OVERRIDES = UNVERIFIED
TIMEOUT = 60.0


def states(conn: wire.Conn, topic: str, partition: int = 0) -> dict[int, tuple[int, ...]]:
    """{producer id: (epoch, last sequence, coordinator epoch, transaction start)}."""
    error, producers = describe_producers(conn, 3, topic, partition)
    assert error == wire.NONE
    return {p.producer_id: (p.epoch, p.last_sequence, p.coordinator_epoch, p.txn_start_offset)
            for p in producers}


def test_producers_of_a_partition_and_their_transactions(module_broker):
    topic = unique("dp")
    ck_create_topic(module_broker.bootstrap, topic)
    run = Scenario(module_broker.bootstrap, topic)
    assert states(run.conn, topic) == {}
    run.produce_all()  # P1's 2 records at 1-2, P2's 3 at 3-5, both open
    assert states(run.conn, topic) == {run.p1: (0, 1, -1, 1), run.p2: (0, 2, -1, 3)}
    error, producers = describe_producers(run.conn, 4, topic, 0)
    assert all(p.last_timestamp > 0 for p in producers)

    assert run.end(run.p1, commit=True, coordinator_epoch=5) == wire.NONE
    assert states(run.conn, topic) == {run.p1: (0, 1, 5, -1), run.p2: (0, 2, -1, 3)}

    assert describe_producers(run.conn, 5, topic, 1) == (wire.UNKNOWN_TOPIC_OR_PARTITION, [])
    assert describe_producers(run.conn, 6, unique("dp-none"), 0) == \
        (wire.UNKNOWN_TOPIC_OR_PARTITION, [])
    run.conn.close()


def test_a_pending_offset_commit_is_an_open_transaction_of_the_offsets_partition(
        module_broker):
    topic = unique("dp-offsets")
    ck_create_topic(module_broker.bootstrap, topic)
    txn = Txn(module_broker.bootstrap, topic, unique("dp-group"))
    producer = txn.producer()
    assert txn.commit_offsets(producer, 5) == wire.NONE
    open_txn = states(txn.conn, "__consumer_offsets", txn.offsets_partition)[producer]
    assert open_txn[0] == 0 and open_txn[3] >= 0  # epoch 0, an ongoing transaction
    assert txn.end(producer, commit=True) == wire.NONE
    assert states(txn.conn, "__consumer_offsets", txn.offsets_partition)[producer][3] == -1
    txn.conn.close()


def test_a_follower_answers_and_a_node_without_a_replica_refuses(cluster: LocalCluster):
    topic = unique("dp-replicas")
    create_topic(cluster.bootstrap_servers, topic, factor=2)
    wait_until(lambda: len(partition_state(cluster, topic)[1]) == 2, TIMEOUT, "a full ISR")
    leader, isr = partition_state(cluster, topic)
    run = Scenario(cluster.node(leader).broker_address, topic, acks=-1)
    run.produce_all()
    expected = {run.p1: (0, 1, -1, 1), run.p2: (0, 2, -1, 3)}
    assert states(run.conn, topic) == expected
    run.conn.close()
    [follower] = [node for node in isr if node != leader]
    [outsider] = [node.node_id for node in cluster.nodes if node.node_id not in isr]
    with wire.Conn(cluster.node(follower).broker_address, timeout=30) as conn:
        wait_until(lambda: states(conn, topic) == expected, TIMEOUT,
                   "the follower's producer state")
    with wire.Conn(cluster.node(outsider).broker_address, timeout=30) as conn:
        assert describe_producers(conn, 3, topic, 0) == (wire.NOT_LEADER_OR_FOLLOWER, [])

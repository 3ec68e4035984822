"""The Kafka side of rolling and scaling against real broker processes (LocalCluster, four
nodes: three broker+controller voters and broker-only node 4): the KafkaView with real ISRs
and min.insync.replicas as canRoll reads them, a drain of node 4 by reassignment with every
record intact, its unregistration, a refused drain, and a rebalance after node 4 joined.

The drain also measures how long moving a broker's data takes (MOLDAU_DRAIN_MB, default 64,
the megabytes node 4 holds), printed per GB."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from e2e.conftest import FAST_FAILOVER
from e2e.support import ck_consume_all, ck_producer, unique, wait_until
from moldau.client.admin import AsyncAdmin, NewTopic
from moldau.cluster import LocalCluster, free_base_port
from moldau.operator.balance import is_balanced
from moldau.operator.drain import holding
from moldau.operator.kafkaview import KafkaView, read_view
from moldau.operator.pools import ScaleDown
from moldau.operator.roll_safety import broker_blockers, unsettled
from moldau.operator.scaler import (
    COMPLETE,
    DRAIN_NOT_POSSIBLE,
    Drains,
    drain_step,
    rebalance_step,
    scale_up_request,
    unregister,
)
from tests.operator.cluster_admin import TIMEOUT, with_admin

pytestmark = pytest.mark.timeout(900)
T = TypeVar("T")
DRAIN_MB = int(os.environ.get("MOLDAU_DRAIN_MB", "64"))
VALUE = b"x" * 100_000


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("scaler") / "cluster", brokers=4, voters=3,
                      base_port=free_base_port(4), overrides=FAST_FAILOVER) as local:
        yield local


def view_of(cluster: LocalCluster) -> KafkaView:
    return with_admin(cluster, lambda admin: read_view(admin, TIMEOUT))


async def drain_now(admin: AsyncAdmin, downs: list[ScaleDown]) -> Drains:
    return await drain_step(admin, await read_view(admin, TIMEOUT), downs, {1, 2, 3, 4},
                            TIMEOUT)


async def rebalance_now(admin: AsyncAdmin, state: dict) -> tuple[dict, list]:
    return await rebalance_step(admin, await read_view(admin, TIMEOUT), state, [1, 2, 3, 4],
                                TIMEOUT)


def poll(check: Callable[[], T], timeout: float, what: str) -> T:
    return wait_until(check, timeout, what, 0.5)  # type: ignore[return-value]


def create(cluster: LocalCluster, name: str, assignment: dict[int, list[int]],
           configs: dict[str, str] | None = None) -> None:
    with_admin(cluster, lambda admin: admin.create_topics(
        [NewTopic(name, replica_assignment=assignment, configs=configs or {})]))


def test_can_roll_reads_real_isrs_and_min_insync_replicas(four: LocalCluster) -> None:
    topic = unique("canroll")
    create(four, topic, {0: [1, 2, 3], 1: [2, 3, 1]}, {"min.insync.replicas": "2"})
    seen = poll(lambda: (v := view_of(four)) and all(
        len(p.isr) == 3 for p in v.partitions if p.topic == topic) and v, 30, "full ISRs")
    assert seen.min_isr[topic] == 2
    assert broker_blockers(1, seen) == []
    assert four.stop_node(3)
    try:
        # Node 3 leaves the ISRs: each now holds min.insync.replicas members.
        seen = poll(lambda: (v := view_of(four)) and all(
            p.isr in ((1, 2), (2, 1)) for p in v.partitions if p.topic == topic) and v,
            60, "node 3 out of the ISRs")
        assert broker_blockers(1, seen) == [
            f"{topic}-0, {topic}-1 would go under min.insync.replicas"]
        assert broker_blockers(3, seen) == []
    finally:
        four.start_node(3)
    # Back: the roller waits until node 3 is in sync again, then nothing holds it.
    poll(lambda: not unsettled(view_of(four)), 120, "the cluster to settle")
    assert broker_blockers(1, view_of(four)) == []


def produce_mb(cluster: LocalCluster, topic: str, megabytes: int, partitions: int) -> int:
    producer = ck_producer(cluster.bootstrap_servers, acks="all", **{"linger.ms": 20})
    count = megabytes * 1_000_000 // len(VALUE)
    for n in range(count):
        producer.produce(topic, VALUE, key=str(n).encode(), partition=n % partitions)
        if n % 50 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return count


def test_a_drain_moves_every_replica_off_the_leaving_broker(four: LocalCluster) -> None:
    topic = unique("drain")
    create(four, topic, {p: [4, 1 + p % 3, 1 + (p + 1) % 3] for p in range(6)})
    count = produce_mb(four, topic, DRAIN_MB, 6)
    down = ScaleDown("brokers", 3, 4, (4,))
    started = time.monotonic()

    def step() -> bool:
        done = with_admin(four, lambda admin: drain_now(admin, [down]))
        assert done.refusals == []
        return done.shrink == {"brokers": 3}

    poll(step, 600, "node 4 drained")
    took = time.monotonic() - started
    megabytes = count * len(VALUE) / 1e6
    print(f"drained {megabytes:.0f} MB off node 4 in {took:.1f} s: {took * 1000 / megabytes:.0f}"
          f" s per GB ({megabytes / took:.1f} MB/s)")
    seen = view_of(four)
    assert holding(seen.assignment(), [4]) == {}
    dirs = with_admin(four, lambda admin: admin.describe_log_dirs([4]))[4]
    assert sum(len(d.replicas) for d in dirs.values()) == 0
    # Every record is there, read from the remaining brokers.
    assert four.stop_node(4)
    try:
        records = ck_consume_all(four.node(1).broker_address, topic, range(6))
        assert sorted(int(r.key) for r in records) == list(range(count))

        def fenced() -> bool:
            found = with_admin(four, lambda admin: admin.describe_cluster(
                include_fenced_brokers=True))
            return 4 in found.fenced

        poll(fenced, 60, "node 4 fenced")
        with_admin(four, lambda admin: unregister(admin, [4, 4], TIMEOUT))
        after = with_admin(four, lambda admin: admin.describe_cluster(
            include_fenced_brokers=True))
        assert sorted(node.node_id for node in after.nodes) == [1, 2, 3]
    finally:
        four.start_node(4)


def test_a_drain_that_cannot_complete_is_refused_and_moves_nothing(four: LocalCluster
                                                                   ) -> None:
    topic = unique("wide")
    create(four, topic, {0: [1, 2, 3, 4]})
    before = view_of(four).assignment()
    down = ScaleDown("brokers", 3, 4, (4,))
    done = with_admin(four, lambda admin: drain_now(admin, [down]))
    assert done.shrink == {}
    assert [r.reason for r in done.refusals] == [DRAIN_NOT_POSSIBLE]
    assert done.refusals[0].message.startswith(
        f"cannot remove brokers 4: topic '{topic}' has replication factor 4, and only 3 "
        "brokers would remain (1, 2, 3)")
    assert done.status[0]["phase"] == "Refused"
    assert view_of(four).assignment() == before
    with_admin(four, lambda admin: admin.delete_topics([topic]))


def test_a_rebalance_spreads_replicas_and_leaderships_over_a_new_broker(four: LocalCluster
                                                                        ) -> None:
    # Everything on nodes 1-3, as before node 4 joined.
    for name in [n for n in view_of(four).min_isr if not n.startswith("__")]:
        with_admin(four, lambda admin, name=name: admin.delete_topics([name]))
    topic = unique("spread")
    create(four, topic, {p: [1 + p % 3, 1 + (p + 1) % 3] for p in range(12)})
    state = scale_up_request({"brokers": (4,)})
    events = []

    def step() -> bool:
        nonlocal state
        state, happened = with_admin(four, lambda admin: rebalance_now(admin, state))
        events.extend(happened)
        return state["state"] == COMPLETE

    poll(step, 300, "a balanced cluster")
    seen = poll(lambda: (v := view_of(four)) and not v.moving and v, 60, "moves done")
    assert is_balanced(seen.assignment(), [1, 2, 3, 4])
    assert [reason for reason, _, _ in events] == ["RebalanceStarted", "Rebalanced"]
    assert state["message"].startswith("balanced: replicas per broker ")
    # The preferred leaders lead (once caught up).
    poll(lambda: all(p.leader == p.replicas[0] for p in view_of(four).partitions), 60,
         "preferred leaders")


def test_an_unknown_broker_is_unregistered_already(four: LocalCluster) -> None:
    # The cleanup step is safe to repeat: an id the controller does not know is done.
    with_admin(four, lambda admin: unregister(admin, [77], TIMEOUT))

"""Partition assignment strategies through the broker: the coordinator picks the protocol all
members support and hands the leader's assignment to each member, whatever the client.
range, roundrobin and sticky with kafka-python and aiokafka, range, roundrobin and
cooperative-sticky with librdkafka, and an incremental (cooperative) rebalance.
"""

from __future__ import annotations

import time

import pytest

from e2e.support import (
    ck_create_topic,
    ck_describe_group,
    ck_produce_numbered,
    unique,
    wait_split,
)

BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": 0}


def topic_with(bootstrap: str, partitions: int) -> tuple[str, set[tuple[str, int]]]:
    topic = unique("assign")
    ck_create_topic(bootstrap, topic, partitions)
    return topic, {(topic, p) for p in range(partitions)}


EXPECTED = {
    "range": [{0, 1, 2}, {3, 4, 5}],
    "roundrobin": [{0, 2, 4}, {1, 3, 5}],
}


@pytest.mark.parametrize("clients, strategy", [
    (("kp", "aio"), "range"),
    (("kp", "aio"), "roundrobin"),
    (("ck", "ck"), "range"),
    (("ck", "ck"), "roundrobin"),
])
def test_two_members_split_by_strategy(module_broker, group_workers, clients, strategy):
    bootstrap = module_broker.bootstrap
    topic, everything = topic_with(bootstrap, 6)
    group = unique(f"g-{strategy}")
    # Each member also offers the other strategy, second: the first choice must win.
    fallback = "roundrobin" if strategy == "range" else "range"
    workers = [group_workers.start(client, bootstrap, group, [topic],
                                   assignor=[strategy, fallback])
               for client in clients]
    split = wait_split(workers, everything, timeout=30)
    got = sorted(({p for _, p in part} for part in split), key=min)
    assert got == EXPECTED[strategy]
    description = ck_describe_group(bootstrap, group)
    assert description.partition_assignor == strategy
    for worker in workers:
        worker.close()


def test_strategy_chosen_by_member_votes(module_broker, group_workers):
    """All members support range and roundrobin; two list roundrobin first, one range:
    Kafka has each member vote for its first choice, so roundrobin wins."""
    bootstrap = module_broker.bootstrap
    topic, everything = topic_with(bootstrap, 6)
    group = unique("g-vote")
    workers = [group_workers.start("ck", bootstrap, group, [topic],
                                   assignor=["range", "roundrobin"]),
               group_workers.start("kp", bootstrap, group, [topic],
                                   assignor=["roundrobin", "range"]),
               group_workers.start("aio", bootstrap, group, [topic],
                                   assignor=["roundrobin", "range"])]
    split = wait_split(workers, everything, timeout=30)
    assert sorted(({p for _, p in part} for part in split), key=min) == [{0, 3}, {1, 4}, {2, 5}]
    assert ck_describe_group(bootstrap, group).partition_assignor == "roundrobin"
    for worker in workers:
        worker.close()


def test_only_common_strategy_is_chosen(module_broker, group_workers):
    """range is nobody's first choice but the only one both support: it is chosen."""
    bootstrap = module_broker.bootstrap
    topic, everything = topic_with(bootstrap, 6)
    group = unique("g-common")
    workers = [group_workers.start("kp", bootstrap, group, [topic],
                                   assignor=["sticky", "range"]),
               group_workers.start("aio", bootstrap, group, [topic],
                                   assignor=["roundrobin", "range"])]
    split = wait_split(workers, everything, timeout=30)
    assert sorted(({p for _, p in part} for part in split), key=min) == EXPECTED["range"]
    assert ck_describe_group(bootstrap, group).partition_assignor == "range"
    for worker in workers:
        worker.close()


# One client per group: kafka-python 3 prefixes its sticky user data with a version that
# aiokafka's sticky assignor does not read, so a mixed group is not sticky when aiokafka leads.
@pytest.mark.parametrize("clients", [("kp", "kp", "kp"), ("aio", "aio", "aio")])
def test_sticky_assignor_keeps_partitions_when_a_member_joins(module_broker, group_workers,
                                                              clients):
    """sticky: the assignor's user data (each member's previous partitions) travels through
    the coordinator, so a third member takes partitions without shuffling the others."""
    bootstrap = module_broker.bootstrap
    topic, everything = topic_with(bootstrap, 6)
    group = unique("g-sticky")
    first, second = (group_workers.start(c, bootstrap, group, [topic], assignor=["sticky"])
                     for c in clients[:2])
    before = wait_split([first, second], everything, timeout=30)
    third = group_workers.start(clients[2], bootstrap, group, [topic], assignor=["sticky"])
    after = wait_split([first, second, third], everything, timeout=30)
    assert [len(part) for part in after] == [2, 2, 2]
    assert after[0] <= before[0] and after[1] <= before[1], (before, after)
    assert ck_describe_group(bootstrap, group).partition_assignor == "sticky"
    for worker in (first, second, third):
        worker.close()


def test_cooperative_sticky_incremental_rebalance(module_broker, group_workers):
    """cooperative-sticky (librdkafka): when a second member joins, only the partitions that
    move are revoked from the first member, which keeps consuming the rest throughout."""
    bootstrap = module_broker.bootstrap
    topic, everything = topic_with(bootstrap, 6)
    group = unique("g-coop")
    first = group_workers.start("ck", bootstrap, group, [topic],
                                assignor=["cooperative-sticky"])
    wait_split([first], everything, timeout=30, hold=0.5)
    assert first.of("revoked") == []
    joined_at = time.monotonic()
    second = group_workers.start("ck", bootstrap, group, [topic],
                                 assignor=["cooperative-sticky"])
    kept, moved = wait_split([first, second], everything, timeout=30)
    assert len(kept) == len(moved) == 3
    revoked = [set(map(tuple, e["tps"])) for e in first.of("revoked")]
    assert set().union(*revoked) == moved, f"revoked {revoked}, moved {moved}"
    # Every report of the first member's partitions since the join still holds what it kept.
    for report in first.of("assignment"):
        if report["t"] >= joined_at:
            assert kept <= {tuple(tp) for tp in report["tps"]}, report
    # Incremental: the second member was only ever given partitions, never had any taken.
    assert second.of("revoked") == []
    assert ck_describe_group(bootstrap, group).partition_assignor == "cooperative-sticky"

    produced = ck_produce_numbered(bootstrap, topic, range(60), 6)
    deadline = time.monotonic() + 20
    while True:
        seen = {(p, o) for w in (first, second) for b in w.of("batch") for _, p, o, _ in b["recs"]}
        if seen >= set(produced):
            break
        assert time.monotonic() < deadline, f"{len(seen)} of {len(produced)} read"
        time.sleep(0.2)
    for worker in (first, second):
        worker.close()

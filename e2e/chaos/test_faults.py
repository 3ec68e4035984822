"""Each fault on a real cluster in network namespaces: it takes effect, it is logged, and
healing undoes it."""

from __future__ import annotations

import time

import pytest

from e2e.chaos.disks import NodeDisk
from e2e.chaos.faults import Faults, FaultUnavailable, partition_leader, quorum_leader_seen_by
from e2e.chaos.net import TestNetwork, can_connect, datagrams_delivered
from e2e.support import ck_consume_all, ck_produce, make_records, wait_until
from e2e.test_cluster_failover import create_topic, replica_records
from moldau.cluster.launcher import LocalCluster

SESSION_TIMEOUT = 3.0  # broker.session.timeout.ms of CHAOS_SETTINGS, in seconds


def connects(network: TestNetwork, cluster: LocalCluster, src: int, dst: int) -> bool:
    return can_connect(network.node(src), network.node(dst).address,
                       cluster.node(dst).broker_port, timeout=1.0)


def test_partitions_cut_the_chosen_links_and_heal(chaos_cluster: LocalCluster,
                                                  chaos_net: TestNetwork) -> None:
    faults = Faults(chaos_cluster, chaos_net)
    one_way = faults.one_way(1, 2)
    assert not connects(chaos_net, chaos_cluster, 1, 2)
    # Only packets from 1 arriving at 2 are dropped: other links are untouched.
    assert connects(chaos_net, chaos_cluster, 1, 3)
    assert connects(chaos_net, chaos_cluster, 3, 2)
    split = faults.partition([{1, 2}, {3}])
    assert not connects(chaos_net, chaos_cluster, 3, 1)
    assert not connects(chaos_net, chaos_cluster, 2, 3)
    faults.heal(one_way)  # overlapping faults heal one at a time
    assert connects(chaos_net, chaos_cluster, 1, 2)
    assert not connects(chaos_net, chaos_cluster, 1, 3)
    faults.heal(split)
    assert all(connects(chaos_net, chaos_cluster, a, b)
               for a in (1, 2, 3) for b in (1, 2, 3) if a != b)
    assert [(e.action, e.fault) for e in faults.events] == [
        ("start", "one-way 1->2"), ("start", "partition 1,2 | 3"),
        ("heal", "one-way 1->2"), ("heal", "partition 1,2 | 3")]
    walls = [event.wall for event in faults.events]
    assert walls == sorted(walls)


def test_isolating_the_active_controller_moves_the_quorum(chaos_cluster: LocalCluster,
                                                          chaos_net: TestNetwork) -> None:
    faults = Faults(chaos_cluster, chaos_net)
    old = chaos_cluster.active_controller()
    fault = faults.isolate_controller()
    assert fault.name == f"partition {old} | " + ",".join(
        str(n) for n in (1, 2, 3) if n != old) + " (active controller)"
    others = [n for n in (1, 2, 3) if n != old]
    wait_until(lambda: quorum_leader_seen_by(chaos_cluster, others) not in (-1, old), 30,
               "a new quorum leader among the majority")
    faults.heal_all()
    chaos_cluster.wait_ready(60)


def test_pause_past_the_session_timeout_fences_the_broker_until_resumed(
        chaos_cluster: LocalCluster, chaos_net: TestNetwork) -> None:
    faults = Faults(chaos_cluster, chaos_net)
    victim = 3
    pause = faults.pause(victim)
    others = [1, 2]
    chaos_cluster.wait_until(lambda view: victim not in view.broker_ids,
                             SESSION_TIMEOUT * 10, "the paused broker fenced", ask=others)
    faults.heal(pause)
    chaos_cluster.wait_until(lambda view: victim in view.broker_ids, 60,
                             "the resumed broker registered again", ask=others)
    crash = faults.crash(victim)
    assert not chaos_cluster.node(victim).alive
    faults.heal(crash)
    chaos_cluster.wait_ready(60, nodes=[victim], ask=[victim])


def test_netem_adds_delay_or_says_why_it_cannot(chaos_cluster: LocalCluster,
                                                chaos_net: TestNetwork) -> None:
    faults = Faults(chaos_cluster, chaos_net)
    try:
        fault = faults.netem(1, delay_ms=300)
    except FaultUnavailable as exc:
        assert "tc netem is not available here" in str(exc)
        assert "sch_netem" in str(exc)
        pytest.xfail(str(exc))
    started = time.monotonic()
    assert connects(chaos_net, chaos_cluster, 2, 1)
    assert time.monotonic() - started >= 0.3
    faults.heal(fault)


def test_jepsen_partition_shapes_and_packet_loss(chaos_cluster: LocalCluster,
                                                 chaos_net: TestNetwork) -> None:
    faults = Faults(chaos_cluster, chaos_net)
    pairs = [(a, b) for a in (1, 2, 3) for b in (1, 2, 3) if a != b]

    def reachable() -> set[tuple[int, int]]:
        return {(a, b) for a, b in pairs if connects(chaos_net, chaos_cluster, a, b)}

    apart = faults.all_apart()
    assert apart.name == "partition 1 | 2 | 3"
    assert reachable() == set()
    faults.heal(apart)
    bridge = faults.bridge(2)  # {1, 2} and {2, 3}: 2 sees both, 1 and 3 do not meet
    assert bridge.name == "bridge 1 | 2 | 3"
    assert reachable() == {(1, 2), (2, 1), (2, 3), (3, 2)}
    faults.heal(bridge)
    ring = faults.ring()  # three nodes: one-way, each hears only the node before it
    assert ring.name == "ring 3->1 1->2 2->3"
    heard = {(a, b) for a, b in pairs
             if datagrams_delivered(chaos_net.node(a), chaos_net.node(b), 5) == 5}
    assert heard == {(3, 1), (1, 2), (2, 3)}
    assert all(datagrams_delivered(chaos_net.node(a), chaos_net.node(b), 5) == 0
               for a, b in set(pairs) - heard)
    faults.heal(ring)
    assert reachable() == set(pairs)

    # Loss without netem: nft's numgen drops each packet with the given chance.
    loss = faults.loss(50, 1, 2)
    delivered = datagrams_delivered(chaos_net.node(1), chaos_net.node(2), 400)
    seen, dropped = faults.counters(loss)
    assert 120 <= delivered <= 280, delivered
    # The chain also counts the brokers' own packets from node 1.
    assert seen >= 400 and dropped >= 400 - delivered and 0.3 < dropped / seen < 0.7
    assert datagrams_delivered(chaos_net.node(2), chaos_net.node(1), 100) == 100  # one way
    faults.heal(loss)
    both = faults.loss(100, 1, 3, both_ways=True)
    assert datagrams_delivered(chaos_net.node(3), chaos_net.node(1), 20) == 0
    assert not connects(chaos_net, chaos_cluster, 1, 3)
    faults.heal(both)
    assert datagrams_delivered(chaos_net.node(1), chaos_net.node(2), 100) == 100
    assert [e.fault for e in faults.events if e.action == "start"] == [
        "partition 1 | 2 | 3", "bridge 1 | 2 | 3", "ring 3->1 1->2 2->3", "loss 50% 1->2",
        "loss 100% 1<->3"]


def test_isolating_the_leader_of_a_partition_moves_its_leadership(
        chaos_cluster: LocalCluster, chaos_net: TestNetwork) -> None:
    bootstrap = chaos_cluster.bootstrap_servers
    create_topic(bootstrap, "isolated", 1, 3, {"min.insync.replicas": "2"})
    chaos_cluster.wait_until(
        lambda view: any(p.topic == "isolated" and p.leader > 0 for p in view.partitions),
        30, "a leader of isolated-0")
    faults = Faults(chaos_cluster, chaos_net)
    old = partition_leader(chaos_cluster, "isolated")
    fault = faults.isolate_leader("isolated")
    others = [n for n in (1, 2, 3) if n != old]
    assert fault.name == f"partition {old} | {','.join(map(str, others))} (leader of isolated-0)"
    assert not connects(chaos_net, chaos_cluster, old, others[0])
    assert connects(chaos_net, chaos_cluster, others[0], others[1])

    def led_by_majority(view) -> bool:
        entry = next(p for p in view.partitions if p.topic == "isolated")
        return entry.leader in others and old not in entry.isr

    chaos_cluster.wait_until(led_by_majority, 30, "a new leader of isolated-0 in the majority",
                             ask=others)
    # Through the majority: the cut-off node still believes it leads (it cannot learn
    # otherwise), and a client that asks it first waits on it, as it would on Kafka.
    majority = ",".join(chaos_cluster.node(n).broker_address for n in others)
    ck_produce(majority, "isolated", make_records(20), acks="all")
    faults.heal(fault)

    def rejoined(view) -> bool:
        entry = next(p for p in view.partitions if p.topic == "isolated")
        return entry.leader in others and len(entry.isr) == 3

    # Every node's own view: the old leader answers from its stale one until it catches up.
    for node in (old, *others):
        chaos_cluster.wait_until(rejoined, 60, "the old leader back in the ISR", ask=[node])
    assert len(ck_consume_all(bootstrap, "isolated")) == 20


def test_a_power_cut_of_the_leader_loses_its_unsynced_records_but_no_acknowledged_one(
        chaos_cluster: LocalCluster, chaos_net: TestNetwork,
        chaos_disks: dict[int, NodeDisk]) -> None:
    """Kafka's model: a log is not fsynced per write (flush.messages), acks=all with
    min.insync.replicas=2 keeps every acknowledged record on another replica, and the node
    that lost its tail catches up from the leader before it is in the ISR again."""
    bootstrap = chaos_cluster.bootstrap_servers
    create_topic(bootstrap, "powercut", 1, 3, {"min.insync.replicas": "2"})
    chaos_cluster.wait_until(lambda view: not view.under_replicated and any(
        p.topic == "powercut" and p.leader > 0 for p in view.partitions), 30, "a full ISR")
    before = [rec.value for rec in make_records(300, seed=1)]
    after = [rec.value for rec in make_records(300, seed=2)]
    ck_produce(bootstrap, "powercut", make_records(300, seed=1), acks="all")
    faults = Faults(chaos_cluster, chaos_net, disks=chaos_disks)
    victim = partition_leader(chaos_cluster, "powercut")
    fault = faults.crash_losing_unsynced(victim, " (leader of powercut-0)")
    assert faults.lost_bytes[victim] > 0, fault.name
    # The records were in the page cache only: the cut took them from this replica.
    assert len(replica_records(chaos_cluster, victim, "powercut")) < len(before)
    ck_produce(bootstrap, "powercut", make_records(300, seed=2), acks="all")
    faults.heal(fault)
    chaos_cluster.wait_ready(90, nodes=[victim], ask=[victim])
    chaos_cluster.wait_until(lambda view: not view.under_replicated, 90,
                             "the node that lost its tail back in every ISR")
    read = [rec.value for rec in ck_consume_all(bootstrap, "powercut")]
    assert read == before + after
    chaos_cluster.stop(timeout=30)
    stored = [replica_records(chaos_cluster, node, "powercut") for node in (1, 2, 3)]
    assert all(entries == stored[0] for entries in stored)
    assert [value for _, value in stored[0]] == before + after

"""Each fault on a real cluster in network namespaces: it takes effect, it is logged, and
healing undoes it."""

from __future__ import annotations

import time

import pytest

from e2e.chaos.faults import Faults, FaultUnavailable, quorum_leader_seen_by
from e2e.chaos.net import TestNetwork, can_connect
from e2e.support import wait_until
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

"""The operator's view of a cluster, read over the Kafka protocol from real broker processes
(moldau.cluster.LocalCluster), and the readiness decision made from it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from moldau.cluster import LocalCluster, free_base_port
from moldau.operator.clusterstate import (
    Expected,
    Observed,
    ObserveError,
    assess,
    observe,
)

ALL = Expected(brokers=frozenset({1, 2, 3}), controllers=frozenset({1, 2, 3}))


def read(cluster: LocalCluster) -> Observed:
    return asyncio.run(observe(cluster.bootstrap_servers.split(","), timeout=10))


def test_a_started_cluster_is_ready_with_its_id_and_quorum_leader(cluster) -> None:
    seen = read(cluster)
    assert seen.brokers == {1, 2, 3}
    assert seen.voters == {1, 2, 3}
    assert seen.leader_id == cluster.quorum().leader_id
    assert seen.leader_epoch >= 1
    assert seen.cluster_id == cluster.cluster_id
    verdict = assess(ALL, seen)
    assert verdict.ready and verdict.reason == "Ready"
    assert verdict.message == (f"3 brokers registered; quorum leader {seen.leader_id} in "
                               f"epoch {seen.leader_epoch}")


def test_a_stopped_broker_is_named_as_not_registered(cluster) -> None:
    cluster.stop_node(3)
    try:
        def missing() -> bool:
            return 3 not in read(cluster).brokers
        assert asyncio.run(_wait(missing, 60)), "node 3 stayed registered"
        verdict = assess(ALL, read(cluster))
        assert not verdict.ready
        assert (verdict.reason, verdict.message) == ("BrokersNotRegistered",
                                                     "brokers 3 are not registered")
    finally:
        cluster.start_node(3)


async def _wait(check, timeout: float) -> bool:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        if await asyncio.to_thread(check):
            return True
        await asyncio.sleep(0.5)
    return False


def test_more_controllers_in_the_spec_than_in_the_quorum_is_not_ready(cluster) -> None:
    more = Expected(brokers=frozenset({1, 2, 3}), controllers=frozenset({1, 2, 3, 4}))
    verdict = assess(more, read(cluster))
    assert (verdict.ready, verdict.reason) == (False, "VotersMismatch")
    assert verdict.message == "the quorum's voters are 1, 2, 3, the spec's controllers 1, 2, 3, 4"


def test_an_unreachable_cluster_is_one_line_naming_the_address(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_base_port(1)}"
    with pytest.raises(ObserveError) as raised:
        asyncio.run(observe([address], timeout=2))
    assert str(raised.value).startswith(f"{address}: ")
    assert "\n" not in str(raised.value)
    verdict = assess(ALL, None, str(raised.value))
    assert (verdict.ready, verdict.reason) == (False, "ClusterUnreachable")


def test_no_leader_is_reported_before_anything_else() -> None:
    seen = Observed("id", frozenset(), -1, 3, frozenset({1}), frozenset())
    assert assess(ALL, seen).reason == "NoQuorumLeader"

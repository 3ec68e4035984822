"""spec.replicationThrottle around the operator's partition moves, against real broker
processes (LocalCluster, three nodes): a drain throttled to a rate takes at least size/rate,
with the rates and throttled-replicas lists set while it moves and gone once it is done; a
rebalance whose moves finish while no operator runs has its throttle cleared by the next
step, as after an operator restart.

The brokers measure the quota over two one-second windows (`replication.quota.window.num`)
rather than Kafka's eleven, so the throttle shows within a short move."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TypeVar

import pytest

from e2e.support import ck_producer, unique, wait_until
from moldau.client.admin import AsyncAdmin, ConfigResource, ConfigSource, NewTopic
from moldau.cluster import LocalCluster, free_base_port
from moldau.operator.kafkaview import read_view
from moldau.operator.pools import ScaleDown
from moldau.operator.scaler import COMPLETE, MOVING, drain_step, rebalance_step
from moldau.operator.throttle import FOLLOWER_REPLICAS, LEADER_REPLICAS, RATES
from tests.operator.cluster_admin import TIMEOUT, with_admin

pytestmark = pytest.mark.timeout(600)
T = TypeVar("T")
RATE = 400 * 1024  # bytes per second
VALUE = b"x" * 10_000
# A move may beat size/rate by one window of the rate plus one fetch (1 MiB) before the
# quota first measures an excess.
SLACK_BYTES = RATE + 1024 * 1024


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("throttle") / "cluster", brokers=3,
                      base_port=free_base_port(3),
                      overrides={"auto.leader.rebalance.enable": "false",
                                 "replication.quota.window.num": "2"}) as local:
        yield local


def fill(cluster: LocalCluster, topic: str, assignment: dict[int, list[int]],
         megabytes: float) -> int:
    """Create the topic and write `megabytes` spread over its partitions; bytes written."""
    with_admin(cluster, lambda admin: admin.create_topics(
        [NewTopic(topic, replica_assignment=assignment)]))
    producer = ck_producer(cluster.bootstrap_servers, acks="all", **{"linger.ms": 20})
    count = int(megabytes * 1_000_000) // len(VALUE)
    for n in range(count):
        producer.produce(topic, VALUE, partition=n % len(assignment))
        if n % 100 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return count * len(VALUE)


async def _throttles(admin: AsyncAdmin, topic: str) -> dict[str, dict[str, str]]:
    """The brokers' own throttle rates and the topic's throttled-replicas lists, where set."""
    found: dict[str, dict[str, str]] = {}
    for broker in (1, 2, 3):
        resource = ConfigResource.broker(broker)
        entries = (await admin.describe_configs([resource]))[resource]
        own = {name: entries[name].value or "" for name in RATES
               if entries[name].source is ConfigSource.DYNAMIC_BROKER_CONFIG}
        if own:
            found[str(broker)] = own
    resource = ConfigResource.topic(topic)
    entries = (await admin.describe_configs([resource]))[resource]
    listed = {name: entries[name].value or "" for name in (LEADER_REPLICAS, FOLLOWER_REPLICAS)
              if entries[name].value}
    if listed:
        found[topic] = listed
    return found


def throttles(cluster: LocalCluster, topic: str) -> dict[str, dict[str, str]]:
    return with_admin(cluster, lambda admin: _throttles(admin, topic))


def test_a_throttled_drain_keeps_to_the_rate_and_clears_it(three: LocalCluster) -> None:
    topic = unique("drain")
    size = fill(three, topic, {0: [3], 1: [3]}, 4.5)
    down = ScaleDown("brokers", 2, 3, (3,))

    async def step(admin: AsyncAdmin):
        view = await read_view(admin, TIMEOUT)
        return await drain_step(admin, view, [down], {1, 2, 3}, TIMEOUT, RATE)

    started = time.monotonic()
    first = with_admin(three, step)
    assert first.refusals == [] and first.shrink == {}
    assert [reason for reason, _, _ in first.events] == ["DrainStarted"]
    rate = {name: str(RATE) for name in RATES}
    # Broker 3 sends, the broker taking each partition copies (drain.py picks 1 and 2).
    set_now = throttles(three, topic)
    assert set_now[topic] == {LEADER_REPLICAS: "0:3,1:3",
                              FOLLOWER_REPLICAS: set_now[topic][FOLLOWER_REPLICAS]}
    followers = sorted(set_now[topic][FOLLOWER_REPLICAS].split(","))
    assert followers in (["0:1", "1:2"], ["0:2", "1:1"]), followers
    assert {key: value for key, value in set_now.items() if key != topic} == {
        "1": rate, "2": rate, "3": rate}

    def moved() -> bool:
        done = with_admin(three, step)
        return done.shrink == {"brokers": 2}

    wait_until(moved, 300, "broker 3 drained", 0.5)
    took = time.monotonic() - started
    print(f"throttled drain: {size} bytes in {took:.1f} s = {size / took / 1024:.0f} KiB/s "
          f"at a throttle of {RATE / 1024:.0f} KiB/s")
    assert took >= (size - SLACK_BYTES) / RATE, f"{size} bytes drained in {took:.1f} s"
    assert throttles(three, topic) == {}


def test_a_rebalance_clears_the_throttle_its_moves_left_after_a_restart(
        three: LocalCluster) -> None:
    topic = unique("spread")
    fill(three, topic, {p: [1] for p in range(3)}, 1.5)

    async def step(admin: AsyncAdmin, state: dict):
        view = await read_view(admin, TIMEOUT)
        return await rebalance_step(admin, view, state, [1, 2, 3], TIMEOUT, RATE)

    state = {"state": "Pending", "reason": "ScaleUp", "brokers": [2, 3]}
    state, events = with_admin(three, lambda admin: step(admin, state))
    assert state["state"] == MOVING, state
    assert [reason for reason, _, _ in events] == ["RebalanceStarted"]
    assert throttles(three, topic)[topic][LEADER_REPLICAS].startswith(("0:1", "1:1", "2:1"))

    # The operator stops here; the moves finish without it and the throttle stays.
    wait_until(lambda: not with_admin(three, lambda admin: read_view(admin, TIMEOUT)).moving,
               120, "the moves to finish", 0.5)
    assert topic in throttles(three, topic)

    # A new operator carries on from the status: the next steps clear it.
    def settled() -> bool:
        nonlocal state
        state, _ = with_admin(three, lambda admin: step(admin, state))
        return state["state"] == COMPLETE

    wait_until(settled, 180, "the rebalance to complete", 0.5)
    assert throttles(three, topic) == {}

"""Is it safe now: Strimzi's canRoll rule on min.insync.replicas, the quorum majority of a
controller restart, and what a previous restart must have recovered first."""

from __future__ import annotations

from moldau.client.admin import QuorumInfo, QuorumReplica
from moldau.operator.kafkaview import KafkaView, PartitionState
from moldau.operator.roll_safety import (
    broker_blockers,
    controller_blockers,
    lagging_voters,
    unsettled,
    voter_lags,
)


def part(topic: str, index: int, replicas: tuple, isr: tuple, leader: int | None = None
         ) -> PartitionState:
    return PartitionState(topic, index, replicas, isr, replicas[0] if leader is None else leader)


def quorum(leader: int, ends: dict[int, int]) -> QuorumInfo:
    return QuorumInfo(leader, 3, max(ends.values()),
                      tuple(QuorumReplica(voter, end) for voter, end in ends.items()), ())


def view(*partitions: PartitionState, min_isr: dict | None = None, brokers=(1, 2, 3),
         moving=(), ends: dict | None = None) -> KafkaView:
    return KafkaView(frozenset(brokers), tuple(partitions), min_isr or {},
                     quorum=quorum(1, ends or {1: 10, 2: 10, 3: 10}),
                     targets={key: (1, 2, 3) for key in moving})


def test_a_broker_in_an_isr_at_min_insync_replicas_must_wait() -> None:
    seen = view(part("t", 0, (1, 2, 3), (1, 2)), min_isr={"t": 2})
    assert broker_blockers(1, seen) == ["t-0 would go under min.insync.replicas"]
    # Broker 3 is not in that ISR: its restart takes nothing under.
    assert broker_blockers(3, seen) == []
    # With the whole ISR there is room for one restart.
    assert broker_blockers(1, view(part("t", 0, (1, 2, 3), (1, 2, 3)), min_isr={"t": 2})) == []


def test_a_partition_already_under_holds_every_broker_with_a_replica() -> None:
    seen = view(part("t", 0, (1, 2, 3), (1,)), part("t", 1, (2, 3, 1), (2, 3, 1)),
                min_isr={"t": 2})
    assert broker_blockers(3, seen) == ["t-0 already under min.insync.replicas"]
    assert broker_blockers(1, seen) == ["t-0 already under min.insync.replicas"]


def test_topics_that_cannot_survive_any_restart_do_not_hold_the_roll() -> None:
    # Replication factor 1, or as many replicas as min.insync.replicas: unavoidable.
    seen = view(part("one", 0, (1,), (1,)), part("two", 0, (1, 2), (1, 2)),
                min_isr={"one": 1, "two": 2})
    assert broker_blockers(1, seen) == []


def test_min_insync_replicas_is_per_topic_and_messages_are_short() -> None:
    parts = [part("t", i, (1, 2, 3), (1, 2)) for i in range(5)]
    seen = view(*parts, part("u", 0, (1, 2, 3), (1, 2)), min_isr={"t": 2, "u": 1})
    assert broker_blockers(1, seen) == [
        "t-0, t-1, t-2 and 2 more would go under min.insync.replicas"]


def test_voter_lags_and_the_caught_up_majority() -> None:
    caught_up = quorum(1, {1: 500, 2: 495, 3: 500})
    assert voter_lags(caught_up) == {1: 0, 2: 5, 3: 0}
    assert lagging_voters(caught_up) == []
    assert controller_blockers(2, caught_up) == []
    one_behind = quorum(1, {1: 500, 2: 100, 3: 500})
    assert lagging_voters(one_behind) == [2]
    # Restarting 3 would leave only the leader caught up: not a majority of three.
    assert controller_blockers(3, one_behind) == [
        "only 1 of the other voters are caught up with the metadata quorum; 2 of 3 must stay"]
    assert controller_blockers(2, one_behind) == []
    unknown = QuorumInfo(1, 3, 9, (QuorumReplica(1, 9), QuorumReplica(2, -1),
                                   QuorumReplica(3, 9)), ())
    assert voter_lags(unknown)[2] is None and lagging_voters(unknown) == [2]
    # A single voter restarts whatever: there is no other way.
    assert controller_blockers(0, quorum(0, {0: 7})) == []
    assert controller_blockers(1, None) == ["the metadata quorum did not answer"]


def test_a_previous_restart_must_have_settled() -> None:
    settled = view(part("t", 0, (1, 2, 3), (1, 2, 3)))
    assert unsettled(settled) == []
    assert unsettled(view(part("t", 0, (1, 2, 3), (1, 2, 3)), ends={1: 90, 2: 10, 3: 90})) == [
        "controllers 2 to catch up with the metadata quorum"]
    # Broker 2 is live again but not back in the ISR.
    assert unsettled(view(part("t", 0, (1, 2, 3), (1, 3)))) == [
        "t-0 to have its live replicas back in sync"]
    # A replica on a broker that is not live does not count; one being added does not either.
    assert unsettled(view(part("t", 0, (1, 2, 3), (1, 3)), brokers=(1, 3))) == []
    assert unsettled(view(part("t", 0, (1, 2, 3), (1, 3)), moving=[("t", 0)])) == []
    # A partition led by a node that is gone, while a live replica is in sync.
    assert unsettled(view(part("t", 0, (1, 2, 3), (1, 2, 3), leader=4),
                          part("t", 1, (1, 2, 3), (1, 2, 3), leader=-1))) == [
        "t-0, t-1 to get a live leader"]

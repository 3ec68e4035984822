"""The balance planner: replicas and leaderships within one per broker after brokers are
added, existing replicas kept where they can be, racks respected; and the drain plan."""

from __future__ import annotations

import random

from moldau.operator.balance import (
    balance,
    is_balanced,
    leader_counts,
    rack_spread,
    replica_counts,
    spread,
)
from moldau.operator.drain import drain, drain_refusal, holding


def round_robin(topic: str, partitions: int, factor: int, brokers: list[int]) -> dict:
    return {(topic, p): tuple(brokers[(p + i) % len(brokers)] for i in range(factor))
            for p in range(partitions)}


def applied(assignment: dict, changes: dict) -> dict:
    return {**assignment, **changes}


def moved_replicas(before: dict, after: dict) -> int:
    return sum(len(set(after[k]) - set(before[k])) for k in before)


def test_three_to_five_brokers_balances_within_one_keeping_most_replicas() -> None:
    before = {**round_robin("orders", 12, 3, [100, 101, 102]),
              **round_robin("__consumer_offsets", 50, 3, [100, 101, 102])}
    brokers = [100, 101, 102, 103, 104]
    assert not is_balanced(before, brokers)
    after = applied(before, balance(before, brokers))
    assert is_balanced(after, brokers)
    counts = replica_counts(after, brokers)
    assert sorted(counts.values()) == [37, 37, 37, 37, 38]  # 186 replicas over 5
    assert spread(leader_counts(after, brokers)) <= 1
    # Only what the new brokers need moved: 74 replicas of 186.
    assert moved_replicas(before, after) == counts[103] + counts[104] == 74
    # Every partition keeps its replication factor and holds a broker once.
    assert all(len(after[k]) == 3 == len(set(after[k])) for k in after)


def test_a_balanced_assignment_changes_nothing() -> None:
    even = round_robin("t", 6, 2, [1, 2, 3])
    assert balance(even, [1, 2, 3]) == {}
    assert balance({}, [1, 2]) == {}


def test_leaderships_balance_by_reordering_without_moving_data() -> None:
    skewed = {("t", p): (1, 2, 3) for p in range(6)}
    changes = balance(skewed, [1, 2, 3])
    after = applied(skewed, changes)
    assert all(set(after[k]) == {1, 2, 3} for k in after)  # nothing moved
    assert dict(leader_counts(after, [1, 2, 3])) == {1: 2, 2: 2, 3: 2}


def test_racks_are_never_made_worse() -> None:
    racks = {1: "a", 2: "b", 3: "a", 4: "b", 5: "a"}
    before = {("t", p): ((1, 2) if p % 2 else (3, 4)) for p in range(8)}
    after = applied(before, balance(before, [1, 2, 3, 4, 5], racks))
    assert all(rack_spread(after[k], racks) == 2 for k in after)
    # Each partition keeps one replica per rack: rack a's 8 replicas spread over its three
    # brokers, rack b's over its two, each within one.
    counts = replica_counts(after, [1, 2, 3, 4, 5])
    assert sorted(counts[b] for b in (1, 3, 5)) == [2, 3, 3]
    assert (counts[2], counts[4]) == (4, 4)


def test_replicas_on_brokers_that_are_gone_are_placed_first() -> None:
    before = {("t", 0): (9, 1), ("t", 1): (1, 9), ("t", 2): (2, 3)}
    after = applied(before, balance(before, [1, 2, 3]))
    assert all(9 not in replicas for replicas in after.values())
    assert is_balanced(after, [1, 2, 3])


def test_random_assignments_always_end_balanced() -> None:
    rng = random.Random(7)
    for _ in range(40):
        old = list(range(1, rng.randint(2, 5) + 1))
        brokers = old + list(range(10, 10 + rng.randint(1, 3)))
        factor = rng.randint(1, len(old))
        before = {("t", p): tuple(rng.sample(old, factor)) for p in range(rng.randint(1, 60))}
        after = applied(before, balance(before, brokers))
        assert is_balanced(after, brokers), (before, brokers)


def test_a_drain_moves_only_the_leaving_brokers_replicas() -> None:
    before = round_robin("t", 10, 3, [100, 101, 102, 103, 104])
    targets = drain(before, [103, 104], [100, 101, 102])
    after = applied(before, targets)
    assert holding(after, [103, 104]) == {}
    assert set(targets) == {k for k, replicas in before.items() if {103, 104} & set(replicas)}
    for key, replicas in targets.items():
        kept = [r for r in before[key] if r not in (103, 104)]
        assert list(replicas[:len(kept)]) == kept  # the replicas with the data lead
        assert len(replicas) == 3 == len(set(replicas))
    assert holding(before, [103, 104]) == {103: 6, 104: 6}


def test_a_drain_with_more_replicas_than_brokers_left_is_refused() -> None:
    before = {**round_robin("orders", 4, 3, [100, 101, 102, 103]),
              **round_robin("logs", 2, 1, [100, 101, 102, 103])}
    assert drain_refusal(before, [102, 103], [100, 101]) == (
        "cannot remove brokers 102, 103: topic 'orders' has replication factor 3, and only 2 "
        "brokers would remain (100, 101); lower the replication factor or keep more brokers")
    assert drain_refusal(before, [103], [100, 101, 102]) is None

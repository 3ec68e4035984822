"""Replica placement as Kafka does it: leaders and followers spread evenly, replicas of a
partition on distinct brokers and, with racks, on as many racks as possible."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from moldau.broker.metadata.placement import place_replicas
from moldau.errors import ErrorCode, KafkaError


def no_racks(count: int) -> list[tuple[int, str | None]]:
    return [(broker, None) for broker in range(count)]


def test_known_layout_without_racks():
    # 5 brokers, 10 partitions, RF 3, start 0, shift 0: the leader walks the brokers, the
    # followers come right after it, one further along after every 5 partitions.
    placed = place_replicas(10, 3, no_racks(5), start=0, shift=0)
    assert placed[0] == [0, 1, 2]
    assert placed[4] == [4, 0, 1]
    assert placed[5] == [0, 2, 3]  # shift grew by one
    assert placed[9] == [4, 1, 2]


def test_known_layout_with_racks():
    brokers = [(0, "a"), (1, "a"), (2, "b"), (3, "b"), (4, "c"), (5, "c")]
    placed = place_replicas(6, 3, brokers, start=0, shift=0)
    # Rack-alternated order: 0(a) 2(b) 4(c) 1(a) 3(b) 5(c).
    assert placed[0] == [0, 2, 4]
    assert placed[1] == [2, 4, 1]


@pytest.mark.parametrize("seed", range(20))
def test_balance_and_distinct_replicas(seed):
    rng = random.Random(seed)
    count = rng.randint(1, 9)
    factor = rng.randint(1, count)
    partitions = count * rng.randint(1, 6)
    placed = place_replicas(partitions, factor, no_racks(count),
                            start=rng.randrange(count), shift=rng.randrange(count))
    assert sorted(placed) == list(range(partitions))
    for replicas in placed.values():
        assert len(replicas) == factor == len(set(replicas))
    leaders = Counter(replicas[0] for replicas in placed.values())
    assert set(leaders.values()) == {partitions // count}  # exactly even
    replicas_per_broker = Counter(b for replicas in placed.values() for b in replicas)
    assert max(replicas_per_broker.values()) - min(replicas_per_broker.values()) <= 1 or \
        set(replicas_per_broker.values()) == {partitions * factor // count}


@pytest.mark.parametrize("seed", range(20))
def test_racks_are_spread(seed):
    rng = random.Random(seed)
    racks = rng.randint(2, 4)
    brokers = [(b, f"r{rng.randrange(racks)}") for b in range(rng.randint(racks, 9))]
    used_racks = {rack for _, rack in brokers}
    factor = rng.randint(1, len(brokers))
    placed = place_replicas(len(brokers) * 3, factor, brokers, start=rng.randrange(9),
                            shift=rng.randrange(9))
    rack_of = dict(brokers)
    for replicas in placed.values():
        assert len(set(replicas)) == factor
        assert len({rack_of[b] for b in replicas}) == min(factor, len(used_racks))


def test_added_partitions_continue_the_pattern():
    whole = place_replicas(8, 2, no_racks(4), start=1, shift=2)
    tail = place_replicas(3, 2, no_racks(4), first_partition=5, start=1, shift=2)
    # The shift is derived from the partition number, so a continuation matches, except
    # for shift steps counted before first_partition (Kafka has the same property).
    assert {p: r[0] for p, r in tail.items()} == {p: whole[p][0] for p in range(5, 8)}


def test_errors():
    with pytest.raises(KafkaError) as caught:
        place_replicas(1, 3, no_racks(2))
    assert caught.value.code is ErrorCode.invalid_replication_factor
    with pytest.raises(KafkaError) as caught:
        place_replicas(1, 1, [(0, "a"), (1, None)])
    assert caught.value.code is ErrorCode.invalid_replica_assignment

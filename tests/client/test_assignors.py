"""The consumer's partition assignors: exact outputs for range and round robin, balance and
stickiness properties for the sticky assignors, their user data, and resolving
partition.assignment.strategy."""

from __future__ import annotations

import itertools
import random
import struct
import time
from collections import Counter

import pytest

from moldau.client.consumer.assignors import (
    ASSIGNORS,
    CooperativeStickyAssignor,
    MemberSubscription,
    PartitionAssignor,
    RangeAssignor,
    RebalanceProtocol,
    RoundRobinAssignor,
    StickyAssignor,
    decode_sticky_user_data,
    encode_sticky_user_data,
    resolve_assignors,
)
from moldau.client.consumer_protocol import Assignment, Subscription
from moldau.client.types import TopicPartition
from moldau.config import ConfigError


def tp(name: str) -> TopicPartition:
    """"t0p2" -> TopicPartition("t0", 2)."""
    topic, _, partition = name.rpartition("p")
    return TopicPartition(topic, int(partition))


def tps(*names: str) -> list[TopicPartition]:
    return [tp(name) for name in names]


def member(member_id, topics, owned=(), generation=-1, instance=None, user_data=None,
           version=3):
    return MemberSubscription(member_id, instance,
                              Subscription(list(topics), user_data, list(owned), generation,
                                           None, version))


def as_lists(result):
    return {m: a.partitions for m, a in result.items()}


# ---------------------------------------------------------------------------------------
# range


def test_range_kafka_documented_example():
    members = [member("C0", ["t0", "t1"]), member("C1", ["t0", "t1"])]
    result = RangeAssignor().assign({"t0": 3, "t1": 3}, members)
    assert as_lists(result) == {"C0": tps("t0p0", "t0p1", "t1p0", "t1p1"),
                                "C1": tps("t0p2", "t1p2")}
    assert all(isinstance(a, Assignment) for a in result.values())


def test_range_uneven_subscriptions():
    members = [member("c2", ["t1"]), member("c1", ["t0", "t1"]), member("c0", ["t0"])]
    result = RangeAssignor().assign({"t0": 5, "t1": 2}, members)
    assert as_lists(result) == {"c0": tps("t0p0", "t0p1", "t0p2"),
                                "c1": tps("t0p3", "t0p4", "t1p0"),
                                "c2": tps("t1p1")}


def test_range_more_members_than_partitions_and_missing_topics():
    members = [member("a", ["t", "gone"]), member("b", ["t"]), member("c", ["t", "empty"]),
               member("d", ["gone"])]
    result = RangeAssignor().assign({"t": 2, "empty": 0, "unsubscribed": 4}, members)
    assert as_lists(result) == {"a": tps("tp0"), "b": tps("tp1"), "c": [], "d": []}


def test_range_orders_static_members_first_by_instance_id():
    members = [member("a-dynamic", ["t"]), member("z-static", ["t"], instance="i1"),
               member("b-static", ["t"], instance="i2")]
    result = RangeAssignor().assign({"t": 7}, members)
    assert as_lists(result) == {"z-static": tps("tp0", "tp1", "tp2"),
                                "b-static": tps("tp3", "tp4"),
                                "a-dynamic": tps("tp5", "tp6")}


def test_member_order_compares_like_java_strings():
    # Java orders by UTF-16 code unit: the surrogate pair of U+1F600 (0xD83D...) sorts
    # before U+FF61, although its code point is larger.
    emoji, halfwidth = "\U0001f600", "\uff61"
    members = [member(halfwidth, ["t"]), member(emoji, ["t"])]
    assert as_lists(RangeAssignor().assign({"t": 2}, members)) == {
        emoji: tps("tp0"), halfwidth: tps("tp1")}
    assert as_lists(RoundRobinAssignor().assign({"t": 3}, members)) == {
        emoji: tps("tp0", "tp2"), halfwidth: tps("tp1")}


# ---------------------------------------------------------------------------------------
# round robin


def test_roundrobin_kafka_documented_examples():
    members = [member("C0", ["t0", "t1"]), member("C1", ["t0", "t1"])]
    result = RoundRobinAssignor().assign({"t0": 3, "t1": 3}, members)
    assert as_lists(result) == {"C0": tps("t0p0", "t0p2", "t1p1"),
                                "C1": tps("t0p1", "t1p0", "t1p2")}

    members = [member("C0", ["t0"]), member("C1", ["t0", "t1"]),
               member("C2", ["t0", "t1", "t2"])]
    result = RoundRobinAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, members)
    assert as_lists(result) == {"C0": tps("t0p0"), "C1": tps("t1p0"),
                                "C2": tps("t1p1", "t2p0", "t2p1", "t2p2")}


def test_roundrobin_static_members_missing_topics_and_empty_members():
    members = [member("m1", ["b", "a"]), member("m0", ["a", "nope"]),
               member("s", ["b"], instance="static"), member("idle", [])]
    result = RoundRobinAssignor().assign({"a": 3, "b": 2, "nope": 0}, members)
    # Order: s (static), idle, m0, m1; topics a then b.
    assert as_lists(result) == {"s": tps("bp1"), "idle": [], "m0": tps("ap0", "ap2"),
                                "m1": tps("ap1", "bp0")}


def test_no_members():
    for cls in ASSIGNORS.values():
        assert cls().assign({"t": 3}, []) == {}


# ---------------------------------------------------------------------------------------
# sticky user data


def java_sticky_user_data(assignment, generation=None):
    """StickyAssignor user data as Kafka's Java client lays it out, built by hand."""
    out = struct.pack(">i", len(assignment))
    for topic, partitions in assignment:
        out += struct.pack(">h", len(topic)) + topic.encode()
        out += struct.pack(">i", len(partitions))
        out += b"".join(struct.pack(">i", p) for p in partitions)
    if generation is not None:
        out += struct.pack(">i", generation)
    return out


def test_sticky_user_data_matches_java_layout():
    data = java_sticky_user_data([("t0", [0, 2]), ("topic-1", [1])], 9)
    assert decode_sticky_user_data(data) == (tps("t0p0", "t0p2", "topic-1p1"), 9)
    assert encode_sticky_user_data(tps("t0p0", "t0p2", "topic-1p1"), 9) == data
    # The first version had no generation.
    v0 = java_sticky_user_data([("t0", [3])])
    assert decode_sticky_user_data(v0) == (tps("t0p3"), None)
    assert decode_sticky_user_data(None) == ([], None)
    assert decode_sticky_user_data(b"") == ([], None)
    # Garbage is ignored rather than failing the rebalance.
    assert decode_sticky_user_data(b"\x00\x00\x00\x05\x00") == ([], -1)
    assert decode_sticky_user_data(struct.pack(">i", -1)) == ([], -1)


def test_sticky_user_data_round_trip_through_the_assignor():
    assignor = StickyAssignor()
    assert assignor.subscription_user_data({"t"}) is None
    assignment = Assignment(tps("ap1", "bp0", "ap0"))
    assignor.on_assignment(assignment, 12)
    data = assignor.subscription_user_data({"a", "b"})
    assert data is not None
    partitions, generation = decode_sticky_user_data(data)
    assert sorted(partitions) == sorted(assignment.partitions)
    assert generation == 12
    # And it survives the subscription's own encoding.
    sub = Subscription.decode(Subscription(["a", "b"], data).encode())
    assert decode_sticky_user_data(sub.user_data) == (partitions, 12)


def test_cooperative_user_data_is_the_generation():
    assignor = CooperativeStickyAssignor()
    assert assignor.subscription_user_data({"t"}) == struct.pack(">i", -1)
    assignor.on_assignment(Assignment(tps("tp0")), 5)
    assert assignor.subscription_user_data({"t"}) == struct.pack(">i", 5)


def test_protocol_names_and_rebalance_protocols():
    assert {name: cls.name for name, cls in ASSIGNORS.items()} == {
        "range": "range", "roundrobin": "roundrobin", "sticky": "sticky",
        "cooperative-sticky": "cooperative-sticky"}
    eager = (RebalanceProtocol.EAGER,)
    assert RangeAssignor.supported_protocols == eager
    assert RoundRobinAssignor.supported_protocols == eager
    assert StickyAssignor.supported_protocols == eager
    assert CooperativeStickyAssignor.supported_protocols == (
        RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)
    assert RangeAssignor().subscription_user_data({"t"}) is None


# ---------------------------------------------------------------------------------------
# sticky: previous ownership


def test_sticky_keeps_assignment_from_java_user_data():
    members = [
        member("a", ["t"], user_data=java_sticky_user_data([("t", [5, 4, 3])], 3), version=0),
        member("b", ["t"], user_data=java_sticky_user_data([("t", [0, 1])]), version=0),
        member("c", ["t"], version=0),
    ]
    result = as_lists(StickyAssignor().assign({"t": 6}, members))
    assert result["a"] == tps("tp4", "tp5")      # keeps two (its quota), revokes tp3
    assert result["b"] == tps("tp0", "tp1")
    assert result["c"] == tps("tp2", "tp3")


def test_sticky_uses_owned_partitions_when_given():
    members = [member("a", ["t"], owned=tps("tp3"), generation=4),
               member("b", ["t"], owned=tps("tp0"), generation=4)]
    result = as_lists(StickyAssignor().assign({"t": 4}, members))
    assert tp("tp3") in result["a"] and tp("tp0") in result["b"]


def test_sticky_higher_generation_claim_wins():
    members = [
        member("a", ["t"], user_data=java_sticky_user_data([("t", [0, 1, 2])], 4)),
        member("b", ["t"], user_data=java_sticky_user_data([("t", [0, 1, 2])], 5)),
        member("c", ["t"]),
    ]
    result = as_lists(StickyAssignor().assign({"t": 3}, members))
    assert result["b"] == tps("tp0")
    assert sorted(result["a"] + result["c"]) == tps("tp1", "tp2")


def test_sticky_equal_generation_claims_cancel_out():
    members = [
        member("a", ["t"], user_data=java_sticky_user_data([("t", [1, 0])], 5)),
        member("b", ["t"], user_data=java_sticky_user_data([("t", [1])], 5)),
        member("c", ["t"], user_data=java_sticky_user_data([("t", [2])], 5)),
    ]
    # Neither a nor b may keep tp1: a keeps tp0 instead of its first claim.
    result = as_lists(StickyAssignor().assign({"t": 3}, members))
    assert result == {"a": tps("tp0"), "b": tps("tp1"), "c": tps("tp2")}


def test_cooperative_withholds_partitions_claimed_twice_in_one_generation():
    members = [member("a", ["t"], owned=tps("tp0", "tp1"), generation=5),
               member("b", ["t"], owned=tps("tp1"), generation=5)]
    result = as_lists(CooperativeStickyAssignor().assign({"t": 4}, members))
    # tp1 goes to nobody this round; both claimants give it up.
    assert tp("tp1") not in result["a"] + result["b"]
    assert tp("tp0") in result["a"]
    assert sorted(result["a"] + result["b"]) == tps("tp0", "tp2", "tp3")


def test_cooperative_generation_from_user_data_for_old_subscriptions():
    def coop(member_id, owned, generation):
        return member(member_id, ["t"], owned=owned, version=1,
                      user_data=struct.pack(">i", generation))

    members = [coop("a", tps("tp0", "tp1"), 3), coop("b", tps("tp0", "tp1"), 4), coop("c", [], -1)]
    result = as_lists(CooperativeStickyAssignor().assign({"t": 2}, members))
    # b's claims are newer; a's stale claims must be revoked before anyone else gets them.
    assert result["b"] == tps("tp0")
    assert result["a"] == [] and result["c"] == []


def test_cooperative_adjustment_matches_two_phase_rebalance():
    assignor = CooperativeStickyAssignor()
    members = [member("a", ["t"], owned=tps("tp0", "tp1", "tp2", "tp3"), generation=1),
               member("b", ["t"], generation=-1)]
    first = as_lists(assignor.assign({"t": 4}, members))
    assert first == {"a": tps("tp0", "tp1"), "b": []}
    members = [member("a", ["t"], owned=first["a"], generation=2),
               member("b", ["t"], owned=first["b"], generation=2)]
    second = as_lists(assignor.assign({"t": 4}, members))
    assert second == {"a": tps("tp0", "tp1"), "b": tps("tp2", "tp3")}


def test_sticky_and_cooperative_target_agree_when_nothing_moves():
    members = [member("a", ["t", "u"], owned=tps("tp0", "up1"), generation=2),
               member("b", ["t", "u"], owned=tps("tp1", "up0"), generation=2)]
    expected = {"a": tps("tp0", "up1"), "b": tps("tp1", "up0")}
    assert as_lists(StickyAssignor().assign({"t": 2, "u": 2}, members)) == expected
    assert as_lists(CooperativeStickyAssignor().assign({"t": 2, "u": 2}, members)) == expected


def test_uneven_balances_along_chains():
    # a can only take x, c only y and z; b takes x and y. Direct moves cannot improve
    # 3/2/1, but a -> b -> c can: one x partition to b, one y partition to c.
    members = [member("a", ["x"], owned=tps("xp0", "xp1", "xp2"), generation=1),
               member("b", ["x", "y"], owned=tps("yp0", "yp1"), generation=1),
               member("c", ["y", "z"], owned=tps("zp0"), generation=1)]
    result = as_lists(StickyAssignor().assign({"x": 3, "y": 2, "z": 1}, members))
    assert [len(result[m]) for m in "abc"] == [2, 2, 2]
    moved = sum(len(set(m.subscription.owned_partitions) - set(result[m.member_id]))
                for m in members)
    assert moved == 2


# ---------------------------------------------------------------------------------------
# sticky: properties over random rebalances


def eligible_partitions(topics, counts):
    return {TopicPartition(t, p) for t in topics for p in range(counts.get(t, 0))}


def check_valid(result, members, counts, complete=True):
    subscribed = {m.member_id: set(m.subscription.topics) for m in members}
    assert set(result) == set(subscribed)
    owners = Counter(p for parts in result.values() for p in parts)
    assert all(n == 1 for n in owners.values()), "partition assigned twice"
    for member_id, parts in result.items():
        assert set(parts) <= eligible_partitions(subscribed[member_id], counts)
    if complete:
        wanted = set().union(*(eligible_partitions(t, counts) for t in subscribed.values()))
        assert set(owners) == wanted


def check_locally_balanced(result, members, counts):
    """No single partition can move to another subscribed member with two fewer."""
    load = {m: len(parts) for m, parts in result.items()}
    by_topic: dict[str, list[str]] = {}
    for m in members:
        for topic in set(m.subscription.topics):
            if counts.get(topic):
                by_topic.setdefault(topic, []).append(m.member_id)
    for member_id, parts in result.items():
        for part in parts:
            for other in by_topic[part.topic]:
                assert load[other] >= load[member_id] - 1, (member_id, other, part)


def evolve(rng, state, topics, uneven):
    """Members leave, join and (with uneven subscriptions) change topics."""
    names = sorted(state)
    for name in rng.sample(names, rng.randint(0, max(0, len(names) // 3))):
        if len(state) > 1:
            del state[name]
    for _ in range(rng.randint(0 if state else 1, 3)):
        state[f"m{rng.randrange(10**6):06d}"] = {"topics": [], "owned": []}
    for info in state.values():
        if not info["topics"] or (uneven and rng.random() < 0.3):
            if uneven:
                info["topics"] = rng.sample(topics, rng.randint(1, len(topics)))
            else:
                info["topics"] = list(topics)


def random_counts(rng, topics):
    return {t: rng.randint(0, 12) for t in topics}


@pytest.mark.parametrize("seed", range(40))
def test_sticky_properties_with_equal_subscriptions(seed):
    rng = random.Random(seed)
    topics = [f"t{i}" for i in range(rng.randint(1, 4))]
    counts = random_counts(rng, topics)
    state: dict[str, dict] = {}
    assignor = StickyAssignor()
    for generation in range(1, 7):
        evolve(rng, state, topics, uneven=False)
        if rng.random() < 0.3:                           # a topic grows or appears
            counts[rng.choice(topics)] += rng.randint(1, 5)
        members = [member(name, info["topics"], instance=None,
                          user_data=encode_sticky_user_data(info["owned"], generation - 1)
                          if info["owned"] else None, version=0)
                   for name, info in state.items()]
        result = as_lists(assignor.assign(counts, members))
        check_valid(result, members, counts)
        loads = [len(parts) for parts in result.values()]
        assert max(loads) - min(loads) <= 1
        # Stickiness: each member keeps up to its quota, and as many members as possible
        # keep one more, which is the most any balanced assignment can keep.
        total = sum(counts.values())
        quota, extra = divmod(total, len(members))
        kept_total = 0
        over = 0
        for name, parts in result.items():
            owned = set(state[name]["owned"])
            kept = len(owned & set(parts))
            assert kept >= min(len(owned), quota)
            kept_total += kept
            over += len(owned) > quota
        assert kept_total == sum(min(len(state[n]["owned"]), quota) for n in result) + min(
            extra, over)
        for name, parts in result.items():
            state[name]["owned"] = parts


@pytest.mark.parametrize("seed", range(40))
def test_sticky_properties_with_uneven_subscriptions(seed):
    rng = random.Random(1000 + seed)
    topics = [f"t{i}" for i in range(rng.randint(2, 5))]
    counts = random_counts(rng, topics)
    state: dict[str, dict] = {}
    assignor = StickyAssignor()
    for generation in range(1, 7):
        evolve(rng, state, topics, uneven=True)
        if rng.random() < 0.3:
            counts[rng.choice(topics)] += rng.randint(1, 5)
        members = [member(name, info["topics"], owned=info["owned"], generation=generation - 1)
                   for name, info in state.items()]
        result = as_lists(assignor.assign(counts, members))
        check_valid(result, members, counts)
        check_locally_balanced(result, members, counts)
        # Nothing a member still may own is taken from it unless the loads demand it: an
        # assignment the algorithm produced is kept exactly when nothing changes.
        again = [member(name, info["topics"], owned=result[name], generation=generation)
                 for name, info in state.items()]
        assert as_lists(assignor.assign(counts, again)) == result
        for name, parts in result.items():
            state[name]["owned"] = parts


@pytest.mark.parametrize("seed", range(25))
def test_uneven_balance_is_optimal_on_small_groups(seed):
    rng = random.Random(5000 + seed)
    topics = ["a", "b", "c"]
    counts = {t: rng.randint(0, 3) for t in topics}
    names = ["m0", "m1", "m2", "m3"][:rng.randint(2, 4)]
    subs = {n: rng.sample(topics, rng.randint(1, 3)) for n in names}
    partitions = sorted(set().union(*(eligible_partitions(t, counts) for t in subs.values())))
    owned = {n: [] for n in names}
    for part in partitions:                       # a random, valid, unbalanced start
        holders = [n for n in names if part.topic in subs[n]]
        if rng.random() < 0.8:
            owned[rng.choice(holders[:1] or holders)].append(part)
    members = [member(n, subs[n], owned=owned[n], generation=1) for n in names]
    result = as_lists(StickyAssignor().assign(counts, members))
    check_valid(result, members, counts)
    best = None
    options = [[n for n in names if part.topic in subs[n]] for part in partitions]
    for choice in itertools.product(*options):
        loads = Counter(choice)
        score = sum(loads[n] ** 2 for n in names)
        best = score if best is None else min(best, score)
    assert sum(len(result[n]) ** 2 for n in names) == (best or 0)


def cooperative_round(assignor, state, counts, generation):
    members = [member(name, info["topics"], owned=info["owned"], generation=generation)
               for name, info in state.items()]
    result = as_lists(assignor.assign(counts, members))
    check_valid(result, members, counts, complete=False)
    # Never hand a partition to a new owner while another member still owns it.
    for name, parts in result.items():
        for part in set(parts) - set(state[name]["owned"]):
            assert not any(part in info["owned"] for other, info in state.items()
                           if other != name), (name, part)
    # Members give up whatever they were not assigned.
    for name, parts in result.items():
        state[name]["owned"] = parts
    return members, result


@pytest.mark.parametrize("uneven", [False, True])
@pytest.mark.parametrize("seed", range(30))
def test_cooperative_properties(seed, uneven):
    rng = random.Random(9000 + seed + 100 * uneven)
    topics = [f"t{i}" for i in range(rng.randint(1, 4))]
    counts = random_counts(rng, topics)
    state: dict[str, dict] = {}
    assignor = CooperativeStickyAssignor()
    generation = 0
    for _ in range(5):
        evolve(rng, state, topics, uneven=uneven)
        if rng.random() < 0.3:
            counts[rng.choice(topics)] += rng.randint(1, 5)
        before = {name: list(info["owned"]) for name, info in state.items()}
        generation += 1
        members, result = cooperative_round(assignor, state, counts, generation)
        if not uneven:
            quota = sum(counts.values()) // len(members)
            for name, parts in result.items():
                assert len(set(before[name]) & set(parts)) >= min(len(before[name]), quota)
        # Follow-up rebalances (members that revoked rejoin) complete the assignment.
        for _ in range(4):
            generation += 1
            members, result = cooperative_round(assignor, state, counts, generation)
            try:
                check_valid(result, members, counts)
            except AssertionError:
                assert uneven, "equal subscriptions complete in one follow-up"
                continue
            break
        check_valid(result, members, counts)
        if uneven:
            check_locally_balanced(result, members, counts)
        else:
            loads = [len(parts) for parts in result.values()]
            assert max(loads) - min(loads) <= 1


@pytest.mark.parametrize("cls", [StickyAssignor, CooperativeStickyAssignor])
def test_sticky_scales_to_large_groups(cls):
    rng = random.Random(7)
    counts = {f"topic-{i}": 100 for i in range(20)}       # 2000 partitions
    topics = sorted(counts)
    elapsed = 0.0

    def run(members):
        nonlocal elapsed
        start = time.perf_counter()
        result = cls().assign(counts, members)
        elapsed += time.perf_counter() - start
        return as_lists(result)

    equal = [member(f"member-{i:03d}", topics) for i in range(100)]
    first = run(equal)
    check_valid(first, equal, counts)
    # A third of the members stay with what they had, sixty new ones join.
    survivors = [member(m.member_id, topics, owned=first[m.member_id], generation=1)
                 for m in equal[::3]]
    newcomers = [member(f"new-{i:03d}", topics) for i in range(60)]
    second = run(survivors + newcomers)
    check_valid(second, survivors + newcomers, counts, complete=cls is StickyAssignor)
    for m in survivors:
        assert len(set(second[m.member_id]) & set(first[m.member_id])) == 20
    uneven = [member(f"member-{i:03d}", rng.sample(topics, rng.randint(1, 20)))
              for i in range(100)]
    result = run(uneven)
    check_valid(result, uneven, counts)
    check_locally_balanced(result, uneven, counts)
    # One member owns everything.
    pile = [member("member-000", topics, owned=[TopicPartition(t, p) for t in topics
                                                 for p in range(100)], generation=3)]
    piled = pile + uneven[1:]
    result = run(piled)
    check_valid(result, piled, counts, complete=cls is StickyAssignor)
    assert elapsed < 1.5


# ---------------------------------------------------------------------------------------
# resolve_assignors


class CustomAssignor(PartitionAssignor):
    name = "custom"

    def assign(self, partitions_per_topic, members):
        return {m.member_id: Assignment([]) for m in members}


def test_resolve_names_and_order():
    assignors = resolve_assignors("range, cooperative-sticky")
    assert [type(a) for a in assignors] == [RangeAssignor, CooperativeStickyAssignor]
    assert [type(a) for a in resolve_assignors(["roundrobin", "sticky"])] == [
        RoundRobinAssignor, StickyAssignor]
    assert [type(a) for a in resolve_assignors(["range,roundrobin"])] == [
        RangeAssignor, RoundRobinAssignor]


def test_resolve_java_class_names():
    spec = ("org.apache.kafka.clients.consumer.RangeAssignor,"
            "org.apache.kafka.clients.consumer.RoundRobinAssignor,"
            "org.apache.kafka.clients.consumer.StickyAssignor,"
            "org.apache.kafka.clients.consumer.CooperativeStickyAssignor")
    assert [a.name for a in resolve_assignors(spec)] == [
        "range", "roundrobin", "sticky", "cooperative-sticky"]


def test_resolve_instances_and_classes():
    custom = CustomAssignor()
    assignors = resolve_assignors([custom, StickyAssignor, "range"])
    assert assignors[0] is custom
    assert isinstance(assignors[1], StickyAssignor)
    assert isinstance(assignors[2], RangeAssignor)
    # Each resolution builds fresh state for the named assignors.
    assert resolve_assignors("sticky")[0] is not resolve_assignors("sticky")[0]


@pytest.mark.parametrize("spec, message", [
    ("range,bogus", "'bogus'"),
    (["org.apache.kafka.clients.consumer.NopeAssignor"], "NopeAssignor"),
    ("", "at least one"),
    ([], "at least one"),
    (" , ", "at least one"),
    ("range,range", "more than once"),
    ([RangeAssignor(), "range"], "more than once"),
    ([42], "42"),
    ([dict], "dict"),
    ([PartitionAssignor], "PartitionAssignor"),
    (7, "7"),
])
def test_resolve_errors(spec, message):
    with pytest.raises(ConfigError, match="partition.assignment.strategy") as info:
        resolve_assignors(spec)
    assert message in str(info.value)
